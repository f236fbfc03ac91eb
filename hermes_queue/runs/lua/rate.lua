-- A tenant's creation rate (tenant_max_rate): a token bucket of ARGV[2] runs refilled at ARGV[1]
-- runs per second by the Redis clock. Takes one token and returns 0, or, with none left, returns
-- the milliseconds until one is due (nothing written: a refused request takes nothing).
-- KEYS: rate
-- ARGV: per_second, burst
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1] or '') or burst
local at = tonumber(b[2] or '') or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
if tokens < 1 then return math.ceil((1 - tokens) / rate * 1000) end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - 1), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return 0
