#!lua flags=allow-oom
-- lib.lua: helpers shared by every punctual script. The parts of it a script
-- uses are inserted after the shebang line of each script (see
-- src/scripts.rs), so each script is one self-contained text; `punctual
-- script NAME` prints the assembled text. A part is a top-level statement,
-- which starts at column 0, with the comment lines just before it: a
-- statement that defines nothing (the KEYS check) is always kept, a `local`
-- one when the script or a kept part mentions one of its names. So every
-- helper is a `local` named where it is used (no forward declarations, no
-- names reached only through a table).
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
--
-- Record (never rewritten by claim, ack or extend): "M:D:G:B:E:" then E bytes
-- of last error, then the payload. M max attempts (decimal, empty: topic
-- default), then the per-job options if any (see opts_of), D due time (ms,
-- base 36), G due - created (ms, base 36), B backoff ladder (ms, comma
-- separated, empty: topic default), E length of the last error (decimal).

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

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Run `cmd key` with `args` in chunks, so no unpack() grows unbounded.
local function variadic(cmd, key, args)
  local n = #args
  local i = 1
  while i <= n do
    local j = i + 3999
    if j > n then j = n end
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

local function invalid(msg)
  return redis.error_reply('PUNCTUAL_INVALID ' .. msg)
end

-- unfire: take back occurrences of a schedule that were fired ahead and are
-- not due yet (pause, rm and a changed schedule call it).
-- KEYS: the nine topic keys and P:{T}:fired (see lib.lua).
-- ARGV: the ids (1 to 1000), each "<name>@<occurrence ms>".
-- Each id still in the pool with a due time after now is removed with its
-- record and attempts, and from P:{T}:fired, so that firing the same
-- occurrence again later is possible. A job that is due, ready, running or
-- dead is left alone (it may run or have run).
-- Returns the number of jobs removed.

if not K_FIRED then return invalid('unfire expects the tenth key, P:{T}:fired') end
if #ARGV < 1 or #ARGV > 1000 then return invalid('unfire expects 1 to 1000 ids') end
local now = now_ms()
local scores = redis.call('ZMSCORE', K_POOL, unpack(ARGV))
local gone = {}
for i, id in ipairs(ARGV) do
  if scores[i] and tonumber(scores[i]) > now then gone[#gone + 1] = id end
end
if #gone == 0 then return 0 end
variadic('ZREM', K_POOL, gone)
variadic('HDEL', K_JOBS, gone)
variadic('HDEL', K_ATT, gone)
variadic('ZREM', K_FIRED, gone)
redis.call('HINCRBY', K_STATS, 'cancelled', #gone)
return #gone
