-- A shard's reaper lease (runs/shard_leases.py): take it when free, renew it when held,
-- release it (px 0) when held. Returns -1 when the caller holds it now, else the
-- milliseconds left on another holder's lease (when to try again).
-- KEYS: reaper_lease
-- ARGV: owner, px
local holder = redis.call('GET', KEYS[1])
local px = tonumber(ARGV[2])
if holder == ARGV[1] then
  if px == 0 then
    redis.call('DEL', KEYS[1])
    return 0
  end
  redis.call('PEXPIRE', KEYS[1], px)
  return -1
end
if holder then
  return redis.call('PTTL', KEYS[1])
end
if px == 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', px)
return -1
