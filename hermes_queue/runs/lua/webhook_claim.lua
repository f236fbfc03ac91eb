-- A webhook sender takes what is due in its shard's outbox (webhooks/outbox.py): each member's
-- score moves to now + the claim, so a sender killed mid-attempt leaves it due again for
-- another one then. A delivery's claim count is its attempt number (the fence of its settle);
-- a run event (e:…, a:…) is handed over as is, to be turned into its deliveries.
-- KEYS: webhook_outbox
-- ARGV: limit, claim_ms, delivery_prefix
-- Returns {member, claim, {field, value, ...}} per member taken (0 and {} for a run event).
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local taken = {}
local until_ms = now + tonumber(ARGV[2])
for _, member in ipairs(due) do
  if string.sub(member, 1, 4) == 'msg_' then
    local key = ARGV[3] .. member
    if redis.call('EXISTS', key) == 1 then
      local claim = redis.call('HINCRBY', key, 'claims', 1)
      redis.call('ZADD', KEYS[1], 'XX', until_ms, member)
      taken[#taken + 1] = {member, claim, redis.call('HGETALL', key)}
    else
      redis.call('ZREM', KEYS[1], member)
    end
  else
    redis.call('ZADD', KEYS[1], 'XX', until_ms, member)
    taken[#taken + 1] = {member, 0, {}}
  end
end
return taken
