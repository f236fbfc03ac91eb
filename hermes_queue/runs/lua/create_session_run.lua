-- Create a session run, keeping at most one active run per session. When the session is busy,
-- "reject" refuses (returning the active run id); "enqueue" parks the run behind it, out of the
-- queue, and settle_session queues it when the active run ends. A stale active pointer (its run
-- ended or expired without settling) is cleared first, so a session can never stay blocked.
-- An abandoned active run (started by a request that reads it, and nobody reads it any more:
-- streams/presence.py) never blocks: the new run parks behind it whatever the strategy, and the
-- reply says 'abandoned' so the caller stops it; right after a silence of the shard, whose
-- readers' entries lapsed in it too, none is (prelude readers_silenced).
-- KEYS: record, queue, active, pending, blocked, readers, turn_order, fair, leases, leases_heard
--       (active, pending: the session's; readers: the new run's)
-- An earlier send of this very call having created the run (created_by in prelude.lua: sent
-- again after a lost reply), it answers as that send did, as far as it still holds: 'waiting'
-- while the run is parked, else 'created'.
-- ARGV: run_id, record_ttl_s, wake_channel, strategy, reader_id ('' when no request reads the
--       run), reader_ttl_ms, tenant, weight, quiet_ms, field, value, ...
local silenced = readers_silenced(KEYS[10], leases_heard(KEYS[9], KEYS[10], ARGV[9]))
if redis.call('EXISTS', KEYS[1]) == 1 then
  if not created_by(KEYS[1], ARGV, 10) then return {'exists'} end
  local active = redis.call('GET', KEYS[3])
  if active and active ~= KEYS[1] and redis.call('ZSCORE', KEYS[5], KEYS[1]) then
    if not silenced and abandoned(active) then
      return {'waiting', redis.call('HGET', active, 'run_id'), 'abandoned'}
    end
    return {'waiting', redis.call('HGET', active, 'run_id')}
  end
  return {'created'}
end
local current = redis.call('GET', KEYS[3])
if current then
  local status = redis.call('HGET', current, 'status')
  if not status or TERMINAL[status] then
    redis.call('DEL', KEYS[3])
    current = false
  end
end
local superseded = current and not silenced and abandoned(current)
if current and ARGV[4] == 'reject' and not superseded then
  return {'busy', redis.call('HGET', current, 'run_id')}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 10))
redis.call('HSET', KEYS[1], 'active_key', KEYS[3], 'pending_key', KEYS[4], 'queue_key', KEYS[2],
  'wake_channel', ARGV[3], 'blocked_key', KEYS[5], 'order_key', KEYS[7], 'fair_key', KEYS[8],
  'weight', ARGV[8])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if ARGV[5] ~= '' then
  -- Its request reads it from now on; until that request subscribes, this entry vouches.
  redis.call('HSET', KEYS[1], 'readers_key', KEYS[6])
  redis.call('ZADD', KEYS[6], now_ms() + tonumber(ARGV[6]), ARGV[5])
  redis.call('PEXPIRE', KEYS[6], ARGV[6])
end
if current then
  redis.call('RPUSH', KEYS[4], KEYS[1])
  redis.call('ZADD', KEYS[5], now_ms(), KEYS[1])
  if superseded then
    return {'waiting', redis.call('HGET', current, 'run_id'), 'abandoned'}
  end
  return {'waiting', redis.call('HGET', current, 'run_id')}
end
redis.call('SET', KEYS[3], KEYS[1])
enqueue(KEYS[2], KEYS[7], KEYS[8], ARGV[1], ARGV[7], ARGV[8], now_ms())
redis.call('PUBLISH', ARGV[3], ARGV[1])
return {'created'}
