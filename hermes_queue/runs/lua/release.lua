-- Graceful hand-back on worker shutdown: the run returns to the queue for another worker, which
-- is woken at once. A run being stopped is not handed back: the caller cancels it.
-- KEYS: record, leases, queue, turn_order, fair
-- ARGV: run_id, attempt, ts, wake_channel
if not fenced(KEYS[1], ARGV[2]) then return 'lost' end
if redis.call('HGET', KEYS[1], 'status') == 'stopping' then return 'stopping' end
local f = redis.call('HMGET', KEYS[1], unpack(RUNNING_FIELDS))
redis.call('HSET', KEYS[1], 'status', 'queued', 'updated_at', ARGV[3])
redis.call('HDEL', KEYS[1], 'worker', 'running_in')
redis.call('ZREM', KEYS[2], ARGV[1])
left_running(f, 1)
requeue(KEYS[3], KEYS[4], KEYS[5], ARGV[1], f[1] or 'default', now_ms())
redis.call('PUBLISH', ARGV[4], ARGV[1])
return 'released'
