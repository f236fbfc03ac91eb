-- Create a session run, keeping at most one active run per session. When the session is busy,
-- "reject" refuses (returning the active run id); "enqueue" parks the run behind it, out of the
-- queue, and settle_session queues it when the active run ends. A stale active pointer (its run
-- ended or expired without settling) is cleared first, so a session can never stay blocked.
-- KEYS: record, queue, active_key, pending_key, blocked
-- ARGV: run_id, record_ttl_s, wake_channel, strategy, field, value, ...
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local current = redis.call('GET', KEYS[3])
if current then
  local status = redis.call('HGET', current, 'status')
  if not status or TERMINAL[status] then
    redis.call('DEL', KEYS[3])
    current = false
  end
end
if current and ARGV[4] == 'reject' then
  return {'busy', redis.call('HGET', current, 'run_id')}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('HSET', KEYS[1], 'active_key', KEYS[3], 'pending_key', KEYS[4], 'queue_key', KEYS[2],
  'wake_channel', ARGV[3], 'blocked_key', KEYS[5])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if current then
  redis.call('RPUSH', KEYS[4], KEYS[1])
  redis.call('ZADD', KEYS[5], now_ms(), KEYS[1])
  return {'waiting', redis.call('HGET', current, 'run_id')}
end
redis.call('SET', KEYS[3], KEYS[1])
redis.call('ZADD', KEYS[2], now_ms(), ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return {'created'}
