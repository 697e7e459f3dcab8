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
