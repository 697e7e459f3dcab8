#!lua flags=allow-oom
-- cancel: remove a job in any state, with its record.
-- KEYS: the nine topic keys. ARGV[1] id.
-- Returns the state it was in ("pool", also for a cold job, "ready",
-- "running", "dead", or "orphan" for a record in no set, which check
-- reports), or nil when no such
-- job is live. A running job's lease is revoked (its attempts entry goes
-- with the record, and it leaves running): no ack or fail of it lands
-- afterwards, and no tick reclaims it. The worker holding the lease is told
-- on the channel P:{T}:cancel (reached by name, same hash tag): the message
-- is "<token>:<id>", the lease's token read from the entry.
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
local lease
if st == 'running' then
  full, glim = at_max_running()
  release_groups({ id }, glim)
  lease = string.match(redis.call('HGET', K_ATT, id) or '', ':(%d+)$')
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
if lease then redis.call('PUBLISH', KEY_BASE .. 'cancel', lease .. ':' .. id) end
return st or 'orphan'
