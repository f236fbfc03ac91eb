-- Fenced terminal transition with the terminal event.
-- KEYS: record, events, leases, stats
-- ARGV: run_id, attempt, status, event_type, ts, data, retention_s, maxlen, field, value, ...
if not fenced(KEYS[1], ARGV[2]) then return false end
if #ARGV > 8 then redis.call('HSET', KEYS[1], unpack(ARGV, 9)) end
return finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[3], ARGV[4], ARGV[2], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
