-- A run event (e:<run_id>, its end; a:<run_id>:<request_id>, an approval request) becomes its
-- deliveries, one per target, in one step: the event leaves the outbox as they enter it. A
-- delivery whose id exists is left alone (ids derive from the run, event and target), so a
-- retried expansion creates nothing twice.
-- KEYS: webhook_outbox, webhook_recent, webhook_pending
-- ARGV: event, delivery_prefix, recent_kept, ttl_s, then per delivery: id, n, n field/value pairs
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local now = now_ms()
local i = 5
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  local key = ARGV[2] .. id
  if redis.call('EXISTS', key) == 0 then
    local fields = {'id', id, 'created_ms', now, 'next_ms', now, 'state', 'pending', 'tries', 0,
      'claims', 0}
    for j = i + 2, i + 1 + 2 * n do fields[#fields + 1] = ARGV[j] end
    redis.call('HSET', key, unpack(fields))
    redis.call('EXPIRE', key, ARGV[4])
    redis.call('ZADD', KEYS[1], now, id)
    redis.call('ZADD', KEYS[2], now, id)
    redis.call('ZADD', KEYS[3], now, id)
  end
  i = i + 2 + 2 * n
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[3]) + 1))
return 1
