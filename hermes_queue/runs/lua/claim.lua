-- A worker takes a run from the queue: removing its entry is the pickup, so exactly one of
-- the workers racing for it gets past the ZREM; then a new attempt number (the fencing token),
-- a lease and status running. An entry whose run is not queued (finished, expired, running) is
-- just dropped. A lost run goes back to the queue through the reaper.
-- KEYS: record, leases, queue, stats
-- ARGV: run_id, worker_id, lease_ms, ts, record_ttl_s
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then return {'gone'} end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if TERMINAL[status] then return {'terminal'} end
if status ~= 'queued' then return {'busy'} end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[2], 'started_at', ARGV[4],
  'updated_at', ARGV[4])
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
count(KEYS[4], 'claimed')
redis.call('EXPIRE', KEYS[1], ARGV[5])
local out = {'claimed'}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields do out[#out + 1] = fields[i] end
return out
