-- Create a session run, keeping at most one active run per session. When the session is busy,
-- "reject" refuses (returning the active run id); "enqueue" parks the run behind it without a
-- job, and settle_session starts it when the active run ends. A stale active pointer (its run
-- ended or expired without settling) is cleared first, so a session can never stay blocked.
-- KEYS: record, arq_job, queue, active_key, pending_key, blocked
-- ARGV: run_id, job_payload, job_ttl_ms, record_ttl_s, wake_channel, strategy, field, value, ...
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local current = redis.call('GET', KEYS[4])
if current then
  local status = redis.call('HGET', current, 'status')
  if not status or TERMINAL[status] then
    redis.call('DEL', KEYS[4])
    current = false
  end
end
if current and ARGV[6] == 'reject' then
  return {'busy', redis.call('HGET', current, 'run_id')}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
redis.call('HSET', KEYS[1], 'active_key', KEYS[4], 'pending_key', KEYS[5], 'job', ARGV[2],
  'job_key', KEYS[2], 'job_ttl_ms', ARGV[3], 'queue_key', KEYS[3], 'wake_channel', ARGV[5],
  'blocked_key', KEYS[6])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if current then
  redis.call('RPUSH', KEYS[5], KEYS[1])
  redis.call('ZADD', KEYS[6], now_ms(), KEYS[1])
  return {'waiting', redis.call('HGET', current, 'run_id')}
end
redis.call('SET', KEYS[4], KEYS[1])
redis.call('PSETEX', KEYS[2], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[3], now_ms(), ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[1])
return {'created'}
