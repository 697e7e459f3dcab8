#!lua flags=allow-oom
-- fail: the attempt failed. Retry after a backoff, or move to dead when the
-- failure is permanent or the attempts are used up. Fenced like ack.
-- KEYS: the nine topic keys.
-- ARGV[1] id, ARGV[2] token, ARGV[3] error text (kept as the last error),
-- ARGV[4] retry delay in ms ("" = the backoff ladder), ARGV[5] the kind:
-- "0" a failure (retry or dead), "1" permanent (dead), "2" expired (dead,
-- counted in "expired" too: the job's expiry passed while its worker held
-- it unstarted), "3" handed back (the worker never started it: back to
-- ready at its due time, the attempt the claim counted taken back, no
-- error kept).
-- Returns {"retry", due ms} | {"dead", time ms} | {"back", due ms} |
-- {"stale", 0}.
-- Publishes on the ready channel when it frees a slot of a topic at its
-- max_running (or of a group at its own, see release_groups).
-- include: args
-- include: clock
-- include: record
-- include: encode
-- include: att_of
-- include: token_str
-- include: is_live_att
-- include: ended_att
-- include: retry
-- include: at_max_running
-- include: earliest
-- include: add_retried
-- include: cold_place
-- include: index_ready
-- include: release_groups

local id, token, err = ARGV[1], int_arg(ARGV[2], 0, MAX_SAFE), ARGV[3]
local delay = ARGV[4]
local expired, back = ARGV[5] == '2', ARGV[5] == '3'
local permanent = ARGV[5] == '1' or expired
if #ARGV ~= 5 or not token or (delay ~= '' and not int_arg(delay, 0, MAX_SAFE))
  or (ARGV[5] ~= '0' and ARGV[5] ~= '1' and ARGV[5] ~= '2' and ARGV[5] ~= '3') then
  return invalid('fail expects an id, a token, an error, a retry delay in ms or "", and a kind (0 failed, 1 permanent, 2 expired, 3 handed back)')
end
if #err > 4096 then err = string.sub(err, -4096) end

if not redis.call('ZSCORE', K_RUNNING, id) then return { 'stale', 0 } end
local att = redis.call('HGET', K_ATT, id)
if token_str(att) ~= ARGV[2] then return { 'stale', 0 } end
local attempts = att_of(att)
local now, up = clock()
local rec = redis.call('HGET', K_JOBS, id)
local r = decode(rec)
local topic_max, topic_backoff = topic_defaults()
-- The retry's due time, decided before any write: a retry placed cold
-- writes the cold pool's keys first (cold.lua's cold_place).
local retry, wait, to_cold = r and not permanent and not back and attempts < max_attempts(r, topic_max), nil, false
if r and back then
  -- Handed back unstarted: the claim's attempt did not happen. Its
  -- attempts entry goes back to the one before (none before the first),
  -- kept, like a retry's, in P:{T}:retried while it waits.
  if attempts > 1 then
    add_retried({ id })
    redis.call('HSET', K_ATT, id, (attempts - 1) .. ':' .. ARGV[2])
  else
    redis.call('HDEL', K_ATT, id)
  end
elseif retry then
  if delay == '' then wait = backoff_ms(r, topic_backoff, attempts) else wait = tonumber(delay) end
  if wait > MAX_DELAY_MS then wait = MAX_DELAY_MS end
  -- A delay counts from the rounded-up ms: never before now + wait.
  if wait == 0 then r.due = now else r.due = up + wait end
  to_cold = wait > 0 and cold_place(id, r.due, now)
  -- It will wait with its attempts entry: the next claim reads it. (Before
  -- any other write: keys.lua's K_RETRIED.)
  add_retried({ id })
  if to_cold then cold_flush() end
end
-- The job leaves running on every path below: its entry loses the live mark
-- (see is_live_att), so this token can no longer ack it.
if r and back then
  -- (Written above.)
elseif is_live_att(att) then redis.call('HSET', K_ATT, id, ended_att(att)) end
-- This job leaves running on every path below: wake a worker waiting for
-- a slot when the topic is at its max_running.
local full, glim = at_max_running()
if full then redis.call('PUBLISH', K_READY, '') end
release_groups({ id }, glim, { rec })
if not r then
  if rec then
    -- A record punctual cannot read: park it in dead for a person to inspect.
    redis.call('ZADD', K_DEAD, now, id)
    redis.call('ZREM', K_RUNNING, id)
    redis.call('HINCRBY', K_STATS, 'dead', 1)
    return { 'dead', now }
  end
  -- A lease without a record: drop the lease, there is nothing to retry.
  redis.call('ZREM', K_RUNNING, id)
  redis.call('HDEL', K_ATT, id)
  redis.call('HINCRBY', K_STATS, 'orphans', 1)
  return { 'stale', 0 }
end

if back then
  redis.call('ZADD', K_READY, r.due, id)
  index_ready({ r.due, id })
  redis.call('PUBLISH', K_READY, '')
  redis.call('ZREM', K_RUNNING, id)
  return { 'back', r.due }
end
r.err = err
if not retry then
  redis.call('ZADD', K_DEAD, now, id)
  redis.call('HSET', K_JOBS, id, encode(r))
  redis.call('ZREM', K_RUNNING, id)
  redis.call('HINCRBY', K_STATS, 'dead', 1)
  if expired then redis.call('HINCRBY', K_STATS, 'expired', 1) end
  return { 'dead', now }
end
redis.call('HSET', K_JOBS, id, encode(r))
if wait == 0 then
  redis.call('ZADD', K_READY, r.due, id)
  index_ready({ r.due, id })
  redis.call('PUBLISH', K_READY, '')
elseif not to_cold then
  local old_min = earliest(K_POOL)
  redis.call('ZADD', K_POOL, r.due, id)
  if not old_min or r.due < old_min then redis.call('PUBLISH', K_POOL, r.due) end
end
redis.call('ZREM', K_RUNNING, id)
redis.call('HINCRBY', K_STATS, 'retried', 1)
return { 'retry', r.due }
