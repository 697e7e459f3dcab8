-- release_groups: group limits: the running counts of jobs leaving running.
-- include: meta
-- include: group_count

-- Every path that takes jobs out of running (ack, fail, tick's reclaim,
-- cancel, enqueue's replace) calls this first, while their records are
-- still there: on a topic with group limits (glim true, or nil: read meta)
-- each job's group count goes down, and a group held back at its
-- max_running (gwait at inf) returns to P:{T}:groups, with a PUBLISH on the
-- ready channel to wake a worker. `recs`: the jobs' records when the caller
-- has them. Nothing on a topic without group limits.
local function release_groups(ids, glim, recs)
  if #ids == 0 then return end
  if glim == nil then glim = meta().glimited == '1' end
  if not glim then return end
  recs = recs or redis.call('HMGET', K_JOBS, unpack(ids))
  local count, names = {}, {}
  count_groups(recs, count, names)
  local K_GRUNNING, K_GWAIT = KEY_BASE .. 'grunning', KEY_BASE .. 'gwait'
  local vt
  for _, grp in ipairs(names) do
    if redis.call('HINCRBY', K_GRUNNING, grp, -count[grp]) <= 0 then redis.call('HDEL', K_GRUNNING, grp) end
    if redis.call('ZSCORE', K_GWAIT, grp) == 'inf' then
      vt = vt or redis.call('HGET', K_META, 'vtime') or '0'
      redis.call('ZREM', K_GWAIT, grp)
      redis.call('ZADD', KEY_BASE .. 'groups', 'NX', vt, grp)
    end
  end
  if vt then redis.call('PUBLISH', K_READY, '') end
end
