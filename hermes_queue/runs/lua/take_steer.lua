-- A session's next turn takes what a completed turn's steers left (its pending_steer), once:
-- the caller asked for it (session chat's take_pending_steer) and checked the run is its
-- session's.
-- KEYS: record
-- ARGV: (none)
-- Returns the text, or false when there is none to take (not completed, none, already taken).
local f = redis.call('HMGET', KEYS[1], 'status', 'pending_steer', 'pending_steer_taken')
if f[1] ~= 'completed' or not f[2] or f[3] then return false end
redis.call('HSET', KEYS[1], 'pending_steer_taken', '1')
return f[2]
