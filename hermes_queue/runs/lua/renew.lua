-- Lease heartbeat for one run. Returns -1 when the lease is lost (another attempt owns the run,
-- or the reaper already acted), 1 when a stop was requested, 0 otherwise.
-- The run's record and stream keep their TTL here too (the claim and append.lua set them once),
-- so a run that outlives retention_s keeps its record and events while a worker still holds it.
-- KEYS: record, leases, events, leases_heard
-- ARGV: run_id, attempt, lease_ms, ttl_s, quiet_ms
leases_heard(KEYS[2], KEYS[4], ARGV[5])
if not fenced(KEYS[1], ARGV[2]) then return -1 end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return -1 end
redis.call('ZADD', KEYS[2], 'XX', now_ms() + tonumber(ARGV[3]), ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[4])
if redis.call('HGET', KEYS[1], 'stop_requested') == '1' then return 1 end
return 0
