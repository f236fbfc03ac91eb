-- A client answers from any API replica (upstream-api.md §4.3): the oldest pending request, all of
-- them, or the one named. Choice, event and status change in one step; then the worker holding
-- the run is told over the control channel (it also polls the record, so a lost message only
-- delays it by one beat).
-- KEYS: record, events
-- ARGV: choice, all ('1'/'0'), request_id ('' for none), ts, maxlen, ttl_s, control_channel,
--       message
-- Returns {'missing'}, {'not_active'}, {'not_pending'} or {'answered', id1, id2, ...}.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
local pending = pending_ids(KEYS[1])
if status ~= 'waiting_for_approval' or #pending == 0 then return {'not_active'} end
local ids
if ARGV[3] ~= '' then
  local found = false
  for _, id in ipairs(pending) do
    if id == ARGV[3] then found = true end
  end
  if not found then return {'not_pending'} end
  ids = {ARGV[3]}
elseif ARGV[2] == '1' then
  ids = pending
else
  ids = {pending[1]}
end
local attempt = redis.call('HGET', KEYS[1], 'attempt') or '0'
resolve(KEYS[1], KEYS[2], ids, ARGV[1], attempt, ARGV[4], ARGV[5], ARGV[6], nil)
redis.call('PUBLISH', ARGV[7], ARGV[8])
local out = {'answered'}
for _, id in ipairs(ids) do out[#out + 1] = id end
return out
