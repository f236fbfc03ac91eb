-- The backstop behind the held runs (claim.lua, prelude unhold): a reaper pass moves back into
-- the turn order the held runs of every tenant of the shard that has room under its running
-- limit now (ARGV[1], as the claim reads it: '' when none is set, and then every held run), so
-- no run stays held when its tenant's limit was raised or removed, or when a count was lost.
-- Returns how many it moved.
-- KEYS: fair, turn_order, held
-- ARGV: running_limits, wake_channel
local f = redis.call('HGETALL', KEYS[1])
local moved = 0
for i = 1, #f, 2 do
  local tenant = string.match(f[i], '^h:(.+)$')
  if tenant then
    local held = KEYS[3] .. tenant
    local room = redis.call('ZCARD', held)
    local limit = ARGV[1] ~= '' and limit_of(ARGV[1], tenant) or 0
    if limit > 0 then
      room = math.min(room, limit - tonumber(redis.call('HGET', KEYS[1], 'r:' .. tenant) or '0'))
    end
    for _ = 1, room do unhold(held, KEYS[2], KEYS[1], tenant, ARGV[2]) end
    moved = moved + math.max(0, room)
    -- The count, as the set now is (a lost count mends here).
    local left = redis.call('ZCARD', held)
    if left > 0 then redis.call('HSET', KEYS[1], f[i], left)
    else redis.call('HDEL', KEYS[1], f[i]) end
  end
end
return moved
