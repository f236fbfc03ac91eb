-- Fenced terminal transition with the terminal event, after the events that precede it in the
-- same step (the reply's assistant.completed), so a reader never sees one without the other.
-- KEYS: record, events, leases, stats, failures
-- ARGV: run_id, attempt, status, event_type, ts, data, retention_s, maxlen, count,
--       type1, data1, ... (count leading events), field, value, ...
local state = finish_state(KEYS[1])
-- The fence, as fenced() below, from the fields finish reads anyway.
if state.attempt ~= ARGV[2] or ACTIVE[state.status or ''] ~= true then return false end
local first_field = 10 + 2 * tonumber(ARGV[9])
local events = {}
for i = 10, first_field - 1 do events[#events + 1] = ARGV[i] end
events[#events + 1] = ARGV[4]
events[#events + 1] = ARGV[6]
local fields = {}
for i = first_field, #ARGV do fields[#fields + 1] = ARGV[i] end
-- A completed run's steers never applied are its pending_steer (steer_prelude.lua).
local leftover = ARGV[3] == 'completed' and leftover_steer(KEYS[1])
if leftover then
  events[#events] = with_pending_steer(events[#events], leftover)
  fields[#fields + 1] = 'pending_steer'
  fields[#fields + 1] = leftover
end
finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[3], ARGV[2], ARGV[5], ARGV[7],
  ARGV[8], events, fields, state)
return 1
