-- bulk: variadic, the one way the scripts write many entries at once.

-- Bulk writes and the listpack (PROTOCOL.md "Bulk writes"). Redis 7.0 keeps
-- a small hash or sorted set as a listpack and writes a call's fields into
-- it one by one, each with a scan of the listpack, converting it to a
-- hashtable or skiplist only past hash-/zset-max-listpack-entries (128).
-- Measured by callgrind on Redis 7.0.15: HSET of 1,000 new attempts entries
-- into an empty hash costs about 18,300 instructions per entry, 2,200 into
-- a hashtable; ZADD of 100 to 200 members into an empty sorted set 25,000
-- to 26,500 per member, about 4,000 into a skiplist. An argument longer
-- than hash-/zset-max-listpack-value (64 bytes by default) converts the key
-- before the first write. So a write of BULK or more entries carries one
-- such argument and deletes it at once, in the same script: the field ''
-- (never an id) or the member BULK_MEMBER (it holds a control character:
-- never an id). The key stays a hashtable or skiplist until an RDB load
-- re-encodes it. Where it already is one, this costs one entry more and one
-- call. variadic counts the extra entry as new (it is deleted each time).
local BULK = 16
local BULK_MEMBER = '\0' .. string.rep('-', 64)

-- Run `cmd key` with `args` in chunks, so no unpack() grows unbounded.
-- Returns the sum of the integer replies. An HSET or ZADD of BULK entries
-- or more converts the key first (above; its extra entry is not counted);
-- the ZADD's args are plain score, member pairs.
local function variadic(cmd, key, args)
  local n = #args
  local bulk = n >= 2 * BULK and (cmd == 'HSET' or cmd == 'ZADD')
  local i, sum = 1, 0
  if bulk then sum = -1 end
  while i <= n do
    local j = i + 3999
    if j > n then j = n end
    if bulk and i == 1 then
      if cmd == 'HSET' then
        sum = sum + redis.call('HSET', key, '', BULK_MEMBER, unpack(args, i, j))
      else
        sum = sum + redis.call('ZADD', key, '0', BULK_MEMBER, unpack(args, i, j))
      end
    else
      sum = sum + redis.call(cmd, key, unpack(args, i, j))
    end
    i = j + 1
  end
  if bulk then
    if cmd == 'HSET' then
      redis.call('HDEL', key, '')
    else
      redis.call('ZREM', key, BULK_MEMBER)
    end
  end
  return sum
end
