-- Send a delivery again, now, on a fresh schedule (an operator's redeliver): a dead letter,
-- a delivered one (same webhook-id, so a receiver de-duplicates) or a pending one (retried
-- at once rather than at its next step). Missing (expired): 0.
-- KEYS: webhook_outbox, delivery, webhook_pending, webhook_dead
-- ARGV: delivery_id, ttl_s
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
local now = now_ms()
redis.call('HSET', KEYS[2], 'state', 'pending', 'tries', 0, 'next_ms', now)
redis.call('HDEL', KEYS[2], 'ended_ms')
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZADD', KEYS[3], 'NX', now, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return 1
