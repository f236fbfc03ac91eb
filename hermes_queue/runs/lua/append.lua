-- Fenced append of one or more events: refused unless the caller's attempt is current and the
-- run is still active, so a worker that lost its lease can never write.
-- The batch token makes a retried call (its reply lost to a dropped connection) return the
-- ids of the first call instead of appending the events twice.
-- KEYS: record, events
-- ARGV: attempt, maxlen, ttl_s, ts, batch_token, type1, data1, type2, data2, ...
-- One HMGET reads all the record fields the batch needs (token, fence, session, seq).
local f = redis.call('HMGET', KEYS[1], 'last_batch', 'last_ids', 'attempt', 'status', 'session_id', 'seq')
if f[1] == ARGV[5] then
  local ids = {}
  for id in string.gmatch(f[2] or '', '%S+') do ids[#ids + 1] = id end
  return ids
end
-- The fence, as fenced() in the prelude, from the fields read above.
if f[3] ~= ARGV[1] or ACTIVE[f[4] or ''] ~= true then return false end
local count = (#ARGV - 5) / 2
if count < 1 then return {} end
-- Per batch, not per event: the record's seq and last event, so a batch of n events costs n
-- XADDs and n PUBLISHes and two other commands (the script is atomic, so the seq read above is
-- still current when the HSET below writes the block's last one). The stream's TTL is set once,
-- by the batch that creates it; the lease heartbeat (renew.lua) keeps it while the run lives
-- and the terminal transition sets its retention.
local seq = tonumber(f[6] or '0')
local created = seq == 0
local sid = f[5] or ''
local ids = {}
for i = 6, #ARGV, 2 do
  seq = seq + 1
  ids[#ids + 1] = add_event(KEYS[2], ARGV[i], seq, ARGV[1], ARGV[4], sid, ARGV[i + 1], ARGV[2])
end
if created then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
redis.call('HSET', KEYS[1], 'seq', seq, 'last_event', ARGV[#ARGV - 1], 'updated_at', ARGV[4],
  'last_batch', ARGV[5], 'last_ids', table.concat(ids, ' '))
return ids
