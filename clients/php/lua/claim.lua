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
-- reserve_tokens: claim's lease tokens.

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
-- claimable: claim's check of a record it is about to lease.
-- include: opts_of
-- include: record

-- A readable record without options, without captures. (A record with
-- options fails it, and is read with decode.)
local HEADER_CHECK = '^%d*:%w+:%w+:[%d,]*:%d+:'

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
-- encode: a record's text (the format is in record.lua).
-- include: b36

local function encode(r)
  local gap = r.due - r.created
  if gap < 0 then gap = 0 end
  return table.concat({
    r.mfield or r.max or '', ':', b36(r.due), ':', b36(gap), ':', r.backoff, ':', #r.err, ':', r.err, r.payload,
  })
end
-- att_of: the attempts and token of an attempts-hash entry.

-- Attempts and token from an attempts-hash value ("A:T", or "0A:T" while
-- live); 0, 0 when absent.
local function att_of(v)
  if not v then return 0, 0 end
  local a, t = string.match(v, '^(%d+):(%d+)$')
  return tonumber(a) or 0, tonumber(t) or 0
end
-- rate: a rate limit's token bucket (the topic's, and each group's).
-- include: args

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
-- group_of_field: the group of a record's M field.
-- include: opts_of

-- The group of a record's M field: its g option, or '' (no group, or an
-- unreadable field).
local function group_of_field(m)
  if not string.find(m, ';', 1, true) then return '' end
  local _, o = opts_of(m)
  return o and o.group or ''
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

-- claim: take up to k ready jobs and lease them, in one step, so a consumer
-- that dies after the claim leaves a lease to reclaim, never a lost job.
-- Counts the attempt now (attempts count at claim time). The records are only
-- read: attempts and the new token go to the attempts hash. A claim's token
-- is given to no other claim, even after a restart that lost writes (see
-- reserve_tokens).
-- KEYS: the nine topic keys. ARGV[1] k (1..1000), ARGV[2] lease in ms.
-- Returns a flat array: the server time of the claim in microseconds, the
-- topic's max attempts, wait_ms, the claim's token T and the number of jobs
-- m, then two entries per job: id and the record as stored (the client
-- decodes it: max attempts, due, created, payload; the script only checks
-- its header). Every job of the claim is leased under T: a lease is the
-- pair (id, T), and T is never given to another claim. Then, for each job
-- whose attempt is not 1, two entries: j and its attempt (a job not listed
-- is on its first attempt). So the reply holds two values per job, as few as the floor's
-- claim (ids and records): each value costs Redis and the client. An empty array
-- when the topic is paused or ready is empty. A ready id whose record
-- vanished (eviction, restore) is dropped and counted as "orphans"; one whose
-- record cannot be read is moved to dead. A job whose expiry deadline
-- (option e, see record.lua) has passed is moved to dead with the last error
-- "expired: ...", counted in "expired" and "dead"; its attempts are
-- unchanged (it never started).
-- Limits (meta rate, burst, max_running; PROTOCOL.md "Limits"): at most
-- min(k, max_running - running, whole tokens) jobs are handed out. wait_ms is
-- 0, or, when a limit held ready jobs back, the ms until the next token (-1:
-- until a running job ends).
-- Groups (meta groups = 1, PROTOCOL.md "Groups"): the jobs are picked group
-- by group, the group with the lowest virtual time first, from the group
-- indexes P:{T}:g:<group>, dropping index entries whose job left ready.
-- Group limits (meta glimited = 1, PROTOCOL.md "Group limits"): a group takes
-- no more than its own rate and max_running allow (only the jobs leased
-- take room: one sent to dead or dropped does not); wait_ms also reports
-- when groups held back by them are all that is left.
-- The steady flow (no groups; ARCHITECTURE.md "Workers claim due jobs
-- straight from the pool"): when ready yields fewer than n ids, pool entries
-- due by this claim's TIME fill the rest, in due order, and go straight to
-- running (counted in "promoted" too). A non-empty reply ends with one more
-- entry: the us from the claim's time to the pool's earliest due time after
-- the claim (0: due jobs are left; -1: the pool is empty or was not looked
-- at). An empty array also when nothing was claimable and the pool is empty.
-- include: args
-- include: reserve_tokens
-- include: claimable
-- include: encode
-- include: att_of
-- include: rate
-- include: bulk
-- include: claim_groups

local k = int_arg(ARGV[1], 1, 1000)
local lease = int_arg(ARGV[2], 1, MAX_DELAY_MS)
if not k or not lease or #ARGV ~= 2 then
  return invalid('claim expects 1 to 1000 jobs and a lease of 1 ms to ten years')
end
local topic_meta = redis.call('HMGET', K_META, 'paused', 'max_attempts', 'rate', 'burst', 'max_running', 'bucket',
  'groups', 'vtime', 'glimited', 'retried', 'retried_n')
if topic_meta[1] == '1' then return {} end
-- Jobs waiting with an attempts entry (P:{T}:retried, keys.lua's
-- K_RETRIED): the set is touched only when it has members, and then here,
-- before any write (it is not among the KEYS).
local n_retried = tonumber(topic_meta[11]) or 0
if n_retried > 0 then redis.call('SCARD', K_RETRIED) end
local topic_max = int_arg(topic_meta[2], 1, MAX_ATTEMPTS) or DEFAULT_MAX_ATTEMPTS
-- Due pool jobs may be claimed (topics without groups).
local from_pool = topic_meta[7] ~= '1'

-- Redis's clock, read once: before the ids when a rate needs it, else after.
local now_us, now
local function read_clock()
  if not now_us then
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    now = math.floor(now_us / 1000)
  end
end

-- The pool entry at rank r (the clock read): us after now, 0 when due, -1
-- when there is none.
local function pool_at(r)
  local e = redis.call('ZRANGE', K_POOL, r, r, 'WITHSCORES')
  if #e == 0 then return -1 end
  return math.max(0, tonumber(e[2]) * 1000 - now_us)
end

-- Limits: n jobs at most, and the wait to report when they hold jobs back.
local n, wait = k, 0
local max_running = int_arg(topic_meta[5], 1, MAX_SAFE)
if max_running then
  local free = max_running - redis.call('ZCARD', K_RUNNING)
  if free < n then n, wait = free, -1 end
end
local rate_n, rate_p = rate_of(topic_meta[3])
local tokens
if rate_n then
  read_clock()
  tokens = bucket_tokens(topic_meta[6], burst_of(topic_meta[4], rate_n, rate_p), rate_n, rate_p, now)
  local whole = math.floor(tokens)
  if whole < n then
    n = whole
    wait = math.max(1, math.ceil((1 - (tokens - whole)) * rate_p / rate_n))
  end
end
if n <= 0 then
  read_clock()
  if redis.call('ZCARD', K_READY) == 0 and not (from_pool and pool_at(0) == 0) then return {} end
  return { now_us, topic_max, wait, 0, 0, -1 }
end

-- Read the earliest ready ids; they leave ready only after their leases
-- are written (destination before source).
local ids
-- Whether the ready ids are ready's first ones (ranks 0 to #ids - 1): then
-- they leave by ZREMRANGEBYRANK, one walk of the skiplist, where a ZREM
-- looks each one up (nothing in between writes ready or pool).
local by_rank = false
-- Group limits (meta glimited = 1): the state of the groups met (claim_groups.lua).
local gs
if topic_meta[9] == '1' then
  read_clock()
  gs = { g = {} }
end
local held
-- The records of the ids when claim_groups read them already.
local grecs
if topic_meta[7] == '1' then
  -- Groups (PROTOCOL.md "Groups"): claim_groups.lua's claim_groups picks them.
  local vt, ran_out
  ids, vt, ran_out, held, grecs = claim_groups(n, gs, now)
  if vt then redis.call('HSET', K_META, 'vtime', vt) end
  -- Never an empty answer while ready holds jobs: when the steps went to
  -- stale entries only (or ready holds jobs no index has, which should not
  -- happen), serve ready in due order this once; their index entries go
  -- stale and are dropped later. With group limits, not past a group held
  -- back: the caller is told to claim again at once (wait 1 ms) or when
  -- the first group may go on.
  if #ids == 0 then
    if gs and (held or not ran_out) then
      if redis.call('ZCARD', K_READY) == 0 then return {} end
      return { now_us, topic_max, held or 1, 0, 0, -1 }
    end
    ids = redis.call('ZRANGE', K_READY, 0, n - 1)
    by_rank = true
    grecs = nil
  end
else
  ids = redis.call('ZRANGE', K_READY, 0, n - 1)
  by_rank = true
end
-- The ids from ready (rids) and from the pool (pids); ids holds both.
local rids, pids, pool_next = ids, nil, -1
if from_pool and #rids < n then
  read_clock()
  pids = redis.call('ZRANGE', K_POOL, '-inf', now, 'BYSCORE', 'LIMIT', 0, n - #rids)
  pool_next = pool_at(#pids)
  if #pids > 0 then
    -- One claim leases an id once: all its jobs share one token, so a
    -- second lease of the same id would be the same lease. An id in both
    -- ready and pool (which check reports, and which should not happen) is
    -- leased from ready, and leaves the pool below.
    local in_ready = {}
    ids = {}
    for i = 1, #rids do
      ids[i] = rids[i]
      in_ready[rids[i]] = true
    end
    for i = 1, #pids do
      if not in_ready[pids[i]] then ids[#ids + 1] = pids[i] end
    end
  end
end
if #ids == 0 then
  if pool_next > 0 then return { now_us, topic_max, 0, 0, 0, pool_next } end
  return {}
end
-- A limit held jobs back only when more were claimable than were taken:
-- ready holds more, or the pool holds more due jobs.
if wait ~= 0 then
  local more = false
  if #ids == n then
    more = redis.call('ZCARD', K_READY) > #rids
    if not more and from_pool then
      if not pids then
        read_clock()
        pool_next = pool_at(0)
      end
      more = pool_next == 0
    end
  end
  if not more then wait = 0 end
end
-- Groups held back by their own limits while others had no more work.
if held then
  if wait == -1 or held == -1 then wait = -1 else wait = math.max(wait, held) end
end

read_clock()
local deadline = now + lease
-- The lease deadline as a string, made once: a number given to redis.call
-- is formatted ("%.17g", about 3,600 instructions) for every argument it
-- fills, so the ZADD's 1,000 equal scores cost 1,000 formattings.
local deadline_s = string.format('%d', deadline)
local recs = grecs or redis.call('HMGET', K_JOBS, unpack(ids))
-- The attempts entries of these jobs (false: none, the first attempt).
-- Only a job sent back by fail or a reclaim has one while it waits, and it
-- is in P:{T}:retried (K_RETRIED): once meta retried is 1, only the ids in
-- that set are read, and a claim with none of them reads no entry at all.
-- Until then (a topic whose entries may predate the set) every id's is.
local trusted = topic_meta[10] == '1'
if not trusted and redis.call('EXISTS', K_ATT) == 0 then
  -- No entry at all: none predates the set.
  redis.call('HSET', K_META, 'retried', '1')
  trusted = true
end
-- The ids of this claim in the set: they leave it below.
local kept = {}
if n_retried > 0 then
  local member = redis.call('SMISMEMBER', K_RETRIED, unpack(ids))
  for i = 1, #ids do
    if member[i] == 1 then kept[#kept + 1] = ids[i] end
  end
end
local atts
if not trusted then
  atts = redis.call('HMGET', K_ATT, unpack(ids))
else
  atts = {}
  if #kept > 0 then
    local vals, of = redis.call('HMGET', K_ATT, unpack(kept)), {}
    for j = 1, #kept do of[kept[j]] = vals[j] end
    for i = 1, #ids do atts[i] = of[ids[i]] or false end
  end
end
-- One token for the whole claim: its jobs' attempts entries ("0A:T", the
-- live mark, the attempt and T) are then one string per distinct attempt,
-- and an ack of jobs from one claim sends T once (ack.lua's grouped form).
local token = reserve_tokens(1, now_us) + 1

local out, counts, leases, parked, gone = { now_us, topic_max, wait, token, 0 }, {}, {}, {}, {}
local expired = {}
-- The jobs handed out (m), and their attempts where not 1: pairs j, attempt.
local m, retried, nr = 0, {}, 0
-- Lengths kept by hand: the hot loop appends without the # operator.
local no, nl = 5, 0
local format, find, sub = string.format, string.find, string.sub
-- The attempts entries by attempt: "0A:T" as format('0%d:%d') writes it.
local entry_of = {}
-- The header of the last record that passed HEADER_CHECK: a record that
-- starts with the same bytes passes too (jobs of a batch share their due
-- time and options), checked by one plain find instead of the pattern (a
-- find makes no string; a string.sub would make, hash and intern one).
local head = nil
for i = 1, #ids do
  local id, rec = ids[i], recs[i]
  -- A job whose expiry deadline has passed goes to dead, never handed out.
  -- (A record without options is checked by one string.find, or by one
  -- comparison when it starts with the header of the last one that passed.)
  local ok, r = false, nil
  if rec then
    if head and find(rec, head, 1, true) == 1 then
      ok = true
    else
      local _, e = find(rec, HEADER_CHECK)
      if e then
        ok, head = true, sub(rec, 1, e)
      else
        ok, r = claimable(rec, now)
      end
    end
  end
  if r then
    r.err = 'expired: could not start by its deadline, ' .. (now - r.deadline)
      .. ' ms ago (' .. (now - r.due) .. ' ms after its due time)'
    expired[#expired + 1] = id
    expired[#expired + 1] = encode(r)
    parked[#parked + 1] = now
    parked[#parked + 1] = id
  elseif ok then
    local a = atts[i]
    local attempts = 1
    if a then attempts = att_of(a) + 1 end
    m = m + 1
    local entry = entry_of[attempts]
    if not entry then
      entry = format('0%d:%d', attempts, token)
      entry_of[attempts] = entry
    end
    counts[nl + 1] = id
    counts[nl + 2] = entry
    leases[nl + 1] = deadline_s
    leases[nl + 2] = id
    nl = nl + 2
    out[no + 1] = id
    out[no + 2] = rec
    no = no + 2
    if attempts ~= 1 then
      retried[nr + 1] = m
      retried[nr + 2] = attempts
      nr = nr + 2
    end
  elseif rec then
    -- A record punctual cannot read: park it in dead for a person to inspect.
    parked[#parked + 1] = now
    parked[#parked + 1] = id
  else
    gone[#gone + 1] = id
  end
end
if #leases > 0 then
  variadic('ZADD', K_RUNNING, leases)
  variadic('HSET', K_ATT, counts)
  redis.call('HINCRBY', K_STATS, 'claimed', #leases / 2)
  if rate_n then
    redis.call('HSET', K_META, 'bucket', string.format('%.6f:%d', tokens - #leases / 2, now))
  end
  if gs then groups_claimed(gs, ids, recs, leases, now) end
end
if #parked > 0 then
  variadic('ZADD', K_DEAD, parked)
  redis.call('HINCRBY', K_STATS, 'dead', #parked / 2)
end
if #expired > 0 then
  variadic('HSET', K_JOBS, expired)
  redis.call('HINCRBY', K_STATS, 'expired', #expired / 2)
end
if not by_rank then
  variadic('ZREM', K_READY, rids)
elseif #rids > 0 then
  redis.call('ZREMRANGEBYRANK', K_READY, 0, #rids - 1)
end
if pids and #pids > 0 then
  -- The pool's first ones too (ZRANGE from -inf, by score).
  redis.call('ZREMRANGEBYRANK', K_POOL, 0, #pids - 1)
  redis.call('HINCRBY', K_STATS, 'promoted', #pids)
end
if #gone > 0 then
  variadic('HDEL', K_ATT, gone)
  redis.call('HINCRBY', K_STATS, 'orphans', #gone)
end
-- Every id of this claim left waiting: running, dead or gone.
if #kept > 0 then
  variadic('SREM', K_RETRIED, kept)
  redis.call('HINCRBY', K_META, 'retried_n', -#kept)
end
-- Wake the schedulers when these leases end before every other one: an idle
-- scheduler sleeps towards the earliest deadline it saw at its last tick.
if #leases > 0 and redis.call('ZCOUNT', K_RUNNING, '-inf', deadline) <= #leases / 2 then
  redis.call('PUBLISH', K_POOL, deadline)
end
out[5] = m
for i = 1, nr do out[no + i] = retried[i] end
out[no + nr + 1] = pool_next
return out
