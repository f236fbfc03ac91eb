-- Runs whose lease deadline passed, by the Redis clock (the clock the deadlines were set with).
-- KEYS: leases
-- ARGV: limit
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
