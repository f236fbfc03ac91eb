-- One run-event stream entry, as every run script writes it (streams/codec.py reads it back:
-- keep the two in step). Loaded ahead of runs/lua/prelude.lua by runs/scripts.py.
--
-- XADD with the fields t (type), s (seq), a (attempt), ts (unix seconds), sid (session id) and
-- d (JSON data), then PUBLISH on the channel named like the stream (keys.py: events) the entry
-- id and the same values in that order, NUL-separated, the JSON data last (JSON escapes a NUL,
-- so the data holds none): API processes following the stream take entries from there and read
-- the stream itself only to fill a gap (streams/follower.py).
local function add_event(stream, etype, seq, attempt, ts, sid, data, maxlen)
  local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
    't', etype, 's', seq, 'a', attempt, 'ts', ts, 'sid', sid, 'd', data)
  redis.call('PUBLISH', stream,
    table.concat({id, etype, seq, attempt, ts, sid, data}, '\0'))
  return id
end
