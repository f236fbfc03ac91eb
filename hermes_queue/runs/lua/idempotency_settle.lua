-- Settle an Idempotency-Key claim, only if it is still the caller's own pending claim (a claim
-- that expired and was taken by another request is never overwritten or deleted).
-- KEYS: idempotency record
-- ARGV: the pending value this request wrote, the final value ('' = release the claim), ttl (s)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
return 1
