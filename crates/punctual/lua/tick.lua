#!lua
-- tick: the scheduler's one call. First reclaim expired leases (back to pool
-- with backoff, or dead when the attempts are used up), then promote due jobs
-- from pool to ready, at most `batch` of each per call.
-- KEYS: the nine topic keys.
-- ARGV[1] promote batch (1..1000), ARGV[2] max ready (promote is refused while
-- ready holds this many), ARGV[3] reclaim batch (1..1000), optional ARGV[4]
-- grace in ms (0..60000, default 0): on a topic without groups, whose
-- workers claim due jobs from the pool themselves, promote only jobs due
-- more than the grace ago (ARCHITECTURE.md "Workers claim due jobs straight
-- from the pool").
-- Returns {promoted, reclaimed, dead, refused (0/1), more (0/1),
--          ms until the next promotion: the pool's earliest due time plus
--          the grace (-1: pool empty),
--          ms until the next lease deadline (-1: nothing running),
--          the same as the sixth entry in us, from the tick's TIME,
--          the tick's TIME in us}.
-- `more` is 1 when a batch limit was hit and another tick should follow now.

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
  release_groups(expired, glim, recs)
  local records, to_pool, to_ready, to_dead, gone = {}, {}, {}, {}, {}
  -- Attempts entries that lose the live mark (see is_live_att): the reclaimed
  -- lease's token can no longer ack the job.
  local ended = {}
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
        else
          to_pool[#to_pool + 1] = r.due
          to_pool[#to_pool + 1] = id
        end
        reclaimed = reclaimed + 1
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
    variadic('ZREM', K_POOL, ids)
    promoted = #ids
    redis.call('HINCRBY', K_STATS, 'promoted', promoted)
    redis.call('PUBLISH', K_READY, '')
    if promoted == n then more = 1 end
  end
end

local next_due, next_lease, next_due_us = -1, -1, -1
if grace > 0 and meta().groups == '1' then grace = 0 end
local e = earliest(K_POOL)
if e then
  next_due = math.max(0, e + grace - now)
  next_due_us = math.max(0, (e + grace) * 1000 - now_us)
end
e = earliest(K_RUNNING)
if e then next_lease = math.max(0, e - now) end
return { promoted, reclaimed, died, refused, more, next_due, next_lease, next_due_us, now_us }
