-- cold: the cold pool's keys and constants.

-- The cold pool (PROTOCOL.md "The cold pool"): a job due at least
-- `cold_after` ms (meta; default 10 minutes, 0: none) after its placement,
-- and not before meta `cold_at`, waits in the LIST of its due minute,
-- P:{T}:c:<start>, indexed by the ZSET P:{T}:cold, instead of in pool; tick
-- moves each list into pool `cold_after` before the list's start. A job in
-- no set whose record is due at or after `cold_at` is such a cold job.
-- Only tick writes cold_at first: a topic whose scheduler predates the cold
-- pool never gets a cold job, which its tick would never move.
-- The lists and the index are not among the KEYS: on a Redis Cluster
-- whose slot is migrating, touching one that is not on this node fails the
-- script, so every script writes them before anything else.
local COLD_BUCKET = 60000
local COLD_AFTER = 600000
local K_COLD = KEY_BASE .. 'cold'
