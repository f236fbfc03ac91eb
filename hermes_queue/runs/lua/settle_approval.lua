-- The worker gives up waiting: unless an answer arrived meanwhile (it wins), the request is
-- denied with timed_out (upstream-api.md §4.3: silence is not consent). Fenced, and safe to retry:
-- a second call finds the recorded deny.
-- KEYS: record, events
-- ARGV: attempt, maxlen, ttl_s, ts, request_id
-- Returns {'answered', choice}, {'timed_out', 'deny'} or false (fenced out).
local choice = redis.call('HGET', KEYS[1], 'choice:' .. ARGV[5])
if choice then return {'answered', choice} end
if not fenced(KEYS[1], ARGV[1]) then return false end
resolve(KEYS[1], KEYS[2], {ARGV[5]}, 'deny', ARGV[1], ARGV[4], ARGV[2], ARGV[3], {timed_out = true})
return {'timed_out', 'deny'}
