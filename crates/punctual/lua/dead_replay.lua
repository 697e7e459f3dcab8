#!lua
-- dead_replay: move dead jobs back to ready, due now, with attempts reset to 0
-- (the last error is kept until the next failure).
-- KEYS: the nine topic keys.
-- ARGV[1] "ids" then the ids (1..1000), or ARGV[1] "oldest", ARGV[2] n (1..1000).
-- Returns the ids replayed (ids not in dead are skipped).

local mode = ARGV[1]
local ids
if mode == 'ids' then
  ids = {}
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
elseif mode == 'oldest' then
  local n = int_arg(ARGV[2], 1, 1000)
  if not n or #ARGV ~= 2 then return invalid('replay expects 1 to 1000 jobs') end
  ids = redis.call('ZRANGE', K_DEAD, 0, n - 1)
  if #ids == 0 then return {} end
else
  return invalid('replay expects "ids" or "oldest"')
end
if #ids < 1 or #ids > 1000 then return invalid('replay expects 1 to 1000 jobs') end
local now = now_ms()
local out, records, moves = {}, {}, {}
for _, id in ipairs(ids) do
  if redis.call('ZSCORE', K_DEAD, id) then
    local r = decode(redis.call('HGET', K_JOBS, id))
    if r then
      r.due = now
      records[#records + 1] = id
      records[#records + 1] = encode(r)
      moves[#moves + 1] = now
      moves[#moves + 1] = id
      out[#out + 1] = id
    end
  end
end
if #out > 0 then
  variadic('HSET', K_JOBS, records)
  variadic('ZADD', K_READY, moves)
  variadic('ZREM', K_DEAD, out)
  -- Attempts start again from 0 (tokens never repeat, so none is kept).
  variadic('HDEL', K_ATT, out)
  redis.call('HINCRBY', K_STATS, 'replayed', #out)
  redis.call('PUBLISH', K_READY, '')
end
return out
