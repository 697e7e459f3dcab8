#!lua flags=allow-oom
-- unfire: take back occurrences of a schedule that were fired ahead and are
-- not due yet (pause, rm and a changed schedule call it).
-- KEYS: the nine topic keys and P:{T}:fired (see includes/keys.lua).
-- ARGV: the ids (1 to 1000), each "<name>@<occurrence ms>".
-- Each id still in the pool (or the cold pool) with a due time after now is
-- removed with its record and attempts, and from P:{T}:fired, so that firing the same
-- occurrence again later is possible. A job that is due, ready, running or
-- dead is left alone (it may run or have run).
-- Returns the number of jobs removed.
-- include: args
-- include: now_ms
-- include: state
-- include: bulk
-- include: drop_retried
-- include: cold_settings
-- include: cold_left

if not K_FIRED then return invalid('unfire expects the tenth key, P:{T}:fired') end
if #ARGV < 1 or #ARGV > 1000 then return invalid('unfire expects 1 to 1000 ids') end
local now = now_ms()
local scores = redis.call('ZMSCORE', K_POOL, unpack(ARGV))
local gone, cold, seen = {}, 0, {}
for i, id in ipairs(ARGV) do
  if seen[id] then
    -- Given twice: once is enough.
  elseif scores[i] then
    seen[id] = true
    if tonumber(scores[i]) > now then gone[#gone + 1] = id end
  elseif cold_at() then
    -- A cold job (PROTOCOL.md "The cold pool"): its list entry stays, stale.
    seen[id] = true
    local st, due = state_of(id)
    if st == 'cold' and due > now then
      gone[#gone + 1] = id
      cold = cold + 1
    end
  end
end
if #gone == 0 then return 0 end
-- (Before any other write: keys.lua's K_RETRIED.)
drop_retried(gone)
if cold > 0 then cold_left(cold) end
variadic('ZREM', K_POOL, gone)
variadic('HDEL', K_JOBS, gone)
variadic('HDEL', K_ATT, gone)
variadic('ZREM', K_FIRED, gone)
redis.call('HINCRBY', K_STATS, 'cancelled', #gone)
return #gone
