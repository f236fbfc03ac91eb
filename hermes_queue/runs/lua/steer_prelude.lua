-- Shared by the scripts that touch a run's steers (prepended after prelude.lua). A run's steers
-- live in its record hash, so they share the record's slot and retention and need no extra key:
--   steers_pending        steers accepted and not yet applied, oldest first: JSON
--                         [{"id": "st1", "text": "..."}, ...]; absent when there are none
--   steer_seq             how many steers the run accepted (their ids: st1, st2, ...)
--   pending_steer         a completed run's steers that were never applied, joined by newlines
--                         (as Hermes joins steers): its terminal event says so too
--   pending_steer_taken   set once a later turn of the session took pending_steer
local function pending_steers(record)
  local raw = redis.call('HGET', record, 'steers_pending')
  if not raw then return {} end
  return cjson.decode(raw)
end

local function store_steers(record, steers)
  if #steers == 0 then
    redis.call('HDEL', record, 'steers_pending')
  else
    redis.call('HSET', record, 'steers_pending', cjson.encode(steers))
  end
end

-- Drop the steers a recorded step applied (``ids``: space-separated, '' for none).
local function apply_steers(record, ids)
  if ids == '' then return end
  local applied = {}
  for id in string.gmatch(ids, '%S+') do applied[id] = true end
  local left = {}
  for _, steer in ipairs(pending_steers(record)) do
    if not applied[steer.id] then left[#left + 1] = steer end
  end
  store_steers(record, left)
end

-- The text of the steers never applied, nil when there are none.
local function leftover_steer(record)
  local texts = {}
  for _, steer in ipairs(pending_steers(record)) do texts[#texts + 1] = steer.text end
  if #texts == 0 then return nil end
  return table.concat(texts, '\n')
end

-- ``data`` (an event's JSON object, as streams/codec.py encode_data writes it) with
-- ``pending_steer`` added, without decoding the rest of it.
local function with_pending_steer(data, text)
  local field = '"pending_steer":' .. cjson.encode(text)
  if data == '{}' then return '{' .. field .. '}' end
  return string.sub(data, 1, -2) .. ',' .. field .. '}'
end
