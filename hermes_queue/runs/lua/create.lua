-- Create a run record and its arq job in one step, so an accepted run always has a job.
-- KEYS: record, arq_job, queue
-- ARGV: run_id, job_payload, job_ttl_ms, record_ttl_s, wake_channel, field, value, ...
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('PSETEX', KEYS[2], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[3], now_ms(), ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[1])
return 1
