-- A worker takes a run from the queue: removing its entry is the pickup, so exactly one of
-- the workers racing for it gets past the ZREM; then a new attempt number (the fencing token),
-- a lease and status running. An entry whose run is not queued (finished, expired, running) is
-- just dropped. A lost run goes back to the queue through the reaper.
-- Every run is claimed, so the record is read once (the reply: its fields as read, then the
-- ones written here, which the caller's later pairs let win) and written once.
-- KEYS: record, leases, queue, stats, turn_order, fair
-- ARGV: run_id, worker_id, lease_ms, ts, record_ttl_s
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then return {'gone'} end
local fields = redis.call('HGETALL', KEYS[1])
local status, attempt, tenant = nil, 0, 'default'
for i = 1, #fields, 2 do
  if fields[i] == 'status' then status = fields[i + 1]
  elseif fields[i] == 'attempt' then attempt = tonumber(fields[i + 1])
  elseif fields[i] == 'tenant' then tenant = fields[i + 1] end
end
-- A record gone (it cannot expire while queued: its TTL outlives the queue wait) has no tenant
-- to count down.
dequeued(KEYS[5], KEYS[6], ARGV[1], #fields > 0 and tenant or nil, true)
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
redis.call('HSET', KEYS[1], unpack(written))
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
count(KEYS[4], 'claimed')
redis.call('EXPIRE', KEYS[1], ARGV[5])
local out = {'claimed'}
for i = 1, #fields do out[#out + 1] = fields[i] end
for i = 1, #written do out[#out + 1] = written[i] end
return out
