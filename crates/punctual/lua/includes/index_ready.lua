-- index_ready: the groups' indexes of ready jobs.
-- include: group_of_field
-- include: meta
-- include: bulk

-- Groups (PROTOCOL.md "Groups"): once a topic has grouped jobs (meta
-- `groups` = 1), every job put into ready is also indexed in its group's
-- ZSET P:{T}:g:<group> (ungrouped: P:{T}:g:), and its group is activated
-- in P:{T}:groups at the topic's virtual time (meta `vtime`) unless already
-- active. `pairs` is the flat score, id list given to ZADD ready; the
-- records must already be written. Costs nothing more than the script's one
-- read of meta (see meta()) on a topic without groups.
local function index_ready(pairs)
  if #pairs == 0 then return end
  local g = meta()
  if g.groups ~= '1' then return end
  local vt = g.vtime or '0'
  -- With group limits, a group held back (in P:{T}:gwait) stays there.
  local K_GWAIT = g.glimited == '1' and KEY_BASE .. 'gwait'
  local ids = {}
  for i = 2, #pairs, 2 do ids[#ids + 1] = pairs[i] end
  local by, names = {}, {}
  local i = 1
  while i <= #ids do
    local j = math.min(i + 999, #ids)
    local recs = redis.call('HMGET', K_JOBS, unpack(ids, i, j))
    for x = i, j do
      local rec = recs[x - i + 1]
      local m = rec and string.match(rec, '^([^:]*):')
      local grp = m and group_of_field(m) or ''
      local l = by[grp]
      if not l then
        l = {}
        by[grp] = l
        names[#names + 1] = grp
      end
      l[#l + 1] = pairs[2 * x - 1]
      l[#l + 1] = ids[x]
    end
    i = j + 1
  end
  for _, grp in ipairs(names) do
    variadic('ZADD', KEY_BASE .. 'g:' .. grp, by[grp])
    if not K_GWAIT or not redis.call('ZSCORE', K_GWAIT, grp) then
      redis.call('ZADD', KEY_BASE .. 'groups', 'NX', vt, grp)
    end
  end
end
