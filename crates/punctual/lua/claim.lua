#!lua
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
