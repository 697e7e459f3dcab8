#!lua flags=no-writes
-- stats: sizes and counters of a topic.
-- KEYS: the nine topic keys.
-- Returns {pool, ready, running, dead, paused (0/1),
--          ms until the next due job (-1: pool empty),
--          ms the oldest ready job has waited (-1: ready empty),
--          counters as a flat array name, value, ...,
--          jobs in pool whose due time has passed,
--          ms the oldest of them is past due (-1: none)}.
-- On a healthy topic the last two are 0 and -1 within a tick: a growing
-- figure means no scheduler runs, or it cannot keep up.

local now = now_ms()
local next_due, oldest, overdue_age = -1, -1, -1
local e = earliest(K_POOL)
if e then next_due = math.max(0, e - now) end
if e and e < now then overdue_age = now - e end
local overdue = 0
if overdue_age >= 0 then overdue = redis.call('ZCOUNT', K_POOL, '-inf', '(' .. now) end
e = earliest(K_READY)
if e then oldest = math.max(0, now - e) end
local paused = 0
if redis.call('HGET', K_META, 'paused') == '1' then paused = 1 end
return {
  redis.call('ZCARD', K_POOL), redis.call('ZCARD', K_READY),
  redis.call('ZCARD', K_RUNNING), redis.call('ZCARD', K_DEAD),
  paused, next_due, oldest, redis.call('HGETALL', K_STATS),
  overdue, overdue_age,
}
