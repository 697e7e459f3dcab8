#!lua
-- claim: pop up to k ready jobs and lease them, in one step, so a consumer
-- that dies after the claim leaves a lease to reclaim, never a lost job.
-- Counts the attempt now (attempts count at claim time).
-- KEYS: the eight topic keys. ARGV[1] k (1..1000), ARGV[2] lease in ms.
-- Returns a flat array: the server time of the claim in microseconds, then
-- seven entries per job: id, token, attempt, max attempts, due ms, created ms,
-- payload. An empty array when the topic is paused or ready is empty. A ready id whose
-- record vanished (eviction, restore) is dropped and counted as "orphans"; one
-- whose record cannot be read is moved to dead.

local k = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
if not k or k < 1 or k > 1000 or not lease or lease < 1 then
  return invalid('claim expects 1 to 1000 jobs and a positive lease')
end
if redis.call('HGET', K_META, 'paused') == '1' then return {} end

-- Read the earliest ready ids; they leave ready only after their leases
-- are written (destination before source).
local ids = redis.call('ZRANGE', K_READY, 0, k - 1)
if #ids == 0 then return {} end

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local deadline = now + lease
local recs = redis.call('HMGET', K_JOBS, unpack(ids))
local topic_max = topic_defaults()
local first = redis.call('INCRBY', K_SEQ, #ids) - #ids

local out, records, leases, parked = { now_us }, {}, {}, {}
local orphans = 0
for i, id in ipairs(ids) do
  local r = decode(recs[i])
  if r then
    r.attempts = r.attempts + 1
    r.token = first + i
    records[#records + 1] = id
    records[#records + 1] = encode(r)
    leases[#leases + 1] = deadline
    leases[#leases + 1] = id
    local n = #out
    out[n + 1] = id
    out[n + 2] = r.token
    out[n + 3] = r.attempts
    out[n + 4] = max_attempts(r, topic_max)
    out[n + 5] = r.due
    out[n + 6] = r.created
    out[n + 7] = r.payload
  elseif recs[i] then
    -- A record punctual cannot read: park it in dead for a person to inspect.
    parked[#parked + 1] = now
    parked[#parked + 1] = id
  else
    orphans = orphans + 1
  end
end
if #leases > 0 then
  variadic('ZADD', K_RUNNING, leases)
  variadic('HSET', K_JOBS, records)
  redis.call('HINCRBY', K_STATS, 'claimed', #leases / 2)
end
if #parked > 0 then
  variadic('ZADD', K_DEAD, parked)
  redis.call('HINCRBY', K_STATS, 'dead', #parked / 2)
end
variadic('ZREM', K_READY, ids)
if orphans > 0 then redis.call('HINCRBY', K_STATS, 'orphans', orphans) end
return out
