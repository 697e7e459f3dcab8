#!lua
-- history lateness: adds a worker's lateness aggregate of one minute to
-- that minute's totals. Workers call it every few seconds per topic (or
-- partition) and minute they measured. It does not take the nine topic
-- keys, and no include is inserted.
-- KEYS[1] P:{T}:late:<M>   HASH count, sum_us, max_us and bucket counts
-- ARGV[1] TTL of the key, ms (punctual: 7 days)
-- ARGV[2] the largest lateness of the aggregate, µs
-- ARGV[3..] field, increment pairs (count, sum_us, le_1ms ... le_inf)
-- Returns 1.
if not string.match(KEYS[1], '^.+:{[^{}]+}:late:%d+$') then
  return redis.error_reply('PUNCTUAL_INVALID expected the key P:{T}:late:<minute>')
end
-- Every argument is checked before the first write.
local function int(v)
  return type(v) == 'string' and string.match(v, '^%d+$') and #v <= 15 and tonumber(v)
end
local fields = {
  count = true, sum_us = true, le_1ms = true, le_10ms = true, le_100ms = true,
  le_1s = true, le_10s = true, le_60s = true, le_inf = true,
}
local ttl, max_arg = int(ARGV[1]), int(ARGV[2])
if not ttl or ttl < 1 or not max_arg or #ARGV % 2 ~= 0 then
  return redis.error_reply('PUNCTUAL_INVALID expected a TTL in ms, the largest lateness in us and field, increment pairs')
end
for i = 3, #ARGV - 1, 2 do
  if not fields[ARGV[i]] or not int(ARGV[i + 1]) then
    return redis.error_reply('PUNCTUAL_INVALID not a lateness field and a whole increment: '
      .. tostring(ARGV[i]) .. ' ' .. tostring(ARGV[i + 1]))
  end
end
for i = 3, #ARGV - 1, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
local max = tonumber(redis.call('HGET', KEYS[1], 'max_us') or '-1')
if max_arg > max then redis.call('HSET', KEYS[1], 'max_us', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
