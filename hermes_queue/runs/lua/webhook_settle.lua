-- The end of one delivery attempt, fenced by its claim: refused (0) when another sender took
-- the delivery since (this one was frozen past its claim) or it is no longer pending. ``retry``
-- puts it back in the outbox after delay_ms; ``delivered`` keeps it keep_s; ``dead`` and
-- ``gone`` (410) make it a dead letter, kept dead_kept_s.
-- KEYS: webhook_outbox, delivery, webhook_pending, webhook_dead
-- ARGV: delivery_id, claim, outcome, delay_ms, keep_s, dead_kept_s, field, value, ...
local f = redis.call('HMGET', KEYS[2], 'claims', 'state')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' then return 0 end
local now = now_ms()
local outcome = ARGV[3]
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
if outcome == 'retry' then
  local at = now + tonumber(ARGV[4])
  fields[#fields + 1] = 'next_ms'; fields[#fields + 1] = at
  redis.call('HSET', KEYS[2], unpack(fields))
  redis.call('ZADD', KEYS[1], at, ARGV[1])
  return 1
end
fields[#fields + 1] = 'state'; fields[#fields + 1] = outcome
fields[#fields + 1] = 'ended_ms'; fields[#fields + 1] = now
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('HDEL', KEYS[2], 'next_ms')
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if outcome == 'delivered' then
  redis.call('EXPIRE', KEYS[2], ARGV[5])
else
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  redis.call('ZADD', KEYS[4], now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[6]) * 1000)
end
return 1
