#!lua flags=no-writes
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

local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'

-- Base 36, left-padded with zeros to `width` (when given).
local function b36(n, width)
  n = math.floor(n)
  local out = {}
  if n <= 0 then out[1] = '0' end
  while n > 0 do
    local r = n % 36
    table.insert(out, 1, string.sub(DIGITS, r + 1, r + 1))
    n = (n - r) / 36
  end
  local s = table.concat(out)
  if width and #s < width then s = string.rep('0', width - #s) .. s end
  return s
end

local DIGIT_BYTES = {}
for i = 0, 35 do DIGIT_BYTES[i] = string.byte(DIGITS, i + 1) end

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
      'partitions')
    meta_read = { max_attempts = m[1], backoff = m[2], max_running = m[3], groups = m[4], vtime = m[5],
      partitions = m[6] }
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
local function at_max_running()
  local mr = int_arg(meta().max_running, 1, MAX_SAFE)
  return mr ~= nil and redis.call('ZCARD', K_RUNNING) >= mr
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
    redis.call('ZADD', KEY_BASE .. 'groups', 'NX', vt, grp)
  end
end

-- get: one job by id.
-- KEYS: the nine topic keys. ARGV[1] id.
-- Returns nil when no such job is live, else
--   {state, score, attempts, max attempts, token, due ms, created ms,
--    backoff, last error, payload, now ms, options}
-- where options is the record's first field from its first ';' on (see
-- PROTOCOL.md "Per-job options"; empty without options)
-- State is pool, ready, running, dead (or "orphan": a record in no set,
-- which punctual check reports) and score is the due time (pool, ready), the
-- lease deadline (running) or the time of death (dead).

if #ARGV ~= 1 then return invalid('get expects one id') end
local id = ARGV[1]
local rec = redis.call('HGET', K_JOBS, id)
local st, score = state_of(id)
if not rec and not st then return false end
local r = decode(rec)
if not r then
  return { st or 'orphan', score or 0, 0, 0, 0, 0, 0, '', 'record missing or unreadable', rec or '', now_ms(), '' }
end
local topic_max = topic_defaults()
local attempts, token = att_of(redis.call('HGET', K_ATT, id))
return {
  st or 'orphan', score or 0, attempts, max_attempts(r, topic_max), token, r.due,
  r.created, r.backoff, r.err, r.payload, now_ms(), options_text(r.mfield),
}
