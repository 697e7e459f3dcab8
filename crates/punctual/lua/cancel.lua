#!lua flags=allow-oom
-- cancel: remove a job in any state, with its record.
-- KEYS: the nine topic keys. ARGV[1] id.
-- Returns the state it was in ("pool", also for a cold job, "ready",
-- "running", "dead", or "orphan" for a record in no set, which check
-- reports), or nil when no such
-- job is live. A worker still running a cancelled job cannot ack
-- or fail it afterwards (its lease is gone).
-- include: args
-- include: at_max_running
-- include: state
-- include: drop_retried
-- include: cold_left
-- include: release_groups

if #ARGV ~= 1 then return invalid('cancel expects one id') end
local id = ARGV[1]
local st = state_of(id)
-- (Before any other write: keys.lua's K_RETRIED.)
if st == 'pool' or st == 'ready' or st == 'cold' then drop_retried({ id }) end
local full, glim = false, false
if st == 'running' then
  full, glim = at_max_running()
  release_groups({ id }, glim)
end
local had = redis.call('HDEL', K_JOBS, id)
redis.call('HDEL', K_ATT, id)
if st == 'cold' then
  -- Its list entry stays, stale: tick drops it (the record is gone).
  cold_left(1)
  st = 'pool'
elseif st then
  redis.call('ZREM', STATE_KEY[st], id)
end
if not st and had == 0 then return false end
redis.call('HINCRBY', K_STATS, 'cancelled', 1)
if full then redis.call('PUBLISH', K_READY, '') end
return st or 'orphan'
