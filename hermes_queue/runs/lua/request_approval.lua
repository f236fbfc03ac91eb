-- The worker asks for consent: fenced append of approval.request and status
-- waiting_for_approval, in one step, so a client that sees the status can answer at once.
-- Requests left pending by an earlier attempt are dropped (that attempt is gone; a run whose
-- status is running has nothing of its own pending). A retry with the same request id (its
-- reply lost) changes nothing.
-- KEYS: record, events
-- ARGV: attempt, maxlen, ttl_s, ts, request_id, data
-- Returns {'waiting'}, {'stopping'} (a stop request came first) or false (fenced out).
if redis.call('HEXISTS', KEYS[1], 'approval:' .. ARGV[5]) == 1 then return {'waiting'} end
if not fenced(KEYS[1], ARGV[1]) then return false end
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'stopping' then return {'stopping'} end
local pending = ''
if status == 'waiting_for_approval' then
  pending = (redis.call('HGET', KEYS[1], 'approvals_pending') or '') .. ' '
end
append_event(KEYS[1], KEYS[2], 'approval.request', ARGV[1], ARGV[4], ARGV[6], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'waiting_for_approval',
  'approvals_pending', pending .. ARGV[5], 'approval:' .. ARGV[5], ARGV[6])
-- Subscriptions to approval.requested: queued in this step, as finish() queues a run's end.
local hook = redis.call('HMGET', KEYS[1], 'webhook_outbox', 'run_id')
if hook[1] then
  redis.call('ZADD', hook[1], 'NX', now_ms(), 'a:' .. hook[2] .. ':' .. ARGV[5])
end
return {'waiting'}
