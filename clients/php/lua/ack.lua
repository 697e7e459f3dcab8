#!lua flags=allow-oom
-- keys: the KEYS every script takes and their check. The loader puts this
-- file first in every script (src/scripts.rs), before the includes the
-- script names, so every call is checked before anything else runs.
--
-- KEYS, the same for every script (one topic T, prefix P):
--   KEYS[1] P:{T}:pool     ZSET id -> due ms        (also the pub/sub channel
--                                                    "pool has an earlier job")
--   KEYS[2] P:{T}:ready    ZSET id -> due ms        (also the pub/sub channel
--                                                    "ready has jobs")
--   KEYS[3] P:{T}:running  ZSET id -> lease deadline ms
--   KEYS[4] P:{T}:dead     ZSET id -> time of death ms
--   KEYS[5] P:{T}:jobs     HASH id -> record
--   KEYS[6] P:{T}:meta     HASH topic settings: max_attempts, backoff, paused,
--                          partitions (the count set_partitions last wrote),
--                          limits: rate, burst, max_running, bucket
--                          groups: groups (1: indexed), vtime
--   KEYS[7] P:{T}:stats    HASH counters
--   KEYS[8] P:{T}:seq      STRING counter for generated ids and lease tokens
--   KEYS[9] P:{T}:attempts HASH id -> "A:T": deliveries so far and the token
--                          of the latest claim; absent until the first claim;
--                          "0A:T" (a leading zero) while that claim's lease
--                          is live (see is_live_att)
--   KEYS[10] P:{T}:fired   ZSET id -> ms fired: occurrences of schedules
--                          (optional; enqueue and unfire only)
-- Reached by name (same hash tag): P:{T}:cold, a ZSET of bucket starts, and
-- P:{T}:c:<start>, LISTs of ids: the cold pool (see cold.lua);
-- meta cold_after, cold_at, cold_n. P:{T}:retried, a SET of ids (K_RETRIED
-- below; retried.lua); meta retried, retried_n.

-- Every call is checked once, before anything else: exactly these nine keys,
-- in this order, all with the same prefix and hash tag. (Keys of two topics
-- mixed in one call would write inconsistent state on a single Redis.)
local KEY_NAMES = { 'pool', 'ready', 'running', 'dead', 'jobs', 'meta', 'stats', 'seq', 'attempts' }
-- A tenth key, P:{T}:fired (ZSET id -> ms fired, see the enqueue script), is
-- allowed after them; only the scripts that use it read K_FIRED.
local KEY_BASE = (#KEYS == 9 or #KEYS == 10) and string.match(KEYS[1], '^([^{}]+:{[^{}]+}:)pool$')
if KEY_BASE then
  for i = 2, 9 do
    if KEYS[i] ~= KEY_BASE .. KEY_NAMES[i] then KEY_BASE = nil break end
  end
  if KEY_BASE and #KEYS == 10 and KEYS[10] ~= KEY_BASE .. 'fired' then KEY_BASE = nil end
end
if not KEY_BASE then
  return redis.error_reply('PUNCTUAL_INVALID expected the nine keys of one topic, P:{T}:pool, P:{T}:ready, '
    .. 'P:{T}:running, P:{T}:dead, P:{T}:jobs, P:{T}:meta, P:{T}:stats, P:{T}:seq, P:{T}:attempts, '
    .. 'optionally followed by P:{T}:fired (got ' .. #KEYS .. ' keys that are not)')
end

local K_POOL, K_READY, K_RUNNING, K_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_JOBS, K_META, K_STATS, K_SEQ = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_ATT = KEYS[9]
local K_FIRED = KEYS[10]
-- P:{T}:retried, a SET: ids of waiting jobs (pool, ready or cold) whose
-- attempts entry was kept when their lease ended (fail's retry, tick's
-- reclaim), added by those two scripts and removed by the claim that takes
-- the job, or by whatever deletes it; meta retried_n counts its members
-- (add_retried, drop_retried), so that a script touches the set only when
-- it has some. Once meta "retried" is 1 (claim sets it when the attempts
-- hash is empty, so no entry predates the set), every waiting job with an
-- entry is in it: a claim then reads the entries of these ids only, and a
-- job of a claim not in it is on its first attempt.
-- The set is not among the KEYS: on a Redis Cluster whose slot is
-- migrating, touching it when it is not on this node fails the script, so
-- every script touches it before its other writes (as the cold pool's keys).
local K_RETRIED = KEY_BASE .. 'retried'
-- args: the bounds and defaults the scripts check against, the check of a
-- numeric argument (int_arg) and the reply to a call refused (invalid).

local DEFAULT_MAX_ATTEMPTS = 6
-- Most deliveries a job may have (its own setting or the topic's).
local MAX_ATTEMPTS = 10000
-- Largest integer a Lua number (a double) holds exactly: 2^53.
local MAX_SAFE = 9007199254740992
local DEFAULT_BACKOFF = '0,5000,30000,120000,600000,1800000'
-- Ten years in ms: longer delays are refused as absurd.
local MAX_DELAY_MS = 315360000000

-- A numeric argument: plain decimal digits (no sign, point, exponent,
-- spaces, hex, inf or nan), at most 16 of them, within lo..hi. nil otherwise.
local function int_arg(s, lo, hi)
  if not s or #s > 16 or not string.find(s, '^%d+$') then return nil end
  local v = tonumber(s)
  if v < lo or v > hi then return nil end
  return v
end

local function invalid(msg)
  return redis.error_reply('PUNCTUAL_INVALID ' .. msg)
end
-- is_live_att: whether an attempts-hash entry carries the live mark.

-- The live mark: claim writes a job's attempts entry as "0A:T", a zero
-- before the attempts, and every script that takes the job out of running
-- drops the zero (fail, tick's reclaim) or deletes the entry (ack, cancel,
-- enqueue's replace). So a marked entry whose token matches proves the
-- lease without a look in running. An entry without the mark (a job that
-- left running, or a lease taken by a version before the mark) is checked
-- against running as well. att_of and token_str read both forms.
local function is_live_att(v)
  return string.byte(v, 1) == 48
end
-- meta: the topic settings the helpers read, with one HMGET per call.

-- The topic settings the helpers below read (topic_defaults,
-- at_max_running, index_ready; enqueue's partitions), read with one HMGET
-- per call, at the first use, and kept: a script that writes one of these
-- fields afterwards updates the table too (enqueue's groups).
local meta_read = nil
local function meta()
  if not meta_read then
    local m = redis.call('HMGET', K_META, 'max_attempts', 'backoff', 'max_running', 'groups', 'vtime',
      'partitions', 'glimited', 'cold_after', 'cold_at')
    meta_read = { max_attempts = m[1], backoff = m[2], max_running = m[3], groups = m[4], vtime = m[5],
      partitions = m[6], glimited = m[7], cold_after = m[8], cold_at = m[9] }
  end
  return meta_read
end
-- at_max_running: whether the topic is at its max_running, read by the scripts that
-- take jobs out of running.
-- include: args
-- include: meta

-- Whether the topic is at its max_running (meta), read before a script
-- takes jobs out of running: then it publishes on the ready channel after,
-- so a worker waiting for a free slot claims at once. False (and no
-- ZCARD) when the topic has no max_running.
-- Also returns whether the topic has group limits (meta `glimited` = 1),
-- for release_groups, from the same HMGET.
local function at_max_running()
  local m = meta()
  local mr = int_arg(m.max_running, 1, MAX_SAFE)
  return mr ~= nil and redis.call('ZCARD', K_RUNNING) >= mr, m.glimited == '1'
end
-- group_count: the group a job counts in, and counts of jobs by group.

-- The group a job counts in, from its record: its g option, '' without
-- one. One pattern; the same in claim, in release_groups and in
-- group_limits' count, so the counts add up. (claim leases only records
-- whose options read, for which this is group_of_field's answer.)
local function group_of_rec(rec)
  -- One match: the first ';g' before the first ':' (the M field's end).
  return string.match(rec, '^[^:]-;g([^;:]*)') or ''
end

-- Adds the jobs of `recs` (records, false for a missing one, skipped) to
-- `count` (group -> jobs), listing each new group in `names`, in order.
local function count_groups(recs, count, names)
  for i = 1, #recs do
    if recs[i] then
      local grp = group_of_rec(recs[i])
      if not count[grp] then
        count[grp] = 0
        names[#names + 1] = grp
      end
      count[grp] = count[grp] + 1
    end
  end
end
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
