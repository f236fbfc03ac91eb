-- Runs whose lease deadline passed, by the Redis clock (the clock the deadlines were set with).
-- KEYS: leases, leases_heard
-- ARGV: limit, quiet_ms
local now = leases_heard(KEYS[1], KEYS[2], ARGV[2])
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
