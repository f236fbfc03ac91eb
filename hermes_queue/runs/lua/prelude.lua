-- Shared by every run script (prepended when the scripts are loaded, after
-- streams/entry.lua: add_event, the one writer of a stream entry).
-- Lease deadlines use the Redis server clock, so worker hosts with skewed clocks agree.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Lease time counts only while Redis is heard from. Every script about a shard's leases (a
-- claim, a renewal, a reaper's pass) notes when it ran in the shard's ``leases_heard`` (``at``);
-- when nothing had for longer than any process lets a shard go unheard of in its normal course
-- (``quiet``: the larger of the caller's ``quiet_ms`` and the last noter's, so processes with
-- other settings never take each other's quiet for an outage), Redis was away or stalled (a
-- restart, a failover, a freeze) and no holder could renew: every deadline of the shard moves
-- on by that silence before anything reads them. A live worker keeps its runs; a dead one's
-- are reaped a lease after the silence. A clock that stepped back (a failover to a primary
-- whose clock is behind) is noted afresh, never taken for a silence. A silence a reader's entry
-- cannot outlast (``READER_SILENCE_MS``, shorter than a lease's) notes when it ended
-- (``back``): readers' entries lapsed in it too (``readers_silenced``).
local READER_MS = 6000  -- streams/presence.py TTL_MS: how long one entry vouches for a reader
local READER_SILENCE_MS = 4000  -- TTL_MS less RENEW_SECONDS: a silence an entry cannot outlast
local function leases_heard(leases, heard, quiet_ms)
  local now = now_ms()
  local f = redis.call('HMGET', heard, 'at', 'quiet')
  local last, quiet = tonumber(f[1]), math.max(tonumber(f[2]) or 0, tonumber(quiet_ms))
  if last and now >= last and now - last < 100 then return now end  -- just heard: no write
  redis.call('HSET', heard, 'at', now, 'quiet', quiet_ms)
  if not last or now < last then return now end
  if now - last > READER_SILENCE_MS then redis.call('HSET', heard, 'back', now) end
  if now - last <= quiet then return now end
  local silence = now - last
  local held = redis.call('ZRANGE', leases, 0, -1, 'WITHSCORES')
  for i = 1, #held, 2 do
    redis.call('ZADD', leases, 'XX', tonumber(held[i + 1]) + silence, held[i])
  end
  return now
end
-- Whether readers' entries may have lapsed in a silence of the shard that ended less than an
-- entry's length ago: their API processes renew them meanwhile, so until then no session turn
-- is judged abandoned (abandoned.lua, create_session_run.lua).
local function readers_silenced(heard, now)
  local back = tonumber(redis.call('HGET', heard, 'back'))
  return back ~= nil and now >= back and now - back < READER_MS
end
local ACTIVE = {running = true, stopping = true, waiting_for_approval = true}
local TERMINAL = {completed = true, failed = true, cancelled = true}

-- Fair turns between tenants (keys.py: turn_order, fair). The queue (scored by the time a run
-- was queued) says how long runs wait; the turn order says which one a worker takes next, by
-- start-time fair queuing: the shard's virtual time ``v`` is the tag of the run taken last,
-- and a new run is tagged one step (1 / its tenant's weight) after the later of ``v`` and its
-- tenant's previous tag (``l:<tenant>``). So a tenant with nothing queued starts right after the
-- run in service, a backlog takes one turn in each round, tenants with runs queued alternate
-- by weight, and a tenant alone takes every free slot in order (workers take the lowest tags,
-- whatever v). No tenant can owe turns for what it ran while nobody else waited. ``fair``
-- also counts each tenant's queued runs (``n:<tenant>``) for depth per tenant.
local function enqueue(queue, order, fair, run_id, tenant, weight, now)
  local f = redis.call('HMGET', fair, 'v', 'l:' .. tenant)
  local tag = math.max(tonumber(f[1] or '0'), tonumber(f[2] or '0')) + 1 / (tonumber(weight) or 1)
  redis.call('HSET', fair, 'l:' .. tenant, tag)
  redis.call('HINCRBY', fair, 'n:' .. tenant, 1)
  redis.call('ZADD', order, tag, run_id)
  redis.call('ZADD', queue, now, run_id)
end

-- A run that was taken goes back (its worker died, or handed it back): first in the turn
-- order, as it already had its turn.
local function requeue(queue, order, fair, run_id, tenant, now)
  redis.call('HINCRBY', fair, 'n:' .. tenant, 1)
  redis.call('ZADD', order, tonumber(redis.call('HGET', fair, 'v') or '0'), run_id)
  redis.call('ZADD', queue, now, run_id)
end

-- A queued run left the queue (its ZREM from ``queue`` done by the caller, which decides on
-- it): out of the turn order, its tenant's count down; taken (``taken``), it moves v.
local function dequeued(order, fair, run_id, tenant, taken)
  if taken then
    local tag = tonumber(redis.call('ZSCORE', order, run_id) or '0')
    if tag > tonumber(redis.call('HGET', fair, 'v') or '0') then
      redis.call('HSET', fair, 'v', tag)
    end
  end
  redis.call('ZREM', order, run_id)
  if tenant and redis.call('HINCRBY', fair, 'n:' .. tenant, -1) <= 0 then
    redis.call('HDEL', fair, 'n:' .. tenant)
  end
end

-- Running limits per tenant (tenancy/limits.py, keys.py fair_at/held_prefix_at). ``spec`` is
-- ``,acme=8,*=4,`` (the claim's ARGV; '' when no limit is set): the tenant's entry, else '*''s,
-- 0 for none. Only tenants but ``default`` are counted (``r:<tenant>``, from their claim until
-- they stop running); a run of a tenant at its limit is held (out of the turn order, still
-- queued) until one of the tenant's runs stops running.
local function limit_of(spec, tenant)
  local _, e = string.find(spec, ',' .. tenant .. '=', 1, true)
  if not e then _, e = string.find(spec, ',*=', 1, true) end
  if not e then return 0 end
  return tonumber(string.match(spec, '^%d+', e + 1)) or 0
end

local function unhold(held, order, fair, tenant, wake)
  local h = redis.call('ZPOPMIN', held)
  if not h[1] then return end
  redis.call('ZADD', order, h[2], h[1])
  if redis.call('HINCRBY', fair, 'h:' .. tenant, -1) <= 0 then
    redis.call('HDEL', fair, 'h:' .. tenant)
  end
  redis.call('PUBLISH', wake, h[1])
end

-- The record fields a run leaving "running" needs (written by the claim that counted it).
local RUNNING_FIELDS = {'tenant', 'running_in', 'held_key', 'order_key', 'wake_channel'}

-- A counted run stopped running (ended, or back to the queue): its tenant's count down, and
-- the tenant's next held run back into the turn order (the claim checks the limit again).
-- ``f``: the record's RUNNING_FIELDS, in order (from f[first]); the caller HDELs running_in.
local function left_running(f, first)
  local tenant, fair = f[first], f[first + 1]
  if not fair then return end
  if redis.call('HINCRBY', fair, 'r:' .. tenant, -1) <= 0 then
    redis.call('HDEL', fair, 'r:' .. tenant)
  end
  if f[first + 2] then unhold(f[first + 2], f[first + 3], fair, tenant, f[first + 4]) end
end

-- Per-minute counters (claimed, completed, failed, cancelled; keys.py: stats) for throughput
-- and the drain rate behind backpressure's Retry-After. An hour of buckets is kept: the TTL is
-- set by the first count of each field, which includes the one that created the bucket.
local function count(stats, field)
  if redis.call('HINCRBY', stats, field, 1) == 1 then
    redis.call('EXPIRE', stats, 3900)
  end
end

-- Append one canonical event. XADD and EXPIRE go together: EXPIRE before the stream exists
-- would do nothing.
local function append_event(record, stream, etype, attempt, ts, data, maxlen, ttl)
  local seq = redis.call('HINCRBY', record, 'seq', 1)
  local sid = redis.call('HGET', record, 'session_id') or ''
  local id = add_event(stream, etype, seq, attempt, ts, sid, data, maxlen)
  redis.call('EXPIRE', stream, ttl)
  redis.call('HSET', record, 'last_event', etype, 'updated_at', ts)
  return id
end

-- A fenced batch of events: refused (false) unless the caller's attempt is current and the run
-- still active, so a worker that lost its lease can never write. The batch token makes a retried
-- call (its reply lost to a dropped connection) return the ids of the first call instead of
-- appending twice (then ``replayed`` is true). Events are ARGV[first], ARGV[first + 1], ...
-- (type, data pairs). One HMGET reads all the record fields the batch needs, and one HSET
-- writes the record's seq, last event and last id per batch, not per event (the script is
-- atomic, so the seq read is still current when the HSET writes the block's last one). The
-- stream's TTL is set once, by the batch that creates it; the lease heartbeat (renew.lua)
-- keeps it while the run lives and the terminal transition sets its retention. ``extra``:
-- more field, value pairs for that HSET.
local function append_batch(record, stream, attempt, maxlen, ttl, ts, token, first, extra)
  local f = redis.call('HMGET', record, 'last_batch', 'last_ids', 'attempt', 'status',
    'session_id', 'seq', 'last_id')
  if f[1] == token then
    local ids = {}
    for id in string.gmatch(f[2] or '', '%S+') do ids[#ids + 1] = id end
    return ids, true
  end
  if f[3] ~= attempt or ACTIVE[f[4] or ''] ~= true then return false end
  local seq = tonumber(f[6] or '0')
  local created = seq == 0
  local sid = f[5] or ''
  local ids = {}
  local last_type = nil
  for i = first, #ARGV, 2 do
    seq = seq + 1
    ids[#ids + 1] = add_event(stream, ARGV[i], seq, attempt, ts, sid, ARGV[i + 1], maxlen)
    last_type = ARGV[i]
  end
  local fields = {'last_batch', token, 'last_ids', table.concat(ids, ' ')}
  if #ids > 0 then
    if created then redis.call('EXPIRE', stream, ttl) end
    for _, v in ipairs({'seq', seq, 'last_event', last_type, 'updated_at', ts,
        'last_id', ids[#ids]}) do
      fields[#fields + 1] = v
    end
  end
  for _, v in ipairs(extra or {}) do fields[#fields + 1] = v end
  redis.call('HSET', record, unpack(fields))
  return ids, false, ids[#ids] or f[7] or ''
end

-- What a terminal transition reads of the record, in one HMGET (finish below).
local function finish_state(record)
  local f = redis.call('HMGET', record, 'attempt', 'status', 'seq', 'session_id', 'active_key',
    'pending_key', 'blocked_key', 'webhook_outbox', unpack(RUNNING_FIELDS))
  return {attempt = f[1], status = f[2], seq = tonumber(f[3] or '0'), sid = f[4] or '',
    active_key = f[5], pending_key = f[6], blocked_key = f[7], webhook_outbox = f[8],
    running = f}
end

-- A session run ended: start the next run waiting behind it (multitask "enqueue"), or free
-- the session. Key names come from the record (written by keys.py at creation; ``state`` is
-- finish_state's read of it).
local function settle_session(record, state)
  local active_key, pending_key = state.active_key, state.pending_key
  if not active_key then return end
  -- The blocked set mirrors the pending lists, so queue metrics read its size, not the lists.
  local blocked_key = state.blocked_key
  redis.call('LREM', pending_key, 0, record)
  if blocked_key then redis.call('ZREM', blocked_key, record) end
  if redis.call('GET', active_key) ~= record then return end
  while true do
    local next_record = redis.call('LPOP', pending_key)
    if not next_record then
      redis.call('DEL', active_key)
      return
    end
    if blocked_key then redis.call('ZREM', blocked_key, next_record) end
    local f = redis.call('HMGET', next_record, 'status', 'run_id', 'queue_key', 'wake_channel',
      'order_key', 'fair_key', 'tenant', 'weight')
    if f[1] == 'queued' then
      redis.call('SET', active_key, next_record)
      enqueue(f[3], f[5], f[6], f[2], f[7] or 'default', f[8], now_ms())
      redis.call('PUBLISH', f[4], f[2])
      return
    end
  end
end

-- The failures the stats count, listed (keys.py: failures): the last 100 per shard, an hour.
local function note_failure(failures, run_id)
  redis.call('ZADD', failures, now_ms(), run_id)
  redis.call('ZREMRANGEBYRANK', failures, 0, -101)
  redis.call('EXPIRE', failures, 3900)
end

-- Move a run to a terminal status after its last events (``events``: type, data, ...; the
-- terminal one last), write ``fields`` (name, value, ...) with the status, and start its
-- retention clock. A terminal transition is part of every run, so it costs one read of the
-- record (``state``: finish_state's, read here when the caller has none) and one write.
-- ``failures``: the shard's list of recent failures (nil where a run cannot fail: stop).
local function finish(record, stream, leases, stats, failures, run_id, status, attempt, ts,
    retention, maxlen, events, fields, state)
  state = state or finish_state(record)
  local seq = state.seq
  for i = 1, #events, 2 do
    seq = seq + 1
    add_event(stream, events[i], seq, attempt, ts, state.sid, events[i + 1], maxlen)
  end
  fields[#fields + 1] = 'seq'; fields[#fields + 1] = seq
  fields[#fields + 1] = 'last_event'; fields[#fields + 1] = events[#events - 1]
  fields[#fields + 1] = 'updated_at'; fields[#fields + 1] = ts
  fields[#fields + 1] = 'status'; fields[#fields + 1] = status
  fields[#fields + 1] = 'finished_at'; fields[#fields + 1] = ts
  redis.call('HSET', record, unpack(fields))
  redis.call('HDEL', record, 'worker', 'running_in')
  redis.call('ZREM', leases, run_id)
  left_running(state.running, 9)
  redis.call('EXPIRE', record, retention)
  redis.call('EXPIRE', stream, retention)
  count(stats, status)
  if status == 'failed' and failures then note_failure(failures, run_id) end
  settle_session(record, state)
  -- A run that wants webhook deliveries (its record names its shard's outbox: a webhook of
  -- its own, or the deployment's subscriptions) has them queued in this same step: no run
  -- ends without its deliveries queued, and none are queued for a run that did not end.
  if state.webhook_outbox then
    redis.call('ZADD', state.webhook_outbox, 'NX', now_ms(), 'e:' .. run_id)
  end
end

-- A session run started by a request that reads it, and nobody reads it any more
-- (streams/presence.py: ``readers_key`` holds who vouches for a reader until when): the next
-- turn of its session supersedes it. A run already stopping or ended is never "abandoned".
local function abandoned(record)
  local f = redis.call('HMGET', record, 'readers_key', 'status')
  if not f[1] or not f[2] or TERMINAL[f[2]] or f[2] == 'stopping' then return false end
  return redis.call('ZCOUNT', f[1], now_ms(), '+inf') == 0
end

-- Whether the existing ``record`` was written by an earlier send of this very creation: its
-- created_at, session_id and request are those of the field list argv[first], argv[first + 1],
-- ... (NewRun.fields). A create is sent again after a failure that may have been applied (the
-- connection cut while the reply was on its way: redisio/replication.py); another creation of
-- the same id (a scheduled tick fired by a second worker) differs at least in created_at. Such
-- a record is touched (created_at written again, unchanged), so the WAIT after this call
-- covers it as it covered the first send.
local function created_by(record, argv, first)
  local mine = {}
  for i = first, #argv - 1, 2 do mine[argv[i]] = argv[i + 1] end
  local found = redis.call('HMGET', record, 'created_at', 'session_id', 'request')
  if not mine.created_at or found[1] ~= mine.created_at or found[2] ~= mine.session_id
      or found[3] ~= mine.request then
    return false
  end
  redis.call('HSET', record, 'created_at', found[1])
  return true
end

local function fenced(record, attempt)
  local f = redis.call('HMGET', record, 'attempt', 'status')
  return f[1] == attempt and ACTIVE[f[2] or ''] == true
end
