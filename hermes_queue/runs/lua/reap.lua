-- Act on a run whose lease expired: its worker died or froze. A run being stopped ends
-- cancelled; one out of attempts fails with reason worker_lost; otherwise it goes back to the
-- queue and the next claim announces run.restarted.
-- KEYS: record, events, leases, queue, stats, failures, turn_order, fair, leases_heard
-- ARGV: run_id, max_attempts, ts, retention_s, maxlen, wake_channel, failed_data,
--       cancelled_data, error_text, reason (worker_lost), quiet_ms
local now = leases_heard(KEYS[3], KEYS[9], ARGV[11])
local deadline = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not deadline then return 'gone' end
if tonumber(deadline) > now then return 'alive' end
local status = redis.call('HGET', KEYS[1], 'status')
if not status or not ACTIVE[status] then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 'gone'
end
local attempt = redis.call('HGET', KEYS[1], 'attempt') or '0'
local lost = redis.call('HINCRBY', KEYS[1], 'lost', 1)
if status == 'stopping' then
  finish(KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6], ARGV[1], 'cancelled', attempt, ARGV[3],
    ARGV[4], ARGV[5], {'run.cancelled', ARGV[8]}, {})
  return 'cancelled'
end
if lost >= tonumber(ARGV[2]) then
  finish(KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6], ARGV[1], 'failed', attempt, ARGV[3],
    ARGV[4], ARGV[5], {'run.failed', ARGV[7]}, {'error', ARGV[9], 'reason', ARGV[10]})
  return 'failed'
end
local f = redis.call('HMGET', KEYS[1], unpack(RUNNING_FIELDS))
redis.call('HSET', KEYS[1], 'status', 'queued', 'updated_at', ARGV[3])
redis.call('HDEL', KEYS[1], 'worker', 'running_in')
redis.call('ZREM', KEYS[3], ARGV[1])
left_running(f, 1)
requeue(KEYS[4], KEYS[7], KEYS[8], ARGV[1], f[1] or 'default', now_ms())
redis.call('PUBLISH', ARGV[6], ARGV[1])
return 'requeued'
