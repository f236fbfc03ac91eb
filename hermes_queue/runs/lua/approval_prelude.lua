-- Shared by the approval scripts (prepended after prelude.lua). A run's approval state lives
-- in its record hash, so it shares the record's slot and retention and needs no extra key:
--   approvals_pending       request ids still waiting for an answer, oldest first (space-separated)
--   approval:<request_id>   the approval.request data (JSON)
--   choice:<request_id>     the answer (once/session/always/deny), once there is one
local function pending_ids(record)
  local ids = {}
  for id in string.gmatch(redis.call('HGET', record, 'approvals_pending') or '', '%S+') do
    ids[#ids + 1] = id
  end
  return ids
end

-- Answer some pending requests: record each choice, drop them from the pending list, append
-- one approval.responded event, and put the run back to running once nothing is pending.
-- A stop request wins: a run marked stopping stays stopping.
local function resolve(record, stream, ids, choice, attempt, ts, maxlen, ttl, extra)
  local chosen = {}
  for _, id in ipairs(ids) do
    chosen[id] = true
    redis.call('HSET', record, 'choice:' .. id, choice)
  end
  local remaining = {}
  for _, id in ipairs(pending_ids(record)) do
    if not chosen[id] then remaining[#remaining + 1] = id end
  end
  redis.call('HSET', record, 'approvals_pending', table.concat(remaining, ' '))
  local data = {choice = choice, resolved = #ids, request_id = ids[1], request_ids = ids}
  for k, v in pairs(extra or {}) do data[k] = v end
  local id = append_event(record, stream, 'approval.responded', attempt, ts, cjson.encode(data), maxlen, ttl)
  if #remaining == 0 and redis.call('HGET', record, 'status') == 'waiting_for_approval' then
    redis.call('HSET', record, 'status', 'running')
  end
  return id
end
