-- A finished agent step, recorded with the events emitted before it, in one fenced call
-- (agents/steps.py): the events as append.lua writes them, then the step record appended to the
-- run's steps list, which a later attempt resumes from. The record says which event it follows
-- (``after``: the last event id written before it), so a resumed attempt can tell its readers
-- which events are still valid (``run.resumed``). A retried call (same batch token) records
-- nothing twice. A step that applied steers takes them off the run's pending steers in the same
-- call (steer_prelude.lua), so a steer is applied once, whichever attempt resumes; the reply
-- hands the worker the steers still pending.
-- KEYS: record, events, steps
-- ARGV: attempt, maxlen, ttl_s, ts, batch_token, record_ttl_s, step_json, applied_steer_ids,
--       type1, data1, ...
-- Returns false (fenced off) or {{id1, id2, ...}, pending steers JSON or ''}.
local ids, replayed, last = append_batch(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  ARGV[5], 9, nil)
if not ids then return false end
if not replayed then
  -- Concatenated, not re-encoded: cjson would turn an empty list of the record into an object.
  local count = redis.call('RPUSH', KEYS[3], '{"after":' .. cjson.encode(last) .. ',"attempt":'
    .. tonumber(ARGV[1]) .. ',"step":' .. ARGV[7] .. '}')
  redis.call('EXPIRE', KEYS[3], ARGV[6])
  redis.call('HSET', KEYS[1], 'steps', count, 'step_event', last)
  apply_steers(KEYS[1], ARGV[8])
end
return {ids, redis.call('HGET', KEYS[1], 'steers_pending') or ''}
