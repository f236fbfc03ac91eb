-- The active session runs that keep a parked run waiting although nobody reads them (prelude
-- abandoned()): a reaper pass stops each, and its session's next run then starts. This covers
-- what admission cannot see: a reader that left after the next turn was parked, a reader on
-- another API replica whose leave had not landed yet, an API process that died (its entries
-- lapse). Oldest parked runs first, at most ARGV[1] of them. Right after a silence of the shard
-- (Redis away: no entry could be renewed either) nothing (prelude readers_silenced).
-- KEYS: blocked, leases, leases_heard
-- ARGV: limit, quiet_ms
local now = leases_heard(KEYS[2], KEYS[3], ARGV[2])
if readers_silenced(KEYS[3], now) then return {} end
local found, seen = {}, {}
for _, record in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)) do
  local active_key = redis.call('HGET', record, 'active_key')
  local active = active_key and redis.call('GET', active_key)
  if active and not seen[active] then
    seen[active] = true
    if abandoned(active) then
      found[#found + 1] = redis.call('HGET', active, 'run_id')
    end
  end
end
return found
