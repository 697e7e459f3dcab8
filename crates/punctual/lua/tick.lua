#!lua
-- tick: the scheduler's one call. First reclaim expired leases (back to pool
-- with backoff, or dead when the attempts are used up), then move the cold
-- buckets due within cold_after into pool, then promote due jobs from pool
-- to ready, at most `batch` of each per call (the move and the promotion
-- share the promote batch's count each).
-- KEYS: the nine topic keys.
-- ARGV[1] promote batch (1..1000), ARGV[2] max ready (promote is refused while
-- ready holds this many), ARGV[3] reclaim batch (1..1000), optional ARGV[4]
-- grace in ms (0..60000, default 0): on a topic without groups, whose
-- workers claim due jobs from the pool themselves, promote only jobs due
-- more than the grace ago (ARCHITECTURE.md "Workers claim due jobs straight
-- from the pool").
-- Returns {promoted, reclaimed, dead, refused (0/1), more (0/1),
--          ms until the next promotion: the pool's earliest due time plus
--          the grace, or the next move of a cold bucket when earlier (-1:
--          neither),
--          ms until the next lease deadline (-1: nothing running),
--          the same as the sixth entry in us, from the tick's TIME,
--          the tick's TIME in us}.
-- `more` is 1 when a batch limit was hit and another tick should follow now.
-- include: args
-- include: clock
-- include: record
-- include: encode
-- include: att_of
-- include: is_live_att
-- include: ended_att
-- include: meta
-- include: retry
-- include: at_max_running
-- include: earliest
-- include: bulk
-- include: add_retried
-- include: cold
-- include: cold_settings
-- include: cold_place
-- include: index_ready
-- include: release_groups

local batch = int_arg(ARGV[1], 1, 1000)
local max_ready = int_arg(ARGV[2], 1, MAX_SAFE)
local rbatch = int_arg(ARGV[3], 1, 1000)
local grace = 0
if #ARGV == 4 then grace = int_arg(ARGV[4], 0, 60000) end
if not batch or not max_ready or not rbatch or not grace or (#ARGV ~= 3 and #ARGV ~= 4) then
  return invalid('tick expects batches of 1 to 1000, a max ready of at least 1 and a grace of 0 to 60000 ms')
end
local now, up, now_us = clock()
local more = 0

-- Reclaim: leases whose deadline has passed.
local expired = redis.call('ZRANGE', K_RUNNING, '-inf', now, 'BYSCORE', 'LIMIT', 0, rbatch)
local reclaimed, died = 0, 0
if #expired > 0 then
  if #expired == rbatch then more = 1 end
  local recs = redis.call('HMGET', K_JOBS, unpack(expired))
  local atts = redis.call('HMGET', K_ATT, unpack(expired))
  local topic_max, topic_backoff = topic_defaults()
  local full, glim = at_max_running()
  local records, to_pool, to_ready, to_dead, gone = {}, {}, {}, {}, {}
  -- Attempts entries that lose the live mark (see is_live_att): the reclaimed
  -- lease's token can no longer ack the job.
  local ended = {}
  -- The jobs sent back to wait with an attempts entry (keys.lua's K_RETRIED).
  local back = {}
  for i, id in ipairs(expired) do
    local r = decode(recs[i])
    local attempts = att_of(atts[i])
    if recs[i] and atts[i] and is_live_att(atts[i]) then
      ended[#ended + 1] = id
      ended[#ended + 1] = ended_att(atts[i])
    end
    if r then
      r.err = 'lease expired during attempt ' .. attempts .. ' (the worker died, stalled or lost Redis)'
      records[#records + 1] = id
      if attempts >= max_attempts(r, topic_max) then
        to_dead[#to_dead + 1] = now
        to_dead[#to_dead + 1] = id
        died = died + 1
      else
        local wait = backoff_ms(r, topic_backoff, attempts)
        if wait == 0 then r.due = now else r.due = up + wait end
        if r.due <= now then
          to_ready[#to_ready + 1] = r.due
          to_ready[#to_ready + 1] = id
        elseif not cold_place(id, r.due, now) then
          to_pool[#to_pool + 1] = r.due
          to_pool[#to_pool + 1] = id
        end
        reclaimed = reclaimed + 1
        if atts[i] then back[#back + 1] = id end
      end
      records[#records + 1] = encode(r)
    elseif recs[i] then
      to_dead[#to_dead + 1] = now
      to_dead[#to_dead + 1] = id
      died = died + 1
    else
      -- A lease whose record vanished is simply dropped (counted as an orphan).
      gone[#gone + 1] = id
    end
  end
  -- The keys that are not among the KEYS first (keys.lua's K_RETRIED and
  -- cold_place), the groups' running counts with them.
  if #back > 0 then add_retried(back) end
  cold_flush()
  release_groups(expired, glim, recs)
  if #to_pool > 0 then variadic('ZADD', K_POOL, to_pool) end
  if #to_ready > 0 then variadic('ZADD', K_READY, to_ready) end
  if #to_dead > 0 then variadic('ZADD', K_DEAD, to_dead) end
  if #records > 0 then variadic('HSET', K_JOBS, records) end
  if #ended > 0 then variadic('HSET', K_ATT, ended) end
  index_ready(to_ready)
  variadic('ZREM', K_RUNNING, expired)
  if #gone > 0 then variadic('HDEL', K_ATT, gone) end
  local orphans = #gone
  if reclaimed > 0 then redis.call('HINCRBY', K_STATS, 'reclaimed', reclaimed) end
  if died > 0 then redis.call('HINCRBY', K_STATS, 'dead', died) end
  if orphans > 0 then redis.call('HINCRBY', K_STATS, 'orphans', orphans) end
  if #to_ready > 0 or full then redis.call('PUBLISH', K_READY, '') end
end

-- Move: the cold buckets whose start is less than cold_after ahead go into
-- pool (PROTOCOL.md "The cold pool"), at most `batch` entries per call. An
-- entry moves its job only when the job's record is due within the bucket
-- and the job is in no other set (a stale entry, of a job cancelled,
-- rescheduled or moved by an earlier entry, is dropped); so no job gets
-- two states, however entries repeat.
local move_w = cold_after()
if move_w == 0 then move_w = COLD_AFTER end
local budget, moved, moved_min, pool_min, pool_read = batch, 0, nil, nil, false
local first = redis.call('ZRANGE', K_COLD, 0, 0)[1]
while first and budget > 0 and tonumber(first) < now + move_w do
  local s = tonumber(first)
  local key = KEY_BASE .. 'c:' .. first
  -- From the tail: a listing pages the bucket from its head by offset
  -- (cold_page), and pops here shift none of its pages still to read.
  local ids = redis.call('RPOP', key, budget)
  if ids then
    budget = budget - #ids
    local recs = redis.call('HMGET', K_JOBS, unpack(ids))
    local rd = redis.call('ZMSCORE', K_READY, unpack(ids))
    local rn = redis.call('ZMSCORE', K_RUNNING, unpack(ids))
    local dd = redis.call('ZMSCORE', K_DEAD, unpack(ids))
    local adds, seen = {}, {}
    -- The due time as a decimal string, made once per run of equal ones
    -- (Redis formats a Lua number argument at some 3,500 instructions).
    local last36, d, ds = nil, nil, nil
    for i, id in ipairs(ids) do
      if recs[i] and not rd[i] and not rn[i] and not dd[i] and not seen[id] then
        local d36 = string.match(recs[i], RECORD_DUE)
        if d36 ~= last36 then
          last36, d = d36, d36 and tonumber(d36, 36)
          if d then ds = string.format('%d', d) end
        end
        if d and d >= s and d < s + COLD_BUCKET then
          seen[id] = true
          adds[#adds + 1] = ds
          adds[#adds + 1] = id
          if not moved_min or d < moved_min then moved_min = d end
        end
      end
    end
    if #adds > 0 then
      if not pool_read then pool_min, pool_read = earliest(K_POOL), true end
      -- Counted at once: the next bucket's key may fail the script (cold.lua).
      local added = variadic('ZADD', K_POOL, adds)
      if added > 0 then redis.call('HINCRBY', K_META, 'cold_n', -added) end
      moved = moved + added
    end
  end
  if redis.call('EXISTS', key) == 1 then break end
  redis.call('ZREM', K_COLD, first)
  first = redis.call('ZRANGE', K_COLD, 0, 0)[1]
end
if moved > 0 and moved_min and (not pool_min or moved_min < pool_min) then
  redis.call('PUBLISH', K_POOL, string.format('%d', moved_min))
end
if first and tonumber(first) < now + move_w then more = 1 end
-- cold_at becomes the first bucket's start or now + cold_after (rounded
-- down to a bucket), whichever is earlier: every cold job is due at or
-- after its bucket's start, so at or after cold_at. (It may go down, when
-- cold_after does: a job placed in a bucket moved before just makes it
-- anew, and the index has it moved again.) The first tick of a topic
-- writes it, which lets scripts place jobs cold (cold.lua).
do
  local to = now + move_w
  to = to - to % COLD_BUCKET
  if first and tonumber(first) < to then to = tonumber(first) end
  if to ~= cold_at() then redis.call('HSET', K_META, 'cold_at', string.format('%d', to)) end
end

-- Promote: pool -> ready for due jobs, bounded by batch and max ready.
local promoted, refused = 0, 0
local room = max_ready - redis.call('ZCARD', K_READY)
if room <= 0 then
  refused = 1
else
  local n = batch
  if room < n then n = room end
  if grace > 0 and meta().groups == '1' then grace = 0 end
  local due = redis.call('ZRANGE', K_POOL, '-inf', now - grace, 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
  if #due > 0 then
    local ids, moves = {}, {}
    for i = 1, #due, 2 do
      ids[#ids + 1] = due[i]
      moves[#moves + 1] = due[i + 1]
      moves[#moves + 1] = due[i]
    end
    variadic('ZADD', K_READY, moves)
    index_ready(moves)
    -- The pool's first ones (read by score from -inf; nothing has written
    -- the pool since): one walk of the skiplist, where ZREM looks each up.
    redis.call('ZREMRANGEBYRANK', K_POOL, 0, #ids - 1)
    promoted = #ids
    redis.call('HINCRBY', K_STATS, 'promoted', promoted)
    redis.call('PUBLISH', K_READY, '')
    if promoted == n then more = 1 end
  end
end

local next_due, next_lease, next_due_us = -1, -1, -1
if grace > 0 and meta().groups == '1' then grace = 0 end
local e = earliest(K_POOL)
if e then e = e + grace end
-- The next move of a cold bucket counts as a promotion.
if first then
  local m = tonumber(first) - move_w
  if not e or m < e then e = m end
end
if e then
  next_due = math.max(0, e - now)
  next_due_us = math.max(0, e * 1000 - now_us)
end
e = earliest(K_RUNNING)
if e then next_lease = math.max(0, e - now) end
return { promoted, reclaimed, died, refused, more, next_due, next_lease, next_due_us, now_us }
