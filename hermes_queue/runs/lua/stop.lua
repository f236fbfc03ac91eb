-- Stop request from any replica. A queued run is cancelled on the spot (it will never start);
-- a running one is marked stopping and its worker is told over pub/sub (the lease keeper also
-- sees the flag on its next beat, so a lost message only delays the stop).
-- KEYS: record, events, leases, queue, stats, turn_order, fair
-- ARGV: run_id, ts, retention_s, maxlen, control_channel
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if TERMINAL[status] then return {'terminal', status} end
redis.call('HSET', KEYS[1], 'stop_requested', '1')
if status == 'queued' then
  local attempt = redis.call('HGET', KEYS[1], 'attempt') or '0'
  finish(KEYS[1], KEYS[2], KEYS[3], KEYS[5], nil, ARGV[1], 'cancelled', attempt, ARGV[2],
    ARGV[3], ARGV[4], {'run.cancelled', '{}'}, {})
  if redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
    local f = redis.call('HMGET', KEYS[1], 'tenant', 'held_key')
    local tenant = f[1] or 'default'
    dequeued(KEYS[6], KEYS[7], ARGV[1], tenant, false)
    -- Held at its tenant's running limit (claim.lua): out of the held set too.
    if f[2] and redis.call('ZREM', f[2], ARGV[1]) == 1 then
      if redis.call('HINCRBY', KEYS[7], 'h:' .. tenant, -1) <= 0 then
        redis.call('HDEL', KEYS[7], 'h:' .. tenant)
      end
    end
  end
  return {'cancelled', 'cancelled'}
end
redis.call('HSET', KEYS[1], 'status', 'stopping', 'last_event', 'run.stopping', 'updated_at', ARGV[2])
redis.call('PUBLISH', ARGV[5], ARGV[1])
return {'stopping', 'stopping'}
