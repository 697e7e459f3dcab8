#!lua
-- lib.lua: helpers shared by every punctual script. It is inserted after the
-- shebang line of each script (see src/scripts.rs), so each script is one
-- self-contained text; `punctual script NAME` prints the assembled text.
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
--
-- Record (never rewritten by claim, ack or extend): "M:D:G:B:E:" then E bytes
-- of last error, then the payload. M max attempts (decimal, empty: topic
-- default), then the per-job options if any (see opts_of), D due time (ms,
-- base 36), G due - created (ms, base 36), B backoff ladder (ms, comma
-- separated, empty: topic default), E length of the last error (decimal).

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

local DEFAULT_MAX_ATTEMPTS = 6
-- Most deliveries a job may have (its own setting or the topic's).
local MAX_ATTEMPTS = 10000
-- Largest integer a Lua number (a double) holds exactly: 2^53.
local MAX_SAFE = 9007199254740992
local DEFAULT_BACKOFF = '0,5000,30000,120000,600000,1800000'
-- Ten years in ms: longer delays are refused as absurd.
local MAX_DELAY_MS = 315360000000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Redis's clock: ms rounded down, ms rounded up, and microseconds. A delay
-- counts from the rounded-up ms, so a job is never due before the instant
-- of the call plus its delay, to the microsecond.
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  local now = s * 1000 + math.floor(us / 1000)
  local up = now
  if us % 1000 ~= 0 then up = now + 1 end
  return now, up, s * 1000000 + us
end

-- A numeric argument: plain decimal digits (no sign, point, exponent,
-- spaces, hex, inf or nan), at most 16 of them, within lo..hi. nil otherwise.
local function int_arg(s, lo, hi)
  if not s or #s > 16 or not string.find(s, '^%d+$') then return nil end
  local v = tonumber(s)
  if v < lo or v > hi then return nil end
  return v
end

-- Reserves n lease tokens and returns the value just before the first. They
-- follow the topic's seq counter and never fall below Redis's clock in
-- microseconds, so a restart that lost the latest writes (an RDB snapshot,
-- AOF everysec, a failover to a replica that lagged) cannot hand a token out
-- again: the clock moved on meanwhile. They stay below 2^53 until 2255.
-- One SET ... GET in the common case (seq behind the clock); a second SET
-- when seq is ahead (a burst of more than one token per microsecond).
local function reserve_tokens(n, now_us)
  local old = tonumber(redis.call('SET', K_SEQ, string.format('%d', now_us + n), 'GET')) or 0
  if old <= now_us then return now_us end
  redis.call('SET', K_SEQ, string.format('%d', old + n))
  return old
end

-- Whether s is valid UTF-8 (no overlong forms, surrogates or code points
-- past U+10FFFF). ASCII is checked by one string.find.
local function utf8_ok(s)
  local i, n = 1, #s
  while i <= n do
    local j = string.find(s, '[\128-\255]', i)
    if not j then return true end
    local c, b = string.byte(s, j, j + 1)
    local len
    if c >= 0xC2 and c <= 0xDF then len = 2
    elseif c >= 0xE0 and c <= 0xEF then len = 3
    elseif c >= 0xF0 and c <= 0xF4 then len = 4
    else return false end
    if not b or (c == 0xE0 and b < 0xA0) or (c == 0xED and b > 0x9F)
      or (c == 0xF0 and b < 0x90) or (c == 0xF4 and b > 0x8F) then
      return false
    end
    for k = j + 1, j + len - 1 do
      local x = string.byte(s, k)
      if not x or x < 0x80 or x > 0xBF then return false end
    end
    i = j + len
  end
  return true
end

-- The byte of each base-36 digit, '0'..'9' then 'a'..'z'. A table
-- constructor, not a loop of string.byte: this line runs on every call of
-- every script, and the loop cost about 2.5 us per call (Redis 7.0,
-- measured with an empty script body).
local DIGIT_BYTES = {
  [0] = 48, 49, 50, 51, 52, 53, 54, 55, 56, 57,
  97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109,
  110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122,
}

-- Base 36, left-padded with zeros to `width` (when given). The digits go
-- into one reused table, right to left, and out as one string.char.
local B36_BUF = {}
local function b36(n, width)
  n = math.floor(n)
  local i = 13
  if n <= 0 then
    i = 12
    B36_BUF[12] = 48
  end
  while n > 0 do
    local r = n % 36
    i = i - 1
    B36_BUF[i] = DIGIT_BYTES[r]
    n = (n - r) / 36
  end
  local s = string.char(unpack(B36_BUF, i, 12))
  if width and #s < width then s = string.rep('0', width - #s) .. s end
  return s
end

-- M may carry per-job options after the max attempts (PROTOCOL.md "Per-job
-- options"): ";" then a letter and a value, M = "<digits or empty>[;<opt>]*",
-- with e<deadline, epoch ms, base 36>, t<timeout ms> and g<group>.
local HEADER = '^([^:]*):(%w+):(%w+):([%d,]*):(%d+):()'
-- A readable record without options, without captures. (A record with
-- options fails it, and is read with decode.)
local HEADER_CHECK = '^%d*:%w+:%w+:[%d,]*:%d+:'

-- The options of an M field: max attempts (number or nil) and a table
-- {deadline, timeout, group} (nil when M has no options), or false when M
-- is not one (M must match ^%d*(;[etg][^;:]*)*$). Only a field with ';' pays
-- for more than one string.find.
local function opts_of(m)
  if not string.find(m, ';', 1, true) then
    if not string.find(m, '^%d*$') then return false end
    return tonumber(m), nil
  end
  local d, rest = string.match(m, '^(%d*)(;.*)$')
  if not d then return false end
  local o = {}
  for letter, v in string.gmatch(rest, ';([^;]?)([^;]*)') do
    if letter == 'e' then o.deadline = tonumber(v, 36)
    elseif letter == 't' then o.timeout = tonumber(v)
    elseif letter == 'g' then o.group = v
    else return false end
  end
  return tonumber(d), o
end

-- The group of a record's M field: its g option, or '' (no group, or an
-- unreadable field).
local function group_of_field(m)
  if not string.find(m, ';', 1, true) then return '' end
  local _, o = opts_of(m)
  return o and o.group or ''
end

-- The options part of an M field: from its first ';' on ('' without).
local function options_text(m)
  local p = string.find(m, ';', 1, true)
  if not p then return '' end
  return string.sub(m, p)
end

-- A record as a table: max (number or nil: the topic default), mfield (M as
-- stored, written back by encode), due, created, backoff, err, payload, and
-- when M carries options: deadline, timeout, group (each nil when absent).
-- nil when the record is missing or unreadable.
local function decode(rec)
  if not rec then return nil end
  local m, d, g, b, e, p = string.match(rec, HEADER)
  if not m then return nil end
  local max, o = opts_of(m)
  if max == false then return nil end
  e = tonumber(e)
  local due = tonumber(d, 36)
  local r = {
    max = max,
    mfield = m,
    due = due,
    created = due - tonumber(g, 36),
    backoff = b,
    err = string.sub(rec, p, p + e - 1),
    payload = string.sub(rec, p + e),
  }
  if o then r.deadline, r.timeout, r.group = o.deadline, o.timeout, o.group end
  return r
end

-- claim's check of a record: whether it reads, and for one whose expiry
-- deadline is before `now`, the record decoded (true, r). Only a record with
-- options pays for more than one string.find, and only an expired one is
-- decoded whole.
local HEADER_M = '^([^:]*):%w+:%w+:[%d,]*:%d+:'
local function claimable(rec, now)
  if string.find(rec, HEADER_CHECK) then return true, nil end
  local m = string.match(rec, HEADER_M)
  if not m then return false, nil end
  local max, o = opts_of(m)
  if max == false then return false, nil end
  if o and o.deadline and o.deadline < now then return true, decode(rec) end
  return true, nil
end

local function encode(r)
  local gap = r.due - r.created
  if gap < 0 then gap = 0 end
  return table.concat({
    r.mfield or r.max or '', ':', b36(r.due), ':', b36(gap), ':', r.backoff, ':', #r.err, ':', r.err, r.payload,
  })
end

-- Attempts and token from an attempts-hash value ("A:T", or "0A:T" while
-- live); 0, 0 when absent.
local function att_of(v)
  if not v then return 0, 0 end
  local a, t = string.match(v, '^(%d+):(%d+)$')
  return tonumber(a) or 0, tonumber(t) or 0
end

-- The token of an attempts-hash value ("A:T") as claim wrote it (decimal
-- digits, no sign or leading zero); nil when absent. Fencing compares it
-- with the token presented, as strings: only that exact form matches (no
-- hex, exponent or leading zeros), and no number is made.
local function token_str(v)
  if not v then return nil end
  local p = string.find(v, ':', 1, true)
  return p and string.sub(v, p + 1)
end

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

-- The entry of a job leaving running: its attempts and token, unmarked.
local function ended_att(v)
  if v and string.byte(v, 1) == 48 then return string.sub(v, 2) end
  return v
end

-- The topic settings the helpers below read (topic_defaults,
-- at_max_running, index_ready; enqueue's partitions), read with one HMGET
-- per call, at the first use, and kept: a script that writes one of these
-- fields afterwards updates the table too (enqueue's groups).
local meta_read = nil
local function meta()
  if not meta_read then
    local m = redis.call('HMGET', K_META, 'max_attempts', 'backoff', 'max_running', 'groups', 'vtime',
      'partitions', 'glimited')
    meta_read = { max_attempts = m[1], backoff = m[2], max_running = m[3], groups = m[4], vtime = m[5],
      partitions = m[6], glimited = m[7] }
  end
  return meta_read
end

-- Topic settings: max attempts and backoff ladder, with built-in defaults.
local function topic_defaults()
  local m = meta()
  return int_arg(m.max_attempts, 1, MAX_ATTEMPTS) or DEFAULT_MAX_ATTEMPTS, m.backoff or DEFAULT_BACKOFF
end

-- A topic's rate (meta `rate`, "n/period ms"): n and the period, or nil
-- when unset or unreadable (then no rate applies).
local function rate_of(v)
  if not v then return nil end
  local n, p = string.match(v, '^(%d+)/(%d+)$')
  n, p = tonumber(n), tonumber(p)
  if not n or n < 1 or not p or p < 1 or n > 1000000 or p > 86400000 then return nil end
  return n, p
end

-- The bucket size: meta `burst`, else a tenth of a second's worth, at least 1.
local function burst_of(v, n, p)
  return int_arg(v, 1, 1000000) or math.max(1, math.floor(n * 100 / p))
end

-- The tokens in the bucket at `now` (meta `bucket` = "tokens:last refill
-- ms"; a missing or unreadable bucket is full).
local function bucket_tokens(v, burst, n, p, now)
  local tk, last
  if v then tk, last = string.match(v, '^(%d+%.?%d*):(%d+)$') end
  tk, last = tonumber(tk), tonumber(last)
  if not tk or not last then return burst end
  local elapsed = now - last
  if elapsed < 0 then elapsed = 0 end
  return math.min(burst, tk + elapsed * n / p)
end

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

local function max_attempts(r, topic_max)
  return r.max or topic_max
end

-- Delay before the next attempt after `attempts` failed ones.
local function backoff_ms(r, topic_backoff, attempts)
  local ladder = r.backoff
  if ladder == '' then ladder = topic_backoff end
  local steps = {}
  for s in string.gmatch(ladder, '%d+') do steps[#steps + 1] = tonumber(s) end
  if #steps == 0 then return 0 end
  local i = attempts
  if i < 1 then i = 1 end
  if i > #steps then i = #steps end
  -- A ladder written by hand may hold absurd steps: cap them like delays.
  if steps[i] > MAX_DELAY_MS then return MAX_DELAY_MS end
  return steps[i]
end

-- Parse a "when": "d<ms>" delay from now, or "a<ms>" absolute epoch ms.
-- `now` and `up` are the clock rounded down and up (see clock()).
-- A delay counts from `up`, so the job is never due before the instant of
-- the call plus the delay. Returns the due time, or nil and a reason.
local function due_of(when, now, up)
  local kind, v = string.match(when, '^([da])(%d+)$')
  if not kind or #v > 16 then return nil, 'malformed due time "' .. when .. '"' end
  v = tonumber(v)
  if kind == 'd' then
    if v == 0 then return now end
    if v > MAX_DELAY_MS then return nil, 'due time more than ten years ahead' end
    return up + v
  end
  if v > now + MAX_DELAY_MS then return nil, 'due time more than ten years ahead' end
  if v < now then return now end
  return v
end

local function earliest(key)
  local e = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #e == 0 then return nil end
  return tonumber(e[2])
end

-- Which set holds `id`, and its score there.
local function state_of(id)
  local s = redis.call('ZSCORE', K_POOL, id)
  if s then return 'pool', tonumber(s) end
  s = redis.call('ZSCORE', K_READY, id)
  if s then return 'ready', tonumber(s) end
  s = redis.call('ZSCORE', K_RUNNING, id)
  if s then return 'running', tonumber(s) end
  s = redis.call('ZSCORE', K_DEAD, id)
  if s then return 'dead', tonumber(s) end
  return nil
end

local STATE_KEY = { pool = K_POOL, ready = K_READY, running = K_RUNNING, dead = K_DEAD }

-- Run `cmd key` with `args` in chunks, so no unpack() grows unbounded.
local function variadic(cmd, key, args)
  local n = #args
  local i = 1
  while i <= n do
    local j = i + 3999
    if j > n then j = n end
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

local function invalid(msg)
  return redis.error_reply('PUNCTUAL_INVALID ' .. msg)
end

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

-- The group a job counts in, from its record: its g option, '' without
-- one. One pattern; the same in claim, in release_groups and in
-- group_limits' count, so the counts add up. (claim leases only records
-- whose options read, for which this is group_of_field's answer.)
local function group_of_rec(rec)
  local m = string.match(rec, '^([^:]*):')
  return m and string.match(m, ';g([^;]*)') or ''
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
-- limits). Returns the ids, the virtual time to store (nil: none served),
-- whether the groups ran out (rather than the steps), and, when they ran out
-- with groups held back, the wait to report: ms to the earliest gwait entry,
-- or -1 (until a running job ends).
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
  local ids, picked, steps, held_steps = {}, {}, 4 * n + 16, 1000
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
    local live = {}
    if #all > 0 then
      local sc = redis.call('ZMSCORE', K_READY, unpack(all))
      for j, id in ipairs(all) do
        if sc[j] and not picked[id] then
          picked[id] = true
          ids[#ids + 1] = id
          live[owner[j]] = (live[owner[j]] or 0) + 1
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
          if s then s.taken = s.taken + l end
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
  return ids, vt, ran_out, held
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

-- enqueue: add jobs to a topic, one or a batch, atomically.
-- KEYS: the nine topic keys (see lib.lua), and optionally a tenth,
-- P:{T}:fired (ZSET id -> ms): the occurrences of schedules fired in the
-- last 7 days. With it, a given id that is in it gets status 4 and nothing
-- is written; every id created is added to it; entries older than 7 days
-- are removed (at most 100 per call).
-- ARGV[1] max payload bytes, ARGV[2] replace live ids (1) or report them as
-- duplicates (0), ARGV[3] n, then n groups of five:
--   id ("" = generate), payload, when ("d<ms>" delay or "a<ms>" epoch ms),
--   max attempts ("" = topic default), optionally followed by per-job
--   options (";x<ms>" expiry after the due time, ";t<ms>" handler timeout,
--   ";g<group>"; stored with x turned into e<due + ms, base 36>, where the due time
--   is the one asked for, also when an absolute time already past made the job
--   due now; see
--   PROTOCOL.md "Per-job options"), backoff ladder ("" = topic default,
--   else ms values separated by commas).
-- ARGV[4 + 5n], optional: the partition count the caller routed the jobs
-- with (1 for a topic that is not partitioned). When given, and the topic's
-- meta holds another count ("partitions", written by set_partitions), the
-- call is refused with "PUNCTUAL_STALE ..." and nothing is written: read
-- P:partitions again and route anew.
-- Returns: a flat array id1, status1, id2, status2 ... where status is
-- 1 created, 0 duplicate (nothing changed), 2 replaced, 3 dead (the id is in
-- the dead-letter set; nothing changed, so this job will not run: replay the
-- dead one or enqueue with replace), 4 fired before (only with the tenth key:
-- the id is in P:{T}:fired; nothing changed).
-- Errors: "PUNCTUAL_INVALID <reason>" and nothing is written, when any job of
-- the batch is invalid.

local max_payload = int_arg(ARGV[1], 0, MAX_SAFE)
local replace = ARGV[2] == '1'
local n = int_arg(ARGV[3], 1, 1000)
if not max_payload or (ARGV[2] ~= '0' and ARGV[2] ~= '1') or not n
  or (#ARGV ~= 3 + 5 * n and #ARGV ~= 4 + 5 * n) then
  return invalid('enqueue expects a max payload, replace (0 or 1), 1 to 1000 jobs of five arguments each '
    .. 'and optionally the partition count')
end
local routed = nil
if #ARGV == 4 + 5 * n then
  routed = int_arg(ARGV[4 + 5 * n], 1, 1024)
  if not routed then return invalid('enqueue expects a partition count of 1 to 1024 after the jobs') end
end

-- The topic, from the hash tag of the keys: the script refuses what
-- validate_topic refuses among whitespace, control characters, bytes that
-- are not UTF-8, and invisible or bidirectional formatting characters, which
-- would let one topic pass for another. (Only a name with such bytes pays.)
local topic = string.match(KEY_BASE, '{([^{}]+)}:$')
if string.find(topic, '[%c%s\128-\255]') then
  local bad = string.find(topic, '[%c%s]') or not utf8_ok(topic)
  if not bad then
    for _, p in ipairs({
      '\194[\128-\160\173]', '\216[\128-\133\156]', '\219\157', '\220\143', '\225\133[\159\160]',
      '\225\154\128', '\225\160\142', '\226\128[\128-\143\168-\175]', '\226\129[\159-\175]',
      '\227\128\128', '\227\133\164', '\239\187\191', '\239\190\160', '\239\191[\185-\187]',
      '\240\145\130[\189]', '\240\145\131[\141]', '\240\157\133[\179-\186]', '\243\160[\128\129]',
    }) do
      if string.find(topic, p) then bad = true break end
    end
  end
  if bad then
    return invalid('topic names may not contain whitespace, control characters, invisible or '
      .. 'bidirectional formatting characters, or bytes that are not UTF-8')
  end
end

if routed then
  local layout = meta().partitions
  if layout and tonumber(layout) ~= routed then
    return redis.error_reply('PUNCTUAL_STALE the topic has ' .. layout .. ' partition(s) now, not '
      .. routed .. ': read P:partitions again and route the jobs anew')
  end
end

-- Per-job options in the max attempts argument: "<max>;<letter><value>...".
-- Returns {pre, x, post} (x: the expiry ms, to be stored as
-- pre .. ";e" .. b36(due + x) .. post; nil without one), or nil and why.
local function parse_opts(arg)
  local d, rest = string.match(arg, '^([^;]*)(;.*)$')
  if d ~= '' and (string.sub(d, 1, 1) == '0' or not int_arg(d, 1, MAX_ATTEMPTS)) then
    return nil, 'max attempts must be an integer from 1 to ' .. MAX_ATTEMPTS .. ', before the options'
  end
  local seen_opt, parts, x, xat = {}, { d }, nil, nil
  -- Every ';' starts an option: an empty one is found as such.
  for opt in string.gmatch(rest, ';([^;]*)') do
    local letter, v = string.sub(opt, 1, 1), string.sub(opt, 2)
    if letter == '' then return nil, 'an empty option (";" followed by nothing)' end
    if seen_opt[letter] then return nil, 'option ' .. letter .. ' given more than once' end
    seen_opt[letter] = true
    if letter == 'x' or letter == 't' then
      local what = letter == 'x' and 'expiry' or 'timeout'
      if string.sub(v, 1, 1) == '0' or not int_arg(v, 1, MAX_DELAY_MS) then
        return nil, what .. ' (' .. letter .. ') must be 1 ms to ten years, in ms with no leading zero'
      end
      if letter == 'x' then
        x, xat = tonumber(v), #parts + 1
        parts[xat] = ''
      else
        parts[#parts + 1] = ';' .. opt
      end
    elseif letter == 'g' then
      if #v < 1 or #v > 64 or string.find(v, '[^A-Za-z0-9_.@%-]') then
        return nil, 'a group (g) is 1 to 64 bytes of letters, digits, _ . @ -'
      end
      parts[#parts + 1] = ';' .. opt
    elseif letter == 'e' then
      return nil, 'option e (a deadline) is written by enqueue; pass x<ms> for an expiry'
    else
      return nil, 'unknown option "' .. letter .. '": give x<ms>, t<ms> or g<group>'
    end
  end
  if not x then return { pre = arg } end
  return {
    pre = table.concat(parts, '', 1, xat - 1),
    x = x,
    post = table.concat(parts, '', xat + 1),
  }
end

local now, up = clock()
local dues = {}
-- Jobs whose options hold an expiry (index -> parsed options), and the
-- parsed options of each distinct argument.
local opts, opts_of_arg, asks = {}, {}, {}
local generate = 0
-- A batch's jobs mostly share their "when" and backoff strings: a "when"
-- is parsed once per run of equal ones, a backoff once per distinct one.
local last_when, last_when_due = nil, nil
local backoff_ok = { [''] = true }
for i = 1, n do
  local b = 3 + 5 * (i - 1)
  local id, payload, when, max, backoff = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  if id == '' then
    generate = generate + 1
  elseif #id > 200 then
    return invalid('job ' .. i .. ': id is ' .. #id .. ' bytes, over the 200-byte limit')
  elseif string.find(id, '[%c\128-\255]') then
    -- Only an id with a control character or a byte over 127 pays for this.
    if string.find(id, '%c') or string.find(id, '\194[\128-\159]') then
      return invalid('job ' .. i .. ': ids may not contain control characters')
    end
    if not utf8_ok(id) then
      return invalid('job ' .. i .. ': ids must be valid UTF-8')
    end
  end
  if #payload > max_payload then
    return invalid('job ' .. i .. ': payload is ' .. #payload .. ' bytes, over the ' .. max_payload .. '-byte limit')
  end
  local due = last_when_due
  if when ~= last_when then
    local why
    due, why = due_of(when, now, up)
    if not due then return invalid('job ' .. i .. ': ' .. why) end
    last_when, last_when_due = when, due
  end
  if max == '' then
    -- The topic default: nothing to check.
  elseif string.find(max, ';', 1, true) then
    -- Per-job options: only an argument with ';' pays for this.
    local parsed = opts_of_arg[max]
    if not parsed then
      local why
      parsed, why = parse_opts(max)
      if not parsed then return invalid('job ' .. i .. ': ' .. why) end
      opts_of_arg[max] = parsed
    end
    if parsed.x then
      opts[i] = parsed
      -- The window counts from the time asked for: an absolute time already
      -- past ("a<ms>", due now) keeps its own, so a job enqueued late has
      -- less of its window left, or none.
      local asked = due
      if string.sub(when, 1, 1) == 'a' then asked = math.min(due, tonumber(string.sub(when, 2))) end
      asks[i] = asked
    end
  elseif string.sub(max, 1, 1) == '0' or not int_arg(max, 1, MAX_ATTEMPTS) then
    return invalid('job ' .. i .. ': max attempts must be an integer from 1 to ' .. MAX_ATTEMPTS)
  end
  if not backoff_ok[backoff] then
    if not string.match(backoff, '^[%d,]*$') then
      return invalid('job ' .. i .. ': backoff must be ms values separated by commas')
    end
    for step in string.gmatch(backoff, '%d+') do
      if #step > 12 or tonumber(step) > MAX_DELAY_MS then
        return invalid('job ' .. i .. ': backoff steps are at most ten years')
      end
    end
    backoff_ok[backoff] = true
  end
  dues[i] = due
end

-- Generated ids: 8 base-36 digits of the server time (ms), then 4 of a
-- per-topic sequence (shared with lease tokens), so they sort by creation
-- time; an id already live is skipped. Twelve bytes fit Redis's smallest
-- string allocation.
local seq = 0
if generate > 0 then seq = redis.call('INCRBY', K_SEQ, generate) - generate end
local stamp = b36(now, 8)
-- The id of sequence value x: stamp .. b36_4(x % 36^4), made as one string.
local gen_id
do
  local s1, s2, s3, s4, s5, s6, s7, s8 = string.byte(stamp, 1, 8)
  local char = string.char
  -- (Past 2059 the stamp has a ninth digit.)
  local long = #stamp ~= 8
  gen_id = function(x)
    x = x % 1679616
    local a = x % 36
    x = (x - a) / 36
    local b = x % 36
    x = (x - b) / 36
    local c = x % 36
    local d = (x - c) / 36
    if long then return stamp .. char(DIGIT_BYTES[d], DIGIT_BYTES[c], DIGIT_BYTES[b], DIGIT_BYTES[a]) end
    return char(s1, s2, s3, s4, s5, s6, s7, s8, DIGIT_BYTES[d], DIGIT_BYTES[c], DIGIT_BYTES[b], DIGIT_BYTES[a])
  end
end
-- The ids the sequence gives next, looked up with one HMGET: those taken
-- are skipped below, as the HEXISTS of each would (nothing is written
-- before the loop ends). Past these (ids taken), one HEXISTS per id.
local cand, taken = {}, {}
if generate > 0 then
  for j = 1, generate do cand[j] = gen_id(seq + j) end
  local recs = redis.call('HMGET', K_JOBS, unpack(cand))
  for j = 1, generate do
    if recs[j] then taken[cand[j]] = true end
  end
end
local first_seq = seq
-- Record headers (":D:G:"), built once per run of jobs with the same due
-- time; the last first field with an expiry built, for its options and due
-- time.
local head, head_due = nil, nil
local last_m, last_o, last_due = nil, nil, nil
-- The header of a due time: ":" and D's digits above its last two, cached
-- (the due times of a call mostly fall in a few 1296-ms spans), then the
-- last two, ":", G and ":" made by one string.char when G (the delay) has
-- at most three digits (46.6 s).
local high_digits = {}
local char = string.char
local function head_of(due)
  local gap = due - now
  local lo = due % 1296
  local hi = (due - lo) / 1296
  if hi == 0 or gap >= 46656 then return ':' .. b36(due) .. ':' .. b36(gap) .. ':' end
  local h = high_digits[hi]
  if not h then
    h = ':' .. b36(hi)
    high_digits[hi] = h
  end
  local b = lo % 36
  local d1, d2 = DIGIT_BYTES[(lo - b) / 36], DIGIT_BYTES[b]
  local g0 = gap % 36
  if gap < 36 then return h .. char(d1, d2, 58, DIGIT_BYTES[g0], 58) end
  local rest = (gap - g0) / 36
  local g1 = rest % 36
  if gap < 1296 then return h .. char(d1, d2, 58, DIGIT_BYTES[g1], DIGIT_BYTES[g0], 58) end
  return h .. char(d1, d2, 58, DIGIT_BYTES[(rest - g1) / 36], DIGIT_BYTES[g1], DIGIT_BYTES[g0], 58)
end

-- Given ids are looked up in the four sets (one ZMSCORE each per call),
-- and those in none of them in the jobs hash (one HMGET per call: nil for a
-- new id). An id is live when it is in a set or has a record: one left in a
-- set without its record, or a record left without a set (broken
-- invariants that check reports), counts as live, so it never gets a second
-- state; a replace repairs it. `state` is the set an id is in (pool first,
-- as state_of), `in_dead` whether dead is one of them.
local given, listed = {}, {}
if generate < n then
  for i = 1, n do
    local id = ARGV[3 + 5 * (i - 1) + 1]
    if id ~= '' and not listed[id] then
      listed[id] = true
      given[#given + 1] = id
    end
  end
end
local state, in_dead, has_rec = {}, {}, {}
if #given > 0 then
  for _, st in ipairs({ 'dead', 'running', 'ready', 'pool' }) do
    local scores = redis.call('ZMSCORE', STATE_KEY[st], unpack(given))
    for j = 1, #given do
      if scores[j] then
        state[given[j]] = st
        if st == 'dead' then in_dead[given[j]] = true end
      end
    end
  end
  local loose = {}
  for j = 1, #given do
    if not state[given[j]] then loose[#loose + 1] = given[j] end
  end
  if #loose > 0 then
    -- Records of ids in no set: a new id's is nil, so this copies no
    -- payload but a broken invariant's.
    local recs = redis.call('HMGET', K_JOBS, unpack(loose))
    for j = 1, #loose do
      if recs[j] then has_rec[loose[j]] = true end
    end
  end
end

-- Schedules: ids fired within 7 days (one ZMSCORE per call).
local fired_before = {}
if K_FIRED then
  if #given > 0 then
    local scores = redis.call('ZMSCORE', K_FIRED, unpack(given))
    for j, id in ipairs(given) do
      if scores[j] then fired_before[id] = true end
    end
  end
end

local out, records, to_pool, to_ready = {}, {}, {}, {}
-- Their lengths, kept by hand: the loop appends without the # operator.
local no, nr, np, nq = 0, 0, 0, 0
local grouped = false
local seen = {}
-- Replaced ids and the set they were in: left only after the new entry is written.
local old_state, dest = {}, {}
local created, dup = 0, 0
local pool_min = nil
for i = 1, n do
  local b = 3 + 5 * (i - 1)
  local id = ARGV[b + 1]
  local status = 1
  if id == '' then
    -- A fresh id. Looked up anyway, so that even a clock stepped back or a
    -- producer's own id of the same shape can never be overwritten.
    repeat
      seq = seq + 1
      id = cand[seq - first_seq]
      if id then
        if seen[id] or taken[id] then id = nil end
      else
        id = gen_id(seq)
        if seen[id] or redis.call('HEXISTS', K_JOBS, id) == 1 then id = nil end
      end
    until id
  elseif seen[id] then
    -- The same id twice in one batch: the first one wins, even with replace.
    status = 0
  elseif fired_before[id] then
    status = 4
  elseif state[id] or has_rec[id] then
    if replace then
      status = 2
      old_state[id] = state[id] or false
    elseif in_dead[id] and (state[id] == 'dead' or redis.call('HEXISTS', K_JOBS, id) == 1) then
      -- Dead, or (two sets at once, a broken invariant) a record and in dead.
      status = 3
    else
      status = 0
    end
  end
  if status == 1 or status == 2 then
    -- Generated ids never repeat within a call (distinct sequence values
    -- below 36^4): with no given id in the batch, nothing needs seen.
    if generate < n then seen[id] = true end
    local due = dues[i]
    if due ~= head_due then
      head = head_of(due)
      head_due = due
    end
    records[nr + 1] = id
    local m = ARGV[b + 4]
    local o = opts[i]
    if o then
      -- Jobs of a batch mostly share their options and due time.
      local asked = asks[i]
      if o ~= last_o or asked ~= last_due then
        last_m, last_o, last_due = o.pre .. ';e' .. b36(asked + o.x) .. o.post, o, asked
      end
      m = last_m
    end
    records[nr + 2] = m .. head .. ARGV[b + 5] .. ':0:' .. ARGV[b + 2]
    nr = nr + 2
    if not grouped and m ~= '' and string.find(m, ';g', 1, true) then grouped = true end
    if status == 2 then
      if due <= now then dest[id] = 'ready' else dest[id] = 'pool' end
    end
    if due <= now then
      to_ready[nq + 1] = due
      to_ready[nq + 2] = id
      nq = nq + 2
    else
      to_pool[np + 1] = due
      to_pool[np + 2] = id
      np = np + 2
      if not pool_min or due < pool_min then pool_min = due end
    end
    created = created + 1
  elseif status ~= 4 then
    dup = dup + 1
  end
  out[no + 1] = id
  out[no + 2] = status
  no = no + 2
end

if created > 0 then
  local old_min = nil
  if pool_min then old_min = earliest(K_POOL) end
  -- Replaced running jobs leave their groups' running counts (read from
  -- the old records, before they are overwritten).
  local was_running = {}
  for id, st in pairs(old_state) do
    if st == 'running' then was_running[#was_running + 1] = id end
  end
  release_groups(was_running)
  variadic('HSET', K_JOBS, records)
  if #to_pool > 0 then
    variadic('ZADD', K_POOL, to_pool)
    if not old_min or pool_min < old_min then redis.call('PUBLISH', K_POOL, pool_min) end
  end
  -- The first grouped job switches the topic to groups: every job already
  -- ready is ungrouped (no job had a group before), so ready is copied into
  -- the empty group's index, once (O(ready log ready)).
  if grouped and meta().groups ~= '1' then
    redis.call('HSET', K_META, 'groups', '1')
    meta().groups = '1'
    if redis.call('ZUNIONSTORE', KEY_BASE .. 'g:', 2, KEY_BASE .. 'g:', K_READY, 'AGGREGATE', 'MIN') > 0 then
      redis.call('ZADD', KEY_BASE .. 'groups', 'NX', meta().vtime or '0', '')
    end
  end
  if #to_ready > 0 then
    variadic('ZADD', K_READY, to_ready)
    index_ready(to_ready)
    redis.call('PUBLISH', K_READY, '')
  end
  for id, st in pairs(old_state) do
    if st and st ~= dest[id] then redis.call('ZREM', STATE_KEY[st], id) end
  end
  -- A replaced job starts again: attempts reset. (Its old delivery cannot
  -- ack the new one: it is no longer running, and tokens never repeat.)
  local replaced = {}
  for id in pairs(old_state) do replaced[#replaced + 1] = id end
  if #replaced > 0 then variadic('HDEL', K_ATT, replaced) end
  redis.call('HINCRBY', K_STATS, 'enqueued', created)
  if K_FIRED then
    local marks = {}
    for i = 1, #records, 2 do
      marks[#marks + 1] = now
      marks[#marks + 1] = records[i]
    end
    variadic('ZADD', K_FIRED, marks)
    -- Entries older than 7 days go, a bounded number per call.
    local old = redis.call('ZRANGE', K_FIRED, '-inf', now - 604800000, 'BYSCORE', 'LIMIT', 0, 100)
    if #old > 0 then variadic('ZREM', K_FIRED, old) end
  end
end
if dup > 0 then redis.call('HINCRBY', K_STATS, 'duplicates', dup) end
return out
