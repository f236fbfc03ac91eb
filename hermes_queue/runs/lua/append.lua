-- Fenced append of one or more events: refused unless the caller's attempt is current and the
-- run is still active, so a worker that lost its lease can never write.
-- KEYS: record, events
-- ARGV: attempt, maxlen, ttl_s, ts, type1, data1, type2, data2, ...
if not fenced(KEYS[1], ARGV[1]) then return false end
local ids = {}
for i = 5, #ARGV, 2 do
  ids[#ids + 1] = append_event(KEYS[1], KEYS[2], ARGV[i], ARGV[1], ARGV[4], ARGV[i + 1], ARGV[2], ARGV[3])
end
return ids
