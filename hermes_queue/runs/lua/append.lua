-- Fenced append of one or more events: refused unless the caller's attempt is current and the
-- run is still active, so a worker that lost its lease can never write.
-- The batch token makes a retried call (its reply lost to a dropped connection) return the
-- ids of the first call instead of appending the events twice.
-- KEYS: record, events
-- ARGV: attempt, maxlen, ttl_s, ts, batch_token, type1, data1, type2, data2, ...
if redis.call('HGET', KEYS[1], 'last_batch') == ARGV[5] then
  local ids = {}
  for id in string.gmatch(redis.call('HGET', KEYS[1], 'last_ids') or '', '%S+') do ids[#ids + 1] = id end
  return ids
end
if not fenced(KEYS[1], ARGV[1]) then return false end
local ids = {}
for i = 6, #ARGV, 2 do
  ids[#ids + 1] = append_event(KEYS[1], KEYS[2], ARGV[i], ARGV[1], ARGV[4], ARGV[i + 1], ARGV[2], ARGV[3])
end
redis.call('HSET', KEYS[1], 'last_batch', ARGV[5], 'last_ids', table.concat(ids, ' '))
return ids
