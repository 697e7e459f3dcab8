#!lua flags=no-writes
-- stats: sizes and counters of a topic.
-- KEYS: the nine topic keys.
-- Returns {pool (with the cold pool's jobs), ready, running, dead, paused (0/1),
--          ms until the next due job (-1: pool empty; when only the cold
--          pool holds jobs, until its first bucket's start, at most a
--          minute early),
--          ms the oldest ready job has waited (-1: ready empty),
--          counters as a flat array name, value, ...,
--          jobs in pool whose due time has passed (with the entries of
--          cold buckets wholly past due),
--          ms the oldest of them is past due (-1: none; for a cold
--          bucket, a lower bound),
--          the limits: rate ("n/period ms" or ""), burst (0: the
--          default), max running (0: none), and which limit holds ready jobs back now
--          ("rate", "max_running" or "")}.
-- On a healthy topic the last two are 0 and -1 within a tick: a growing
-- figure means no scheduler runs, or it cannot keep up.
-- include: args
-- include: now_ms
-- include: rate
-- include: earliest
-- include: cold
-- include: cold_count

local now = now_ms()
local next_due, oldest, overdue_age = -1, -1, -1
local e = earliest(K_POOL)
if e then next_due = math.max(0, e - now) end
if e and e < now then overdue_age = now - e end
local cold = redis.call('ZRANGE', K_COLD, 0, 0)[1]
if not e and cold then next_due = math.max(0, tonumber(cold) - now) end
local overdue = 0
if overdue_age >= 0 then overdue = redis.call('ZCOUNT', K_POOL, '-inf', '(' .. now) end
-- Cold buckets wholly past due: a scheduler moves each about cold_after
-- before its start, so these mean none ran. Their entries count as overdue
-- (stale ones of cancelled jobs too), past due by at least now minus the
-- bucket's end.
for _, b in ipairs(redis.call('ZRANGE', K_COLD, '-inf', now - COLD_BUCKET, 'BYSCORE', 'LIMIT', 0, 100)) do
  overdue = overdue + redis.call('LLEN', KEY_BASE .. 'c:' .. b)
  overdue_age = math.max(overdue_age, now - tonumber(b) - COLD_BUCKET)
end
e = earliest(K_READY)
if e then oldest = math.max(0, now - e) end
local m = redis.call('HMGET', K_META, 'paused', 'rate', 'burst', 'max_running', 'bucket', 'cold_n')
local paused = 0
if m[1] == '1' then paused = 1 end
local ready = redis.call('ZCARD', K_READY)
local running = redis.call('ZCARD', K_RUNNING)
local mr = int_arg(m[4], 1, MAX_SAFE)
local rn, rp = rate_of(m[2])
local burst = 0
if rn then burst = burst_of(m[3], rn, rp) end
local limited = ''
if ready > 0 then
  if mr and running >= mr then
    limited = 'max_running'
  elseif rn and bucket_tokens(m[5], burst, rn, rp, now) < 1 then
    limited = 'rate'
  end
end
local rate = ''
if rn then rate = m[2] end
return {
  redis.call('ZCARD', K_POOL) + cold_count(m[6]), ready, running, redis.call('ZCARD', K_DEAD),
  paused, next_due, oldest, redis.call('HGETALL', K_STATS),
  overdue, overdue_age, rate, int_arg(m[3], 1, 1000000) or 0, mr or 0, limited,
}
