-- Fenced append of one or more events (prelude append_batch: the fence, the retried-batch
-- token, one record read and one record write per batch, not per event).
-- KEYS: record, events
-- ARGV: attempt, maxlen, ttl_s, ts, batch_token, type1, data1, type2, data2, ...
local ids = append_batch(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], 6)
return ids
