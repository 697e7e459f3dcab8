#!lua
-- history snapshot: offers a copy of a topic's counters as the snapshot of
-- the current minute by Redis's clock; the first offer of a minute wins.
-- Schedulers call it once a minute per topic (or partition). It does not
-- take the nine topic keys, and no include is inserted.
-- KEYS[1] P:{T}:stats          HASH counters (read)
-- KEYS[2] P:{T}:hist:<M>       HASH the snapshot of minute M (written)
-- ARGV[1] M, the epoch minute (ms / 60000) KEYS[2] names
-- ARGV[2] TTL of the snapshot, ms (punctual: 7 days)
-- Returns {written, current minute, ms until the next minute}: written is
-- 1 (this offer is the snapshot), 0 (the minute had one already) or -1 (M
-- is not the current minute: nothing written; call again with the minute
-- returned).
-- The snapshot holds every counter of KEYS[1] and `at`, Redis's clock in
-- ms when it was taken.
local ttl = #ARGV == 2 and string.match(ARGV[2], '^%d+$') and #ARGV[2] <= 15 and tonumber(ARGV[2])
if not ttl or ttl < 1 then
  return redis.error_reply('PUNCTUAL_INVALID expected the minute and a TTL in ms')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)
local next_ms = (minute + 1) * 60000 - now
if string.format('%d', minute) ~= ARGV[1] then return { -1, minute, next_ms } end
local base = string.match(KEYS[1], '^(.+:{[^{}]+}:)stats$')
if not base or KEYS[2] ~= base .. 'hist:' .. ARGV[1] then
  return redis.error_reply('PUNCTUAL_INVALID expected P:{T}:stats and P:{T}:hist:<minute> of one topic')
end
if redis.call('EXISTS', KEYS[2]) == 1 then return { 0, minute, next_ms } end
local c = redis.call('HGETALL', KEYS[1])
redis.call('HSET', KEYS[2], 'at', now, unpack(c))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return { 1, minute, next_ms }
