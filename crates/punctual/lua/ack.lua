#!lua flags=allow-oom
-- ack: the jobs are done; delete them. Fenced: only the holder of the current
-- lease (the token its claim returned) can ack. Runs even when Redis is over
-- maxmemory, since it only deletes.
-- KEYS: the nine topic keys. ARGV: pairs id, token (1..1000 pairs); or
-- the grouped form, for jobs that share a token (the jobs of one claim
-- do): "" (no id is empty), g (1..1000 groups), then g pairs token, count
-- (1..1000), then the ids, group after group (the counts add up to
-- 1..1000): each group's ids are acked with its token, so a job costs one
-- argument, not two. The
-- token may also be given as the attempts entry its claim wrote, "0A:T"
-- (the live mark, the attempt and the token, as the claim's reply gave
-- them): then a live lease is proven by one string comparison.
-- Returns an array: the number of jobs acked, then the positions (1-based,
-- increasing; in the grouped form, among the ids as given) of the jobs
-- refused (the job is no longer running under that token: reclaimed,
-- re-delivered, cancelled or replaced). So a call whose jobs were all acked
-- gets one value back, not one per job.
-- Publishes on the ready channel when it frees a slot of a topic at its
-- max_running (or of a group at its own, see release_groups).
-- A lease is proven by its attempts entry alone when the entry carries the
-- live mark ("0A:T", see is_live_att) and ends in ":" and the token; an
-- unmarked entry with that token is also looked up in running. The entry
-- form is only a shortcut: when it is not the entry, its token is checked
-- so, as if given alone (its attempt is not compared).
-- include: args
-- include: is_live_att
-- include: at_max_running
-- include: release_groups

-- ids[i]: the i-th job's id; toks[i]: the token it is acked with (in the
-- grouped form, made only when a job's entry is not its group's token).
local ids, toks, n = nil, nil, 0
-- The grouped form's groups: their tokens and counts.
local gtok, gcount = nil, nil
if ARGV[1] == '' then
  local g = int_arg(ARGV[2], 1, 1000)
  local first = g and 2 * g + 3
  if not g or #ARGV < first then
    return invalid('ack expects "", a count of 1 to 1000 groups, a token and a count per group, then the ids')
  end
  gtok, gcount = {}, {}
  for k = 1, g do
    local c = int_arg(ARGV[2 * k + 2], 1, 1000)
    if not c or n + c > 1000 then
      return invalid('ack expects each group\'s count to be 1 to 1000, and 1000 ids at most in all')
    end
    gtok[k], gcount[k] = ARGV[2 * k + 1], c
    n = n + c
  end
  if #ARGV - first + 1 ~= n then
    return invalid('ack expects as many ids as the groups\' counts add up to (' .. n .. '), got '
      .. (#ARGV - first + 1))
  end
  ids = { unpack(ARGV, first) }
else
  n = #ARGV / 2
  if n < 1 or n > 1000 or #ARGV % 2 ~= 0 then
    return invalid('ack expects 1 to 1000 pairs of id, token')
  end
  ids, toks = {}, {}
  for i = 1, n do
    ids[i] = ARGV[2 * i - 1]
    toks[i] = ARGV[2 * i]
  end
end
local atts = redis.call('HMGET', K_ATT, unpack(ids))
local find, byte, match = string.find, string.byte, string.match
if gtok then
  -- Each group's entries compared with its token, an entry with the live
  -- mark (one pointer comparison per job: Lua strings are interned); when
  -- every job passes, the loop below is skipped.
  local i, all = 0, true
  for k = 1, #gtok do
    local tok, c = gtok[k], gcount[k]
    if byte(tok, 1) ~= 48 then all = false break end
    for j = i + 1, i + c do
      if atts[j] ~= tok then all = false break end
    end
    if not all then break end
    i = i + c
  end
  if not all then
    toks, i = {}, 0
    for k = 1, #gtok do
      for j = i + 1, i + gcount[k] do toks[j] = gtok[k] end
      i = i + gcount[k]
    end
  end
end
-- The refused positions (position -> true), made at the first refusal.
local bad, done, nd = nil, ids, n
for i = 1, toks and n or 0 do
  local v, tok = atts[i], toks[i]
  -- The entry itself, with the live mark (Lua strings are interned: the
  -- equality is one pointer comparison; an unmarked entry proves nothing).
  local ok = v == tok and byte(v, 1) == 48
  -- Else the token alone, or the token of an entry form.
  if not ok and v then
    if find(tok, ':', 1, true) then tok = match(tok, '^0%d+:(%d+)$') or '' end
    -- The entry ends in ":" and the token: compared in place, no new string.
    local at = #v - #tok
    if tok ~= '' and byte(v, at) == 58 and find(v, tok, at + 1, true) then
      ok = is_live_att(v) or redis.call('ZSCORE', K_RUNNING, ids[i]) ~= false
    end
  end
  if not ok then
    -- Checked only when refused, so a good ack pays nothing: a token that
    -- is not an integer (nor an entry "0A:T") is an error, not a refusal.
    tok = toks[i]
    local t = tok
    if find(tok, ':', 1, true) then t = match(tok, '^0%d+:(%d+)$') end
    if not int_arg(t, 0, MAX_SAFE) then
      return invalid('ack expects tokens as decimal integers (or attempts entries "0A:T"), got "' .. tok .. '"')
    end
    if not bad then
      -- The first refusal: from here on, only the accepted ids are deleted.
      bad, done, nd = {}, {}, 0
      for j = 1, i - 1 do
        nd = nd + 1
        done[nd] = ids[j]
      end
    end
    bad[i] = true
  elseif bad then
    nd = nd + 1
    done[nd] = ids[i]
  end
end
if nd > 0 then
  local full, glim = at_max_running()
  if glim then
    -- Each job's group counts down once, even when its id was given twice.
    local uniq, once = {}, {}
    for i = 1, nd do
      if not once[done[i]] then
        once[done[i]] = true
        uniq[#uniq + 1] = done[i]
      end
    end
    release_groups(uniq, true)
  end
  redis.call('ZREM', K_RUNNING, unpack(done, 1, nd))
  redis.call('HDEL', K_JOBS, unpack(done, 1, nd))
  local acked = redis.call('HDEL', K_ATT, unpack(done, 1, nd))
  if acked < nd then
    -- An id given twice: its first pair acked it, the others are refused.
    local seen = {}
    bad = bad or {}
    for i = 1, n do
      if not bad[i] then
        if seen[ids[i]] then bad[i] = true else seen[ids[i]] = true end
      end
    end
  end
  redis.call('HINCRBY', K_STATS, 'done', acked)
  if full then redis.call('PUBLISH', K_READY, '') end
end
local out = { 0 }
if bad then
  for i = 1, n do
    if bad[i] then out[#out + 1] = i end
  end
end
out[1] = n - (#out - 1)
return out
