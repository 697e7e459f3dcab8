#!lua
-- claim: take up to k ready jobs and lease them, in one step, so a consumer
-- that dies after the claim leaves a lease to reclaim, never a lost job.
-- Counts the attempt now (attempts count at claim time). The records are only
-- read: attempts and the new token go to the attempts hash. Tokens never
-- repeat, even after a restart that lost writes (see reserve_tokens).
-- KEYS: the nine topic keys. ARGV[1] k (1..1000), ARGV[2] lease in ms.
-- Returns a flat array: the server time of the claim in microseconds, the
-- topic's max attempts, then four entries per job: id, token, attempt, and
-- the record as stored (the client decodes it: max attempts, due, created,
-- payload; the script only checks its header). An empty array when the topic is paused or ready is empty. A ready
-- id whose record vanished (eviction, restore) is dropped and counted as
-- "orphans"; one whose record cannot be read is moved to dead. A job whose
-- expiry deadline (option e, see lib.lua) has passed is moved to dead with
-- the last error "expired: ...", counted in "expired" and "dead"; its
-- attempts are unchanged (it never started).

local k = int_arg(ARGV[1], 1, 1000)
local lease = int_arg(ARGV[2], 1, MAX_DELAY_MS)
if not k or not lease or #ARGV ~= 2 then
  return invalid('claim expects 1 to 1000 jobs and a lease of 1 ms to ten years')
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
local atts = redis.call('HMGET', K_ATT, unpack(ids))
local topic_max = topic_defaults()
local first = reserve_tokens(#ids, now_us)

local out, counts, leases, parked, gone = { now_us, topic_max }, {}, {}, {}, {}
local expired = {}
for i, id in ipairs(ids) do
  local rec = recs[i]
  -- A job whose expiry deadline has passed goes to dead, never handed out.
  local ok, r = false, nil
  if rec then ok, r = claimable(rec, now) end
  if r then
    r.err = 'expired: could not start by its deadline, ' .. (now - r.deadline)
      .. ' ms ago (' .. (now - r.due) .. ' ms after its due time)'
    expired[#expired + 1] = id
    expired[#expired + 1] = encode(r)
    parked[#parked + 1] = now
    parked[#parked + 1] = id
  elseif ok then
    local attempts = att_of(atts[i]) + 1
    local token = first + i
    counts[#counts + 1] = id
    counts[#counts + 1] = string.format('%d:%d', attempts, token)
    leases[#leases + 1] = deadline
    leases[#leases + 1] = id
    local n = #out
    out[n + 1] = id
    out[n + 2] = token
    out[n + 3] = attempts
    out[n + 4] = rec
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
end
if #parked > 0 then
  variadic('ZADD', K_DEAD, parked)
  redis.call('HINCRBY', K_STATS, 'dead', #parked / 2)
end
if #expired > 0 then
  variadic('HSET', K_JOBS, expired)
  redis.call('HINCRBY', K_STATS, 'expired', #expired / 2)
end
variadic('ZREM', K_READY, ids)
if #gone > 0 then
  variadic('HDEL', K_ATT, gone)
  redis.call('HINCRBY', K_STATS, 'orphans', #gone)
end
-- Wake the schedulers when these leases end before every other one: an idle
-- scheduler sleeps towards the earliest deadline it saw at its last tick.
if #leases > 0 and redis.call('ZCOUNT', K_RUNNING, '-inf', deadline) <= #leases / 2 then
  redis.call('PUBLISH', K_POOL, deadline)
end
return out
