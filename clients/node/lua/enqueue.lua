#!lua
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
-- clock: Redis's clock, rounded down and up, and in microseconds.

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
-- utf8_ok: the UTF-8 check of ids and payloads.

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
-- b36: base 36, as records and generated ids write numbers.

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
-- opts_of: the per-job options of a record's M field.

-- The options of an M field: max attempts (number or nil) and a table
-- {deadline, timeout, group} (nil when M has no options), or false when M
-- is not one (M must match ^%d*(;[etgps][^;:]*)*$). Only a field with ';' pays
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
    elseif letter ~= 'p' and letter ~= 's' then return false end
  end
  return tonumber(d), o
end
-- record: reading a job's record, P:{T}:jobs's value.
--
-- Record (never rewritten by claim, ack or extend): "M:D:G:B:E:" then E bytes
-- of last error, then the payload. M max attempts (decimal, empty: topic
-- default), then the per-job options if any (see opts_of), D due time (ms,
-- base 36), G due - created (ms, base 36), B backoff ladder (ms, comma
-- separated, empty: topic default), E length of the last error (decimal).
-- encode.lua writes one.
-- include: opts_of

-- M may carry per-job options after the max attempts (PROTOCOL.md "Per-job
-- options"): ";" then a letter and a value, M = "<digits or empty>[;<opt>]*",
-- with e<deadline, epoch ms, base 36>, t<timeout ms>, g<group>, and the
-- trace context p<traceparent> and s<tracestate>, which only clients read.
local HEADER = '^([^:]*):(%w+):(%w+):([%d,]*):(%d+):()'
-- A record's due time, D (base 36), alone: for a look at it without decode.
local RECORD_DUE = '^[^:]*:(%w+):'

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
-- due_of: a due time from a "when" argument.
-- include: args

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
-- earliest: the lowest score of a ZSET.

local function earliest(key)
  local e = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #e == 0 then return nil end
  return tonumber(e[2])
end
-- cold: the cold pool's keys and constants.

-- The cold pool (PROTOCOL.md "The cold pool"): a job due at least
-- `cold_after` ms (meta; default 10 minutes, 0: none) after its placement,
-- and not before meta `cold_at`, waits in the LIST of its due minute,
-- P:{T}:c:<start>, indexed by the ZSET P:{T}:cold, instead of in pool; tick
-- moves each list into pool `cold_after` before the list's start. A job in
-- no set whose record is due at or after `cold_at` is such a cold job.
-- Only tick writes cold_at first: a topic whose scheduler predates the cold
-- pool never gets a cold job, which its tick would never move.
-- The lists and the index are not among the KEYS: on a Redis Cluster
-- whose slot is migrating, touching one that is not on this node fails the
-- script, so every script writes them before anything else.
local COLD_BUCKET = 60000
local COLD_AFTER = 600000
local K_COLD = KEY_BASE .. 'cold'
-- cold_settings: the topic's cold_after and cold_at (meta), parsed once per call.
-- include: args
-- include: meta
-- include: cold

-- cold_after and cold_at below are read per job (cold_place, is_cold_due):
-- each keeps the number it parsed with the meta value it came from (a
-- string, or false when absent; NONE: nothing parsed yet), so a call parses
-- each once (parsing them per job cost a cold enqueue about 4,000
-- instructions per job, callgrind).
local NONE = {}
local cold_after_raw, cold_after_v = NONE, nil
local cold_at_raw, cold_at_v = NONE, nil

-- The topic's cold_after (meta), 0 when no job is to be placed cold.
local function cold_after()
  local w = meta().cold_after
  if w ~= cold_after_raw then
    cold_after_raw = w
    cold_after_v = w and int_arg(w, 0, MAX_DELAY_MS) or COLD_AFTER
  end
  return cold_after_v
end

-- meta cold_at as a number; nil when absent (or not a number).
local function cold_at()
  local a = meta().cold_at
  if a ~= cold_at_raw then
    cold_at_raw = a
    cold_at_v = int_arg(a, 0, MAX_SAFE)
  end
  return cold_at_v
end
-- cold_due: whether a job in no set is a cold job.
-- include: cold_settings

-- Whether a job in no set, with this record due time, is a cold job.
local function is_cold_due(due)
  local at = cold_at()
  if not at then return false end
  return due >= at
end
-- state: which set holds a job.
-- include: record
-- include: cold_settings
-- include: cold_due

local STATE_KEY = { pool = K_POOL, ready = K_READY, running = K_RUNNING, dead = K_DEAD }

-- Which set holds `id`, and its score there: pool, ready, running, dead,
-- or 'cold' (a cold job, in the pool: its record's due time), else nil.
local function state_of(id)
  local s = redis.call('ZSCORE', K_POOL, id)
  if s then return 'pool', tonumber(s) end
  s = redis.call('ZSCORE', K_READY, id)
  if s then return 'ready', tonumber(s) end
  s = redis.call('ZSCORE', K_RUNNING, id)
  if s then return 'running', tonumber(s) end
  s = redis.call('ZSCORE', K_DEAD, id)
  if s then return 'dead', tonumber(s) end
  if cold_at() then
    local r = decode(redis.call('HGET', K_JOBS, id))
    if r and is_cold_due(r.due) then return 'cold', r.due end
  end
  return nil
end
-- bulk: variadic, the one way the scripts write many entries at once.

-- Bulk writes and the listpack (PROTOCOL.md "Bulk writes"). Redis 7.0 keeps
-- a small hash or sorted set as a listpack and writes a call's fields into
-- it one by one, each with a scan of the listpack, converting it to a
-- hashtable or skiplist only past hash-/zset-max-listpack-entries (128).
-- Measured by callgrind on Redis 7.0.15: HSET of 1,000 new attempts entries
-- into an empty hash costs about 18,300 instructions per entry, 2,200 into
-- a hashtable; ZADD of 100 to 200 members into an empty sorted set 25,000
-- to 26,500 per member, about 4,000 into a skiplist. An argument longer
-- than hash-/zset-max-listpack-value (64 bytes by default) converts the key
-- before the first write. So a write of BULK or more entries carries one
-- such argument and deletes it at once, in the same script: the field ''
-- (never an id) or the member BULK_MEMBER (it holds a control character:
-- never an id). The key stays a hashtable or skiplist until an RDB load
-- re-encodes it. Where it already is one, this costs one entry more and one
-- call. variadic counts the extra entry as new (it is deleted each time).
local BULK = 16
local BULK_MEMBER = '\0' .. string.rep('-', 64)

-- Run `cmd key` with `args` in chunks, so no unpack() grows unbounded.
-- Returns the sum of the integer replies. An HSET or ZADD of BULK entries
-- or more converts the key first (above; its extra entry is not counted);
-- the ZADD's args are plain score, member pairs.
local function variadic(cmd, key, args)
  local n = #args
  local bulk = n >= 2 * BULK and (cmd == 'HSET' or cmd == 'ZADD')
  local i, sum = 1, 0
  if bulk then sum = -1 end
  while i <= n do
    local j = i + 3999
    if j > n then j = n end
    if bulk and i == 1 then
      if cmd == 'HSET' then
        sum = sum + redis.call('HSET', key, '', BULK_MEMBER, unpack(args, i, j))
      else
        sum = sum + redis.call('ZADD', key, '0', BULK_MEMBER, unpack(args, i, j))
      end
    else
      sum = sum + redis.call(cmd, key, unpack(args, i, j))
    end
    i = j + 1
  end
  if bulk then
    if cmd == 'HSET' then
      redis.call('HDEL', key, '')
    else
      redis.call('ZREM', key, BULK_MEMBER)
    end
  end
  return sum
end
-- drop_retried: removes ids from P:{T}:retried (K_RETRIED, in keys.lua).
-- include: bulk

-- Removes ids from P:{T}:retried, when meta retried_n says it has members
-- (else the set is not touched). Called before a script's other writes.
local function drop_retried(ids)
  if (tonumber(redis.call('HGET', K_META, 'retried_n')) or 0) <= 0 then return end
  local removed = variadic('SREM', K_RETRIED, ids)
  if removed > 0 then redis.call('HINCRBY', K_META, 'retried_n', -removed) end
end
-- cold_place: placing jobs in the cold pool.
-- include: bulk
-- include: cold
-- include: cold_settings

-- The earliest due time cold_place places cold at `now` (math.huge when
-- none): lets a loop skip the call for near jobs.
local function cold_from(now)
  local w, at = cold_after(), cold_at()
  if w == 0 or not at then return math.huge end
  if at > now + w then return at end
  return now + w
end

-- Jobs placed cold by this call, by bucket start. cold_place collects,
-- cold_flush writes.
local cold_ids = nil

-- Places a job due at `due` (epoch ms) cold when the rule says so, and
-- returns whether it did; the caller puts it into pool otherwise. `from`,
-- when given, is cold_from(now), computed once by a caller that places
-- many jobs (its function calls cost about 2,400 instructions per job).
local function cold_place(id, due, now, from)
  if due < (from or cold_from(now)) then return false end
  local s = due - due % COLD_BUCKET
  if not cold_ids then cold_ids = {} end
  local l = cold_ids[s]
  if not l then
    l = {}
    cold_ids[s] = l
  end
  l[#l + 1] = id
  return true
end

-- Writes what cold_place collected: RPUSH per bucket, the index, cold_n.
-- Called before the script's other writes (see above). A bucket that is
-- new and now the first publishes the time it is to be moved (its start
-- minus cold_after) on the pool channel: a sleeping scheduler plans its
-- tick for the first bucket's move, from its last tick or from this.
-- Returns the number of jobs placed.
local function cold_flush()
  if not cold_ids then return 0 end
  local n, new = 0, {}
  for s, l in pairs(cold_ids) do
    local ss = string.format('%d', s)
    variadic('RPUSH', KEY_BASE .. 'c:' .. ss, l)
    n = n + #l
    if redis.call('ZADD', K_COLD, 'NX', ss, ss) == 1 then new[ss] = s end
  end
  redis.call('HINCRBY', K_META, 'cold_n', n)
  cold_ids = nil
  if next(new) then
    local first = redis.call('ZRANGE', K_COLD, 0, 0)[1]
    if new[first] then
      local w = cold_after()
      if w == 0 then w = COLD_AFTER end
      redis.call('PUBLISH', K_POOL, string.format('%d', new[first] - w))
    end
  end
  return n
end
-- cold_place_all: placing many jobs due at one time in the cold pool.
-- include: cold
-- include: cold_place

-- cold_place for jobs all due at `due`, which the caller found due at or
-- after cold_from(now): `ids` joins the bucket's list (kept, not copied,
-- when the bucket has none yet).
local function cold_place_all(ids, due)
  local s = due - due % COLD_BUCKET
  if not cold_ids then cold_ids = {} end
  local l = cold_ids[s]
  if not l then
    cold_ids[s] = ids
    return
  end
  for i = 1, #ids do l[#l + 1] = ids[i] end
end
-- cold_left: a cold job left the cold pool other than by tick.

-- A cold job left the cold pool other than by tick's move (cancel,
-- reschedule, replace, unfire): its list entry stays, stale.
local function cold_left(n)
  redis.call('HINCRBY', K_META, 'cold_n', -n)
end
-- group_of_field: the group of a record's M field.
-- include: opts_of

-- The group of a record's M field: its g option, or '' (no group, or an
-- unreadable field).
local function group_of_field(m)
  if not string.find(m, ';', 1, true) then return '' end
  local _, o = opts_of(m)
  return o and o.group or ''
end
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

-- enqueue: add jobs to a topic, one or a batch, atomically.
-- KEYS: the nine topic keys (see includes/keys.lua), and optionally a tenth,
-- P:{T}:fired (ZSET id -> ms): the occurrences of schedules fired in the
-- last 7 days. With it, a given id that is in it gets status 4 and nothing
-- is written; every id created is added to it; entries older than 7 days
-- are removed (at most 100 per call).
-- ARGV[1] max payload bytes, ARGV[2] replace live ids (1) or report them as
-- duplicates (0), ARGV[3] n, then n groups of five:
--   id ("" = generate), payload, when ("d<ms>" delay or "a<ms>" epoch ms),
--   max attempts ("" = topic default), optionally followed by per-job
--   options (";x<ms>" expiry after the due time, ";t<ms>" handler timeout,
--   ";g<group>", ";p<traceparent>", ";s<tracestate>"; stored with x turned into e<due + ms, base 36>, where the due time
--   is the one asked for, also when an absolute time already past made the job
--   due now; see
--   PROTOCOL.md "Per-job options"), backoff ladder ("" = topic default,
--   else ms values separated by commas).
-- Or, when the jobs share their when, max attempts (with options) and
-- backoff, ARGV[3] "=n" (the shared form), ARGV[4] when, ARGV[5] max
-- attempts, ARGV[6] backoff, then n pairs: id, payload. Or, when they share
-- max attempts and backoff only, ARGV[3] "~n" (a shared form too), ARGV[4]
-- max attempts, ARGV[5] backoff, then n triples: id, payload, when. Each
-- argument costs Redis about 1,400 instructions to read and hand to Lua, so
-- a batch of alike jobs sends two or three per job instead of five.
-- "=*n" and "~*n": the same forms for jobs whose ids are all to be
-- generated, with the ids left out: n payloads, or n pairs payload, when.
-- One argument per job less (about 700 instructions per job, callgrind).
-- ARGV[4 + 5n] (ARGV[7 + 2n], ARGV[6 + 3n], ARGV[7 + n] or ARGV[6 + 2n] in
-- "=n", "~n", "=*n" and "~*n"), optional: the partition count the caller
-- routed the jobs with (1 for a topic that is not partitioned). When given, and the topic's
-- meta holds another count ("partitions", written by set_partitions), the
-- call is refused with "PUNCTUAL_STALE ..." and nothing is written: read
-- P:partitions again and route anew.
-- Returns: a flat array id1, status1, id2, status2 ... (in the shared forms:
-- k, then k ids (the n jobs' ids when one was generated, k = n, else none,
-- k = 0: the caller knows them), then pairs j, status for the jobs whose
-- status is not 1, j counting from 1; in "=*n" and "~*n", when no candidate
-- id was skipped and the max attempts carry no per-job options (no ';'),
-- -1 and the first id only: the j-th job's id is the first one with its
-- last four base-36 digits counted up by j - 1, modulo 36^4),
-- where status is
-- 1 created, 0 duplicate (nothing changed), 2 replaced, 3 dead (the id is in
-- the dead-letter set; nothing changed, so this job will not run: replay the
-- dead one or enqueue with replace), 4 fired before (only with the tenth key:
-- the id is in P:{T}:fired; nothing changed).
-- Errors: "PUNCTUAL_INVALID <reason>" and nothing is written, when any job of
-- the batch is invalid.
-- A job due now goes to ready, one due later to pool, or, due far ahead,
-- to the cold pool (cold.lua's cold_place; PROTOCOL.md "The cold pool").
-- include: args
-- include: clock
-- include: utf8_ok
-- include: b36
-- include: record
-- include: meta
-- include: due_of
-- include: earliest
-- include: state
-- include: bulk
-- include: drop_retried
-- include: cold_due
-- include: cold_place
-- include: cold_place_all
-- include: cold_left
-- include: index_ready
-- include: release_groups

local max_payload = int_arg(ARGV[1], 0, MAX_SAFE)
local replace = ARGV[2] == '1'
-- The shared forms: "=n", the when, max and backoff of every job in
-- ARGV[4], ARGV[5], ARGV[6] (S_WHEN, S_MAX, S_BACKOFF); "~n", max and
-- backoff in ARGV[4], ARGV[5]. Job i's own arguments follow
-- ARGV[at + stride * (i - 1)]: id, payload, then what is not shared.
local form, star = string.byte(ARGV[3] or '', 1, 2)
local shared = form == 61 or form == 126
-- "=*n", "~*n": every id generated, none sent.
local gen_all = shared and star == 42
local n = int_arg(shared and string.sub(ARGV[3], gen_all and 3 or 2) or ARGV[3], 1, 1000)
local at, stride = 3, 5
-- Where a job's id, payload and when are among its own arguments (no id:
-- I_OFF nil).
local I_OFF, P_OFF, W_OFF = 1, 2, 3
local S_WHEN, S_MAX, S_BACKOFF
if form == 61 then
  at, stride = 6, 2
  S_WHEN, S_MAX, S_BACKOFF = ARGV[4], ARGV[5], ARGV[6]
elseif form == 126 then
  at, stride = 5, 3
  S_MAX, S_BACKOFF = ARGV[4], ARGV[5]
end
if gen_all then
  I_OFF, P_OFF, W_OFF, stride = nil, 1, 2, stride - 1
end
if not max_payload or (ARGV[2] ~= '0' and ARGV[2] ~= '1') or not n
  or (#ARGV ~= at + stride * n and #ARGV ~= at + 1 + stride * n) then
  if gen_all then
    return invalid('enqueue expects a max payload, replace (0 or 1), "=*n" or "~*n" for 1 to 1000 jobs, '
      .. 'their when ("=*n"), max attempts and backoff, n payloads ("=*n") or pairs of payload and when '
      .. '("~*n"), and optionally the partition count')
  elseif form == 61 then
    return invalid('enqueue expects a max payload, replace (0 or 1), "=n" for 1 to 1000 jobs, their when, '
      .. 'max attempts and backoff, n pairs of id and payload, and optionally the partition count')
  elseif form == 126 then
    return invalid('enqueue expects a max payload, replace (0 or 1), "~n" for 1 to 1000 jobs, their '
      .. 'max attempts and backoff, n triples of id, payload and when, and optionally the partition count')
  end
  return invalid('enqueue expects a max payload, replace (0 or 1), 1 to 1000 jobs of five arguments each '
    .. 'and optionally the partition count')
end
local routed = nil
if #ARGV == at + 1 + stride * n then
  routed = int_arg(ARGV[#ARGV], 1, 1024)
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

-- A W3C traceparent: version-traceid-spanid-flags in lowercase hex, the
-- version not ff, neither id all zeros.
local function trace_parent_ok(v)
  local ver, tid, sid = string.match(v, '^([0-9a-f][0-9a-f])%-(' .. string.rep('[0-9a-f]', 32) .. ')%-('
    .. string.rep('[0-9a-f]', 16) .. ')%-[0-9a-f][0-9a-f]$')
  return ver ~= nil and ver ~= 'ff' and string.find(tid, '[^0]') ~= nil and string.find(sid, '[^0]') ~= nil
end

-- A tracestate as stored: printable ASCII, each % starting an escape of two
-- hex digits (% ; : are written %25 %3B %3A), at most 512 bytes decoded.
local function trace_state_ok(v)
  if #v > 1536 or string.find(v, '[^ -~]') or string.find(v, '[;:]') then return false end
  local n = #v
  for esc in string.gmatch(v, '%%(.?.?)') do
    if not string.find(esc, '^%x%x$') then return false end
    n = n - 2
  end
  return n <= 512
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
    elseif letter == 'p' then
      if not trace_parent_ok(v) then
        return nil, 'a traceparent (p) is W3C version-traceid-spanid-flags: 2, 32, 16 and 2 lowercase hex digits, version not ff, ids not all zero'
      end
      parts[#parts + 1] = ';' .. opt
    elseif letter == 's' then
      if not trace_state_ok(v) then
        return nil, 'a tracestate (s) is at most 512 bytes of printable ASCII, with % ; : written %25 %3B %3A'
      end
      parts[#parts + 1] = ';' .. opt
    elseif letter == 'e' then
      return nil, 'option e (a deadline) is written by enqueue; pass x<ms> for an expiry'
    else
      return nil, 'unknown option "' .. letter .. '": give x<ms>, t<ms>, g<group>, p<traceparent> or s<tracestate>'
    end
  end
  if seen_opt.s and not seen_opt.p then return nil, 'a tracestate (s) needs a traceparent (p)' end
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
  local b = at + stride * (i - 1)
  local id, payload = I_OFF and ARGV[b + I_OFF] or '', ARGV[b + P_OFF]
  local when, max, backoff = S_WHEN or ARGV[b + W_OFF], S_MAX or ARGV[b + 4], S_BACKOFF or ARGV[b + 5]
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
local head, head_due, due_s = nil, nil, nil
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
    local id = ARGV[at + stride * (i - 1) + 1]
    if id ~= '' and not listed[id] then
      listed[id] = true
      given[#given + 1] = id
    end
  end
end
local state, in_dead, has_rec, cold_rec = {}, {}, {}, {}
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
      if recs[j] then
        has_rec[loose[j]] = true
        -- A cold job (PROTOCOL.md "The cold pool") is in no set.
        local d = string.match(recs[j], RECORD_DUE)
        if d and is_cold_due(tonumber(d, 36)) then cold_rec[loose[j]] = true end
      end
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
-- Jobs due at or after this go to the cold pool (cold_place), and replaced
-- cold jobs leave it.
local cold_due, cold_gone = cold_from(now), 0
-- The shared forms' reply: k, the jobs' ids written into `out` as they go
-- (when one was generated, k = n; else none, k = 0), then the statuses
-- that are not 1 (pairs j, status, kept in `odd` until the end).
local odd, nodd = {}, 0
-- The Rust library's common batches: a shared form with every id
-- generated (on a topic that is not partitioned: a partitioned topic's ids
-- are made by the client), no candidate taken and no per-job options. Every
-- job gets its candidate id and status 1, so the loops below do only what
-- differs per job (callgrind, calls of 1,000: "=n" into the cold pool 4,100
-- instructions per job less than the general loop; "~n" into pool, a due
-- time each, 1,900 less). In "=n" the jobs also share their
-- header, due time and destination.
local uniform = shared and generate == n and next(taken) == nil
  and not string.find(S_MAX, ';', 1, true)
-- With every id generated and none sent ("=*n", "~*n"), the uniform loop's
-- ids follow each other: the reply gives the first one only.
local first_only = gen_all and uniform
local ids_back = shared and generate > 0 and not first_only
if first_only then
  out[1], out[2] = -1, cand[1]
elseif shared then
  out[1] = ids_back and n or 0
end
if uniform and form == 126 then
  -- "~n": id, payload, when per job; the header per run of equal due times.
  -- The header and the destination are built as in the general loop, kept
  -- inline in both: a function call per job cost 300 to 1,200 instructions
  -- (callgrind).
  for i = 1, n do
    local id = cand[i]
    local due = dues[i]
    if due ~= head_due then
      head = head_of(due)
      head_due = due
      due_s = string.format('%d', due)
    end
    records[2 * i - 1] = id
    records[2 * i] = S_MAX .. head .. S_BACKOFF .. ':0:' .. ARGV[at + stride * (i - 1) + P_OFF]
    if ids_back then out[i + 1] = id end
    if due <= now then
      to_ready[nq + 1] = due_s
      to_ready[nq + 2] = id
      nq = nq + 2
    elseif not (due >= cold_due and cold_place(id, due, now, cold_due)) then
      to_pool[np + 1] = due_s
      to_pool[np + 2] = id
      np = np + 2
      if not pool_min or due < pool_min then pool_min = due end
    end
  end
  nr, seq, created = 2 * n, first_seq + n, n
elseif uniform then
  local due = dues[1]
  head = head_of(due)
  due_s = string.format('%d', due)
  local pre = S_MAX .. head .. S_BACKOFF .. ':0:'
  for i = 1, n do
    local id = cand[i]
    records[2 * i - 1] = id
    records[2 * i] = pre .. ARGV[at + stride * (i - 1) + P_OFF]
    if ids_back then out[i + 1] = id end
  end
  nr, seq, created = 2 * n, first_seq + n, n
  -- Where the loop below would put each of them (cold_place: due at or
  -- after cold_due).
  if due > now and due >= cold_due then
    cold_place_all(cand, due)
  else
    local to = to_ready
    if due > now then
      to, pool_min = to_pool, due
    end
    for i = 1, n do
      to[2 * i - 1] = due_s
      to[2 * i] = cand[i]
    end
  end
end
for i = 1, uniform and 0 or n do
  local b = at + stride * (i - 1)
  local id = I_OFF and ARGV[b + I_OFF] or ''
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
      -- The header and the ZADD score, made once per run of equal due
      -- times: a number given to redis.call is formatted ("%.17g", about
      -- 3,500 instructions) for every argument it fills.
      head = head_of(due)
      head_due = due
      due_s = string.format('%d', due)
    end
    records[nr + 1] = id
    local m = S_MAX or ARGV[b + 4]
    local o = opts[i]
    if o then
      -- Jobs of a batch mostly share their options and due time.
      local asked = asks[i]
      if o ~= last_o or asked ~= last_due then
        last_m, last_o, last_due = o.pre .. ';e' .. b36(asked + o.x) .. o.post, o, asked
      end
      m = last_m
    end
    records[nr + 2] = m .. head .. (S_BACKOFF or ARGV[b + 5]) .. ':0:' .. ARGV[b + P_OFF]
    nr = nr + 2
    if not grouped and m ~= '' and string.find(m, ';g', 1, true) then grouped = true end
    local where = 'pool'
    if due <= now then
      where = 'ready'
      to_ready[nq + 1] = due_s
      to_ready[nq + 2] = id
      nq = nq + 2
    elseif due >= cold_due and cold_place(id, due, now, cold_due) then
      where = 'cold'
    else
      to_pool[np + 1] = due_s
      to_pool[np + 2] = id
      np = np + 2
      if not pool_min or due < pool_min then pool_min = due end
    end
    if status == 2 then
      dest[id] = where
      if cold_rec[id] then cold_gone = cold_gone + 1 end
    end
    created = created + 1
  elseif status ~= 4 then
    dup = dup + 1
  end
  if not shared then
    out[no + 1] = id
    out[no + 2] = status
    no = no + 2
  else
    if ids_back then out[i + 1] = id end
    if status ~= 1 then
      odd[nodd + 1] = i
      odd[nodd + 2] = status
      nodd = nodd + 2
    end
  end
end
if shared then
  no = #out
  for i = 1, nodd do out[no + i] = odd[i] end
end

if created > 0 then
  -- Replaced jobs: their ids leave P:{T}:retried, and then the cold pool's
  -- keys are written, before the others (keys.lua's K_RETRIED, cold_place).
  local replaced = {}
  for id in pairs(old_state) do replaced[#replaced + 1] = id end
  if #replaced > 0 then drop_retried(replaced) end
  cold_flush()
  if cold_gone > 0 then cold_left(cold_gone) end
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
  -- ack the new one: it is no longer running, and no token goes to two claims.)
  if #replaced > 0 then variadic('HDEL', K_ATT, replaced) end
  redis.call('HINCRBY', K_STATS, 'enqueued', created)
  if K_FIRED then
    local marks, now_s = {}, string.format('%d', now)
    for i = 1, #records, 2 do
      marks[#marks + 1] = now_s
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
