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
-- encode: a record's text (the format is in record.lua).
-- include: b36

local function encode(r)
  local gap = r.due - r.created
  if gap < 0 then gap = 0 end
  return table.concat({
    r.mfield or r.max or '', ':', b36(r.due), ':', b36(gap), ':', r.backoff, ':', #r.err, ':', r.err, r.payload,
  })
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

-- reschedule: give a waiting job (pool or ready) a new due time.
-- KEYS: the nine topic keys. ARGV[1] id, ARGV[2] when ("d<ms>" or "a<ms>").
-- Returns {state before, new due ms}; {"running", 0} or {"dead", 0} and no
-- change for a job that is running or dead (use dead replay); nil when no such
-- job is live.
-- include: args
-- include: clock
-- include: b36
-- include: record
-- include: encode
-- include: due_of
-- include: earliest
-- include: state
-- include: cold
-- include: cold_place
-- include: cold_left
-- include: index_ready

if #ARGV ~= 2 then return invalid('reschedule expects an id and a due time') end
local id = ARGV[1]
local now, up = clock()
local due, why = due_of(ARGV[2], now, up)
if not due then return invalid(why) end
-- (the record keeps its creation time)
local st = state_of(id)
if not st then return false end
if st == 'running' or st == 'dead' then return { st, 0 } end
local r = decode(redis.call('HGET', K_JOBS, id))
if not r then return invalid('the record of "' .. id .. '" cannot be read; run punctual check') end
local was_cold = st == 'cold'
if was_cold then st = 'pool' end
local old_due = r.due
-- The expiry deadline moves with the due time: the window is kept.
if r.deadline then
  r.mfield = string.gsub(r.mfield, ';e[^;]*', ';e' .. b36(r.deadline + due - r.due), 1)
end
r.due = due
if was_cold and due >= cold_from(now) and due - due % COLD_BUCKET == old_due - old_due % COLD_BUCKET then
  -- Cold, and staying in the same bucket: its entry there moves it by the
  -- new due time, so only the record changes (no entry more per call).
  redis.call('HSET', K_JOBS, id, encode(r))
  return { st, due }
end
-- A cold job's list entry stays, stale: the record's new due time is not
-- in its bucket, or a second entry there moves the job once.
local to_cold = due > now and cold_place(id, due, now)
-- The cold pool's keys first (cold.lua's cold_place).
if to_cold then cold_flush() end
if was_cold then cold_left(1) end
redis.call('HSET', K_JOBS, id, encode(r))
if due <= now then
  redis.call('ZADD', K_READY, due, id)
  index_ready({ due, id })
  if st ~= 'ready' then redis.call('ZREM', K_POOL, id) end
  redis.call('PUBLISH', K_READY, '')
elseif to_cold then
  redis.call('ZREM', STATE_KEY[st], id)
else
  local old_min = earliest(K_POOL)
  redis.call('ZADD', K_POOL, due, id)
  if st ~= 'pool' then redis.call('ZREM', K_READY, id) end
  if not old_min or due < old_min then redis.call('PUBLISH', K_POOL, due) end
end
return { st, due }
