-- After arq finished a job: a run that is (again) queued must still have a job in the queue.
-- arq deletes the job of any delivery that ends, including a fenced-off attempt whose run the
-- reaper had already requeued; this puts it back. Runs parked behind a session's active run
-- get their job when they are promoted, not here.
-- KEYS: record, arq_job, queue
-- ARGV: run_id, job_payload, job_ttl_ms, wake_channel
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
local active_key = redis.call('HGET', KEYS[1], 'active_key')
if active_key and redis.call('GET', active_key) ~= KEYS[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('PSETEX', KEYS[2], ARGV[3], ARGV[2]) end
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('ZADD', KEYS[3], now_ms(), ARGV[1])
  redis.call('PUBLISH', ARGV[4], ARGV[1])
end
return 1
