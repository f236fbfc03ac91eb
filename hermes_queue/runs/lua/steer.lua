-- A client steers a running turn, from any API replica (POST /v1/runs/{id}/steer): accepted only
-- while the run is running. The steer joins the run's pending steers (steer_prelude.lua), which
-- the worker is handed with every step it records (append_step.lua) and applies at its next
-- tool-result boundary; run.steered goes on the run's stream at once, as upstream emits it.
-- KEYS: record, events
-- ARGV: text, ts, maxlen, ttl_s, max_pending
-- Returns {'missing'}, {'not_accepting', status}, {'full'} or {'accepted', steer_id, event_id}.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if status ~= 'running' then return {'not_accepting', status} end
local steers = pending_steers(KEYS[1])
if #steers >= tonumber(ARGV[5]) then return {'full'} end
local id = 'st' .. redis.call('HINCRBY', KEYS[1], 'steer_seq', 1)
steers[#steers + 1] = {id = id, text = ARGV[1]}
store_steers(KEYS[1], steers)
local attempt = redis.call('HGET', KEYS[1], 'attempt') or '0'
local data = cjson.encode({accepted = true, steer_id = id, text = ARGV[1]})
local event = append_event(KEYS[1], KEYS[2], 'run.steered', attempt, ARGV[2], data, ARGV[3], ARGV[4])
return {'accepted', id, event}
