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
-- cold_left: a cold job left the cold pool other than by tick.

-- A cold job left the cold pool other than by tick's move (cancel,
-- reschedule, replace, unfire): its list entry stays, stale.
local function cold_left(n)
  redis.call('HINCRBY', K_META, 'cold_n', -n)
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

-- cancel: remove a job in any state, with its record.
-- KEYS: the nine topic keys. ARGV[1] id.
-- Returns the state it was in ("pool", also for a cold job, "ready",
-- "running", "dead", or "orphan" for a record in no set, which check
-- reports), or nil when no such
-- job is live. A running job's lease is revoked (its attempts entry goes
-- with the record, and it leaves running): no ack or fail of it lands
-- afterwards, and no tick reclaims it. The worker holding the lease is told
-- on the channel P:{T}:cancel (reached by name, same hash tag): the message
-- is "<token>:<id>", the lease's token read from the entry.
-- include: args
-- include: at_max_running
-- include: state
-- include: drop_retried
-- include: cold_left
-- include: release_groups

if #ARGV ~= 1 then return invalid('cancel expects one id') end
local id = ARGV[1]
local st = state_of(id)
-- (Before any other write: keys.lua's K_RETRIED.)
if st == 'pool' or st == 'ready' or st == 'cold' then drop_retried({ id }) end
local full, glim = false, false
local lease
if st == 'running' then
  full, glim = at_max_running()
  release_groups({ id }, glim)
  lease = string.match(redis.call('HGET', K_ATT, id) or '', ':(%d+)$')
end
local had = redis.call('HDEL', K_JOBS, id)
redis.call('HDEL', K_ATT, id)
if st == 'cold' then
  -- Its list entry stays, stale: tick drops it (the record is gone).
  cold_left(1)
  st = 'pool'
elseif st then
  redis.call('ZREM', STATE_KEY[st], id)
end
if not st and had == 0 then return false end
redis.call('HINCRBY', K_STATS, 'cancelled', 1)
if full then redis.call('PUBLISH', K_READY, '') end
if lease then redis.call('PUBLISH', KEY_BASE .. 'cancel', lease .. ':' .. id) end
return st or 'orphan'
