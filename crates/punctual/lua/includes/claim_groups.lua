-- claim_groups: claim's pick on a topic with groups, and the group limits
-- it applies; used by claim alone.
-- include: args
-- include: group_of_field
-- include: claimable
-- include: rate
-- include: group_count

-- Group limits (PROTOCOL.md "Group limits"), on a topic with meta
-- `glimited` = 1 (some group limit set; written by the group_limits script):
--   P:{T}:glimits  HASH group -> "rate;burst;max_running": a group's own
--                  limits, replacing the defaults (meta group_rate,
--                  group_burst, group_max_running); an empty field: none
--   P:{T}:grunning HASH group -> its jobs in running (absent: 0)
--   P:{T}:gbucket  HASH group -> "tokens:last refill ms" (absent: full)
--   P:{T}:gwait    ZSET group -> ms when it may be served again (inf: when
--                  one of its running jobs ends): groups held back by their
--                  own limit, out of P:{T}:groups meanwhile
local INF = 1 / 0

-- The state of the groups in `list` for one claim call (gs: {g = {}} per
-- call; groups already there are kept): each group's limits (rn, rp,
-- burst: its rate, rn nil for none; max: nil for none; its own in glimits,
-- else the defaults), running count, tokens at `now`, and `taken` (picked
-- by this call). One HMGET each of glimits, grunning and gbucket for all.
local function load_groups(gs, list, now)
  local new = {}
  for _, grp in ipairs(list) do
    if not gs.g[grp] then new[#new + 1] = grp end
  end
  if #new == 0 then return end
  if not gs.defaults then
    gs.defaults = redis.call('HMGET', K_META, 'group_rate', 'group_burst', 'group_max_running')
  end
  local own = redis.call('HMGET', KEY_BASE .. 'glimits', unpack(new))
  local running = redis.call('HMGET', KEY_BASE .. 'grunning', unpack(new))
  local buckets = redis.call('HMGET', KEY_BASE .. 'gbucket', unpack(new))
  local d = gs.defaults
  for i, grp in ipairs(new) do
    local rate, burst, max = d[1], d[2], d[3]
    if own[i] then rate, burst, max = string.match(own[i], '^([^;]*);([^;]*);([^;]*)$') end
    local s = { taken = 0, running = tonumber(running[i]) or 0 }
    s.rn, s.rp = rate_of(rate)
    if s.rn then
      s.burst = burst_of(burst, s.rn, s.rp)
      s.tokens = bucket_tokens(buckets[i], s.burst, s.rn, s.rp, now)
    end
    s.max = int_arg(max, 1, MAX_SAFE)
    gs.g[grp] = s
  end
end

-- How many more jobs the group may take now (INF: no limit).
local function group_room(s)
  local room = INF
  if s.max then room = s.max - s.running - s.taken end
  if s.rn then room = math.min(room, math.floor(s.tokens) - s.taken) end
  return room
end

-- Moves a group without room from P:{T}:groups to P:{T}:gwait: until its
-- next token, or (at its max_running) until one of its jobs leaves running.
local function group_hold(s, grp, now)
  local at = '+inf'
  if not (s.max and s.running + s.taken >= s.max) then
    at = now + math.max(1, math.ceil((1 - (s.tokens - s.taken)) * s.rp / s.rn))
  end
  redis.call('ZREM', KEY_BASE .. 'groups', grp)
  redis.call('ZADD', KEY_BASE .. 'gwait', at, grp)
end

-- Whether x sorts before y byte by byte, as a ZSET orders equal scores
-- (Lua's `<` on strings follows the server's locale).
local function bytes_less(x, y)
  for i = 1, math.min(#x, #y) do
    local p, q = string.byte(x, i), string.byte(y, i)
    if p ~= q then return p < q end
  end
  return #x < #y
end

-- How many jobs each of a groups takes when `need` jobs are served one at a
-- time, the lowest (virtual time, name) first, each adding 1 to its group's
-- virtual time, a group at most room[i], none past (bound, bound_name)
-- (nil: no bound); and the groups in the order of service. A binary heap on
-- (virtual time, rank of the name), so O(need log a) with no string
-- comparison per job.
local function serve_order(a, names, score, room, need, bound, bound_name)
  -- Common with many groups: all tied with the bound (fetched in name
  -- order, every room at least 1): one job each, in that order.
  if bound and a > 0 and score[1] == bound and score[a] == bound then
    local cnt, seq = {}, {}
    for i = 1, a do
      if i <= need then cnt[i], seq[i] = 1, i else cnt[i] = 0 end
    end
    return cnt, seq
  end
  local order = {}
  for i = 1, a do order[i] = i end
  table.sort(order, function(x, y) return bytes_less(names[x], names[y]) end)
  local rank, below = {}, {}
  for r, i in ipairs(order) do
    rank[i] = r
    below[i] = not bound or bytes_less(names[i], bound_name)
  end
  local cnt, level, heap = {}, {}, {}
  local function less(x, y)
    return level[x] < level[y] or (level[x] == level[y] and rank[x] < rank[y])
  end
  local function down(k, n)
    while true do
      local c = 2 * k
      if c > n then return end
      if c < n and less(heap[c + 1], heap[c]) then c = c + 1 end
      if not less(heap[c], heap[k]) then return end
      heap[c], heap[k] = heap[k], heap[c]
      k = c
    end
  end
  for i = 1, a do
    cnt[i], level[i], heap[i] = 0, score[i], i
  end
  local n = a
  for k = math.floor(n / 2), 1, -1 do down(k, n) end
  local total, seq = 0, {}
  while total < need and n > 0 do
    local b = heap[1]
    if bound and (level[b] > bound or (level[b] == bound and not below[b])) then break end
    cnt[b], level[b], total = cnt[b] + 1, level[b] + 1, total + 1
    seq[total] = b
    if cnt[b] >= room[b] then
      heap[1] = heap[n]
      n = n - 1
    end
    down(1, n)
  end
  return cnt, seq
end

-- claim's pick on a topic with groups: up to n ready ids, the group with the
-- lowest virtual time first, within a group in due order, exactly as if one
-- job were served per step (the served group's virtual time + 1). In passes:
-- the lowest w + 1 groups (`ZRANGE groups 0 w`, w = min(what is left, 32));
-- the last only bounds the others (when there are more), and how many jobs
-- each of the others takes before it would pass the bound is worked out in
-- Lua. Then per group one ZRANGE and one ZREM of its index (one entry more
-- than it takes: whether the index empties), and per pass one ZMSCORE of
-- ready (entries whose job left ready are dropped), one ZADD XX of the new
-- virtual times and one ZREM of the emptied groups. So 10 groups in turn
-- cost a few commands per pass, not per job, and 100,000 groups about two
-- per job. At most 4n + 16 index entries are read per call.
-- With group limits (gs, see load_groups; `now` ms): the groups of gwait
-- whose time has come return first (at the topic's virtual time); a group
-- takes at most its room, and one left without room goes to gwait (so do
-- groups met without room, at most 1000 per call: after a change of
-- limits). Only jobs the claim will lease (a record that reads, not
-- expired) take a group's room: one that goes to dead or is dropped does
-- not. An index entry whose job's record names another group (a stale
-- one, see index_ready) is dropped, not served. Returns the ids, the
-- virtual time to store (nil: none served), whether the groups ran out
-- (rather than the steps), when they ran out with groups held back, the
-- wait to report: ms to the earliest gwait entry, or -1 (until a running
-- job ends), and the records of the ids (false for a missing one), read
-- once for the checks above and reused by claim.
local function claim_groups(n, gs, now)
  local K_GROUPS, K_GWAIT = KEY_BASE .. 'groups', KEY_BASE .. 'gwait'
  if gs then
    local back = redis.call('ZRANGE', K_GWAIT, '-inf', now, 'BYSCORE', 'LIMIT', 0, 1000)
    if #back > 0 then
      local vt0 = redis.call('HGET', K_META, 'vtime') or '0'
      local adds = {}
      for _, grp in ipairs(back) do
        adds[#adds + 1] = vt0
        adds[#adds + 1] = grp
      end
      redis.call('ZADD', K_GROUPS, 'NX', unpack(adds))
      redis.call('ZREM', K_GWAIT, unpack(back))
    end
  end
  local ids, recs, picked, steps, held_steps = {}, {}, {}, 4 * n + 16, 1000
  local vt, ran_out = nil, false
  while #ids < n and steps > 0 and held_steps > 0 do
    local need = math.min(n - #ids, steps)
    local w = math.min(need, 32) + 1
    local top = redis.call('ZRANGE', K_GROUPS, 0, w - 1, 'WITHSCORES')
    if #top == 0 then
      ran_out = true
      break
    end
    local fetched = #top / 2
    local bound_name, bound
    if fetched == w then
      bound_name, bound = top[2 * w - 1], tonumber(top[2 * w])
      fetched = w - 1
    end
    -- The groups of this pass: name, virtual time, room, state.
    local names, score, room, st, a = {}, {}, {}, {}, 0
    if gs then
      local list = {}
      for i = 1, fetched do list[i] = top[2 * i - 1] end
      load_groups(gs, list, now)
    end
    for i = 1, fetched do
      local grp = top[2 * i - 1]
      local s = gs and gs.g[grp]
      local r = s and group_room(s) or INF
      if r <= 0 then
        group_hold(s, grp, now)
        held_steps = held_steps - 1
      else
        a = a + 1
        names[a], score[a], room[a], st[a] = grp, tonumber(top[2 * i]), r, s
      end
    end
    local cnt, seq = serve_order(a, names, score, room, need, bound, bound_name)
    -- Take their entries from the indexes; keep those still in ready, met
    -- in the order of service (a job indexed in two groups counts for the
    -- one served first).
    local entries, more = {}, {}
    for i = 1, a do
      if cnt[i] > 0 then
        local gk = KEY_BASE .. 'g:' .. names[i]
        local e = redis.call('ZRANGE', gk, 0, cnt[i])
        more[i] = #e > cnt[i]
        if more[i] then e[cnt[i] + 1] = nil end
        if #e > 0 then redis.call('ZREM', gk, unpack(e)) end
        entries[i] = e
        steps = steps - math.max(1, #e)
      end
    end
    local all, owner, next_of = {}, {}, {}
    for _, i in ipairs(seq) do
      local x = (next_of[i] or 0) + 1
      next_of[i] = x
      local id = entries[i][x]
      if id then
        all[#all + 1] = id
        owner[#all] = i
      end
    end
    -- live: the ids served per group; took: those the claim will lease
    -- (a record that reads and has not expired), the only ones that take
    -- the group's room and tokens. Counting a job that goes to dead or is
    -- dropped would hold the group at its max_running with nothing of it
    -- running, and nothing would ever release it.
    local live, took = {}, {}
    if #all > 0 then
      local sc = redis.call('ZMSCORE', K_READY, unpack(all))
      local cand, cown = {}, {}
      for j, id in ipairs(all) do
        if sc[j] and not picked[id] then
          cand[#cand + 1] = id
          cown[#cand] = owner[j]
        end
      end
      local crecs = #cand > 0 and redis.call('HMGET', K_JOBS, unpack(cand)) or {}
      for j, id in ipairs(cand) do
        local rec, i = crecs[j], cown[j]
        -- An entry left in the index of a group the job no longer belongs
        -- to (it was replaced into another group, or cancelled and enqueued
        -- again into another): dropped, never served through that group
        -- (the job is served through its own group's index).
        -- (group_of_rec, the group claim counts it in; only a record
        -- whose group differs there pays for group_of_field, index_ready's
        -- reading, which differs from it for an unreadable field only.)
        local m = rec and group_of_rec(rec) ~= names[i] and string.match(rec, '^([^:]*):')
        if not (m and group_of_field(m) ~= names[i]) then
          picked[id] = true
          ids[#ids + 1] = id
          recs[#ids] = rec
          live[i] = (live[i] or 0) + 1
          if gs and rec then
            local ok, expired = claimable(rec, now)
            if ok and not expired then took[i] = (took[i] or 0) + 1 end
          end
        end
      end
    end
    local rescore, gone = {}, {}
    for i = 1, a do
      if cnt[i] > 0 then
        local l = live[i] or 0
        if l > 0 and (not vt or score[i] + l - 1 > vt) then vt = score[i] + l - 1 end
        if not more[i] then
          gone[#gone + 1] = names[i]
        elseif l > 0 then
          local s = st[i]
          if s then s.taken = s.taken + (took[i] or 0) end
          if s and group_room(s) <= 0 then
            group_hold(s, names[i], now)
          else
            rescore[#rescore + 1] = score[i] + l
            rescore[#rescore + 1] = names[i]
          end
        end
      end
    end
    if #rescore > 0 then redis.call('ZADD', K_GROUPS, 'XX', unpack(rescore)) end
    if #gone > 0 then redis.call('ZREM', K_GROUPS, unpack(gone)) end
  end
  local held
  if gs and ran_out and #ids < n then
    local e = redis.call('ZRANGE', K_GWAIT, 0, 0, 'WITHSCORES')
    if e[1] then
      if e[2] == 'inf' then held = -1 else held = math.max(1, tonumber(e[2]) - now) end
    end
  end
  return ids, vt, ran_out, held, recs
end

-- claim's accounting with group limits: each leased job (`leases`: the
-- flat deadline, id list) counts in its group's running (by its record's
-- group) and takes a token from its group's bucket when it has a rate.
local function groups_claimed(gs, ids, recs, leases, now)
  local rec_of, leased, count, names = {}, {}, {}, {}
  for i, id in ipairs(ids) do rec_of[id] = recs[i] end
  for i = 2, #leases, 2 do leased[#leased + 1] = rec_of[leases[i]] end
  count_groups(leased, count, names)
  load_groups(gs, names, now)
  local running, buckets = {}, {}
  for _, grp in ipairs(names) do
    local c, s = count[grp], gs.g[grp]
    running[#running + 1] = grp
    running[#running + 1] = s.running + c
    if s.rn then
      buckets[#buckets + 1] = grp
      buckets[#buckets + 1] = string.format('%.6f:%d', math.max(0, s.tokens - c), now)
    end
  end
  if #running > 0 then redis.call('HSET', KEY_BASE .. 'grunning', unpack(running)) end
  if #buckets > 0 then redis.call('HSET', KEY_BASE .. 'gbucket', unpack(buckets)) end
end
