-- Create a run record and queue it in one step, so an accepted run is always in the queue.
-- Returns 1 (created), 0 (the id is another run's) or 2: an earlier send of this very call
-- created it (created_by in prelude.lua), so it is sent again safely after a lost reply.
-- KEYS: record, queue, turn_order, fair
-- ARGV: run_id, record_ttl_s, wake_channel, tenant, weight, field, value, ...
if redis.call('EXISTS', KEYS[1]) == 1 then
  if created_by(KEYS[1], ARGV, 6) then return 2 end
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('EXPIRE', KEYS[1], ARGV[2])
enqueue(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[4], ARGV[5], now_ms())
redis.call('PUBLISH', ARGV[3], ARGV[1])
return 1
