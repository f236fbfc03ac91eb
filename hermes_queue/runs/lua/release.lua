-- Graceful hand-back on worker shutdown: the run returns to the queue for another worker, which
-- is woken at once. A run being stopped is not handed back: the caller cancels it.
-- KEYS: record, leases, queue
-- ARGV: run_id, attempt, ts, wake_channel
if not fenced(KEYS[1], ARGV[2]) then return 'lost' end
if redis.call('HGET', KEYS[1], 'status') == 'stopping' then return 'stopping' end
redis.call('HSET', KEYS[1], 'status', 'queued', 'updated_at', ARGV[3])
redis.call('HDEL', KEYS[1], 'worker')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], now_ms(), ARGV[1])
redis.call('PUBLISH', ARGV[4], ARGV[1])
return 'released'
