-- Fenced terminal transition with the terminal event, after the events that precede it in the
-- same step (the reply's assistant.completed), so a reader never sees one without the other.
-- KEYS: record, events, leases, stats
-- ARGV: run_id, attempt, status, event_type, ts, data, retention_s, maxlen, count,
--       type1, data1, ... (count leading events), field, value, ...
if not fenced(KEYS[1], ARGV[2]) then return false end
local first_field = 10 + 2 * tonumber(ARGV[9])
if #ARGV >= first_field then redis.call('HSET', KEYS[1], unpack(ARGV, first_field)) end
for i = 10, first_field - 1, 2 do
  append_event(KEYS[1], KEYS[2], ARGV[i], ARGV[2], ARGV[5], ARGV[i + 1], ARGV[8], ARGV[7])
end
return finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[3], ARGV[4], ARGV[2], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
