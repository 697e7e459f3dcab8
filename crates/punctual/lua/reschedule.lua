#!lua
-- reschedule: give a waiting job (pool or ready) a new due time.
-- KEYS: the nine topic keys. ARGV[1] id, ARGV[2] when ("d<ms>" or "a<ms>").
-- Returns {state before, new due ms}; {"running", 0} or {"dead", 0} and no
-- change for a job that is running or dead (use dead replay); nil when no such
-- job is live.
-- include: args
-- include: clock
-- include: b36
-- include: record
-- include: encode
-- include: due_of
-- include: earliest
-- include: state
-- include: cold
-- include: cold_place
-- include: cold_left
-- include: index_ready

if #ARGV ~= 2 then return invalid('reschedule expects an id and a due time') end
local id = ARGV[1]
local now, up = clock()
local due, why = due_of(ARGV[2], now, up)
if not due then return invalid(why) end
-- (the record keeps its creation time)
local st = state_of(id)
if not st then return false end
if st == 'running' or st == 'dead' then return { st, 0 } end
local r = decode(redis.call('HGET', K_JOBS, id))
if not r then return invalid('the record of "' .. id .. '" cannot be read; run punctual check') end
local was_cold = st == 'cold'
if was_cold then st = 'pool' end
local old_due = r.due
-- The expiry deadline moves with the due time: the window is kept.
if r.deadline then
  r.mfield = string.gsub(r.mfield, ';e[^;]*', ';e' .. b36(r.deadline + due - r.due), 1)
end
r.due = due
if was_cold and due >= cold_from(now) and due - due % COLD_BUCKET == old_due - old_due % COLD_BUCKET then
  -- Cold, and staying in the same bucket: its entry there moves it by the
  -- new due time, so only the record changes (no entry more per call).
  redis.call('HSET', K_JOBS, id, encode(r))
  return { st, due }
end
-- A cold job's list entry stays, stale: the record's new due time is not
-- in its bucket, or a second entry there moves the job once.
local to_cold = due > now and cold_place(id, due, now)
-- The cold pool's keys first (cold.lua's cold_place).
if to_cold then cold_flush() end
if was_cold then cold_left(1) end
redis.call('HSET', K_JOBS, id, encode(r))
if due <= now then
  redis.call('ZADD', K_READY, due, id)
  index_ready({ due, id })
  if st ~= 'ready' then redis.call('ZREM', K_POOL, id) end
  redis.call('PUBLISH', K_READY, '')
elseif to_cold then
  redis.call('ZREM', STATE_KEY[st], id)
else
  local old_min = earliest(K_POOL)
  redis.call('ZADD', K_POOL, due, id)
  if st ~= 'pool' then redis.call('ZREM', K_READY, id) end
  if not old_min or due < old_min then redis.call('PUBLISH', K_POOL, due) end
end
return { st, due }
