#!lua flags=no-writes
-- check: verify the one-state invariant for some ids, atomically per call.
-- KEYS: the nine topic keys. ARGV: the ids to check (1..1000), typically a
-- page of an HSCAN of jobs or a ZSCAN of a set.
-- Returns a flat array id, problem for every id that breaks the invariant:
--   "in pool,ready" (more than one set), "no record (in running)",
--   "record in no set", "unreadable record", "attempts entry without a record",
--   "running without an attempts entry", "attempts entry marked live outside
--   running", "waiting with an attempts entry, not in P:{T}:retried" (once
--   meta retried is 1: the next claim would count its attempts from 1; see
--   keys.lua's K_RETRIED), "in P:{T}:retried, not waiting" (a member that
--   is running, dead or gone: it keeps claims reading the set); and
--   "cold <start>" for a cold job (PROTOCOL.md "The cold
--   pool": in no set, its record due at or after cold_at), which is not a
--   problem by itself: the caller checks that the list P:{T}:c:<start>
--   holds the id.
-- An id in no set and without a record is fine: it finished meanwhile.
-- With no ids (ARGV empty), checks the held groups instead (PROTOCOL.md
-- "Group limits"): returns a flat array group, problem for each group in
-- P:{T}:gwait until one of its running jobs ends (score inf) while fewer
-- jobs of it run than its max_running (or it has none): nothing would
-- release it, and its ready jobs would never run. At most 1000 groups.
-- include: args
-- include: record
-- include: is_live_att
-- include: cold
-- include: cold_due

if #ARGV == 0 then
  local out = {}
  if redis.call('HGET', K_META, 'glimited') ~= '1' then return out end
  local held = redis.call('ZRANGE', KEY_BASE .. 'gwait', '+inf', '+inf', 'BYSCORE', 'LIMIT', 0, 1000)
  if #held == 0 then return out end
  local default = redis.call('HGET', K_META, 'group_max_running')
  local own = redis.call('HMGET', KEY_BASE .. 'glimits', unpack(held))
  local running = redis.call('HMGET', KEY_BASE .. 'grunning', unpack(held))
  for i, grp in ipairs(held) do
    local max = default
    if own[i] then max = string.match(own[i], '^[^;]*;[^;]*;([^;]*)$') end
    max = int_arg(max, 1, MAX_SAFE)
    local r = tonumber(running[i]) or 0
    if not max or r < max then
      out[#out + 1] = grp
      out[#out + 1] = string.format('held until one of its running jobs ends, with %d of its max_running %s '
        .. 'running: nothing releases it and its ready jobs never run', r, max and string.format('%d', max) or 'none')
    end
  end
  return out
end
if #ARGV > 1000 then return invalid('check expects 1 to 1000 ids (or none: the held groups)') end
local out = {}
local trusted = redis.call('HGET', K_META, 'retried') == '1'
local n_retried = tonumber(redis.call('HGET', K_META, 'retried_n')) or 0
for _, id in ipairs(ARGV) do
  local sets = {}
  if redis.call('ZSCORE', K_POOL, id) then sets[#sets + 1] = 'pool' end
  if redis.call('ZSCORE', K_READY, id) then sets[#sets + 1] = 'ready' end
  if redis.call('ZSCORE', K_RUNNING, id) then sets[#sets + 1] = 'running' end
  if redis.call('ZSCORE', K_DEAD, id) then sets[#sets + 1] = 'dead' end
  local rec = redis.call('HGET', K_JOBS, id)
  local problem, cold = nil, nil
  if #sets == 0 and rec then
    local r = decode(rec)
    if r and is_cold_due(r.due) then
      cold = string.format('cold %d', r.due - r.due % COLD_BUCKET)
      sets[1] = 'cold'
    end
  end
  if #sets > 1 then
    problem = 'in ' .. table.concat(sets, ',')
  elseif #sets == 1 and not rec then
    problem = 'no record (in ' .. sets[1] .. ')'
  elseif #sets == 0 and rec then
    problem = 'record in no set'
  elseif rec and not decode(rec) then
    problem = 'unreadable record'
  elseif not rec and redis.call('HEXISTS', K_ATT, id) == 1 then
    problem = 'attempts entry without a record'
  elseif sets[1] == 'running' and redis.call('HEXISTS', K_ATT, id) == 0 then
    -- A lease needs its token: without one, nobody can ack the job.
    problem = 'running without an attempts entry'
  elseif sets[1] ~= 'running' and rec then
    -- The live mark outside running would let a stale token ack the job.
    local att = redis.call('HGET', K_ATT, id)
    if att and is_live_att(att) then
      problem = 'attempts entry marked live outside running'
    elseif att and trusted and sets[1] ~= 'dead' and redis.call('SISMEMBER', K_RETRIED, id) == 0 then
      problem = 'waiting with an attempts entry, not in P:{T}:retried'
    end
  end
  if not problem and n_retried > 0 and not (#sets == 1 and (sets[1] == 'pool' or sets[1] == 'ready'
      or sets[1] == 'cold')) and redis.call('SISMEMBER', K_RETRIED, id) == 1 then
    problem = 'in P:{T}:retried, not waiting'
  end
  problem = problem or cold
  if problem then
    out[#out + 1] = id
    out[#out + 1] = problem
  end
end
return out
