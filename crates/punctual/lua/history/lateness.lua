#!lua
-- history lateness: adds a worker's lateness aggregate of one minute to
-- that minute's totals. Workers call it every few seconds per topic (or
-- partition) and minute they measured. It does not take the nine topic
-- keys, and lib.lua is not inserted.
-- KEYS[1] P:{T}:late:<M>   HASH count, sum_us, max_us and bucket counts
-- ARGV[1] TTL of the key, ms (punctual: 7 days)
-- ARGV[2] the largest lateness of the aggregate, µs
-- ARGV[3..] field, increment pairs (count, sum_us, le_1ms ... le_inf)
-- Returns 1.
if not string.match(KEYS[1], '^.+:{[^{}]+}:late:%d+$') then
  return redis.error_reply('PUNCTUAL_INVALID expected the key P:{T}:late:<minute>')
end
for i = 3, #ARGV - 1, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
local max = tonumber(redis.call('HGET', KEYS[1], 'max_us') or '-1')
if tonumber(ARGV[2]) > max then redis.call('HSET', KEYS[1], 'max_us', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
