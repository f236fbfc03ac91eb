-- A worker takes a run from the queue: removing its entry is the pickup, so exactly one of
-- the workers racing for it gets past the ZREM; then a new attempt number (the fencing token),
-- a lease and status running. An entry whose run is not queued (finished, expired, running) is
-- just dropped. A lost run goes back to the queue through the reaper.
-- Every run is claimed, so the record is read once (the reply: its fields as read, then the
-- ones written here, which the caller's later pairs let win) and written once.
-- A run of a tenant other than ``default`` is counted while it runs (prelude: limit_of); with
-- running limits set (ARGV[6]), one of a tenant at its limit is held instead (the reply
-- 'limited'): out of the turn order, still queued, until one of the tenant's runs stops.
-- KEYS: record, leases, queue, stats, turn_order, fair, held, leases_heard
-- ARGV: run_id, worker_id, lease_ms, ts, record_ttl_s, running_limits, wake_channel, quiet_ms
leases_heard(KEYS[2], KEYS[8], ARGV[8])
if ARGV[6] ~= '' then
  local f = redis.call('HMGET', KEYS[1], 'tenant', 'status')
  local limit = f[1] and f[1] ~= 'default' and f[2] == 'queued' and limit_of(ARGV[6], f[1]) or 0
  if limit > 0 and tonumber(redis.call('HGET', KEYS[6], 'r:' .. f[1]) or '0') >= limit then
    local tag = redis.call('ZSCORE', KEYS[5], ARGV[1])
    if not tag then return {'gone'} end  -- taken or held by another worker's claim
    redis.call('ZREM', KEYS[5], ARGV[1])
    redis.call('ZADD', KEYS[7] .. f[1], tag, ARGV[1])
    redis.call('HINCRBY', KEYS[6], 'h:' .. f[1], 1)
    redis.call('HSET', KEYS[1], 'held_key', KEYS[7] .. f[1])
    return {'limited'}
  end
end
local queued_at = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not queued_at then
  redis.call('ZREM', KEYS[5], ARGV[1])  -- never left in the turn order without its entry
  return {'gone'}
end
redis.call('ZREM', KEYS[3], ARGV[1])
-- How long it waited since it was queued (or, deferred, since its start time): summed per
-- minute beside the claims, for each tenant's mean wait (queueview/tenants.py).
local now = now_ms()
local waited = math.max(0, now - tonumber(queued_at))
local fields = redis.call('HGETALL', KEYS[1])
local status, attempt, tenant, held = nil, 0, 'default', nil
for i = 1, #fields, 2 do
  if fields[i] == 'status' then status = fields[i + 1]
  elseif fields[i] == 'attempt' then attempt = tonumber(fields[i + 1])
  elseif fields[i] == 'tenant' then tenant = fields[i + 1]
  elseif fields[i] == 'held_key' then held = fields[i + 1] end
end
-- A record gone (it cannot expire while queued: its TTL outlives the queue wait) has no tenant
-- to count down.
dequeued(KEYS[5], KEYS[6], ARGV[1], #fields > 0 and tenant or nil, true)
-- Held once and taken since (by a worker that read it before it was held): out of its set.
if held and redis.call('ZREM', held, ARGV[1]) == 1 then
  if redis.call('HINCRBY', KEYS[6], 'h:' .. tenant, -1) <= 0 then
    redis.call('HDEL', KEYS[6], 'h:' .. tenant)
  end
end
if #fields == 0 then return {'missing'} end
if TERMINAL[status] then return {'terminal'} end
if status ~= 'queued' then return {'busy'} end
attempt = attempt + 1
local written = {'attempt', tostring(attempt), 'status', 'running', 'worker', ARGV[2],
  'started_at', ARGV[4], 'updated_at', ARGV[4]}
-- Where an execution_policy's run budget starts (the queue wait is not counted).
if attempt == 1 then
  written[#written + 1] = 'first_started_at'
  written[#written + 1] = ARGV[4]
end
if tenant ~= 'default' then
  count(KEYS[4], 'claimed:' .. tenant)
  redis.call('HINCRBY', KEYS[4], 'waited_ms:' .. tenant, waited)
  redis.call('HINCRBY', KEYS[6], 'r:' .. tenant, 1)
  for _, v in ipairs({'running_in', KEYS[6], 'held_key', KEYS[7] .. tenant,
      'order_key', KEYS[5], 'wake_channel', ARGV[7]}) do
    written[#written + 1] = v
  end
end
redis.call('HSET', KEYS[1], unpack(written))
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
count(KEYS[4], 'claimed')
redis.call('HINCRBY', KEYS[4], 'waited_ms', waited)  -- the bucket's TTL: set by count
redis.call('EXPIRE', KEYS[1], ARGV[5])
local out = {'claimed'}
for i = 1, #fields do out[#out + 1] = fields[i] end
for i = 1, #written do out[#out + 1] = written[i] end
return out
