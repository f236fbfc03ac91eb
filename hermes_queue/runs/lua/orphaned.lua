-- Jobs a worker took from arq's queue but never claimed: it died between arq marking the job
-- in progress and the claim script (which takes the job out of the queue). arq skips a job
-- while its in-progress key lives (job timeout + 70 s); dropping the key lets any worker run it
-- now. A key's age is its full TTL minus what is left; only keys older than the threshold on
-- jobs queued before it count, so a pickup in flight (claimed within milliseconds) is never
-- touched, and a frozen worker that wakes up later loses the claim race harmlessly.
-- KEYS: queue
-- ARGV: older_than_ms, in_progress_ttl_ms, in_progress_prefix, limit, wake_channel
local older_than = tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms() - older_than,
  'LIMIT', 0, tonumber(ARGV[4]))
local released = {}
for _, id in ipairs(ids) do
  local key = ARGV[3] .. id
  local left = redis.call('PTTL', key)
  if left > 0 and tonumber(ARGV[2]) - left > older_than then
    redis.call('DEL', key)
    released[#released + 1] = id
  end
end
if #released > 0 then redis.call('PUBLISH', ARGV[5], released[1]) end
return released
