#!lua flags=allow-oom
-- dead_purge: delete dead jobs for good.
-- KEYS: the nine topic keys.
-- ARGV[1] "ids" then the ids (1..1000), or ARGV[1] "oldest", ARGV[2] n (1..1000).
-- Returns the number purged (ids not in dead are skipped). To purge all, call
-- with "oldest" until it returns 0.
-- include: args
-- include: bulk

local mode = ARGV[1]
local ids
if mode == 'ids' then
  ids = {}
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
elseif mode == 'oldest' then
  local n = int_arg(ARGV[2], 1, 1000)
  if not n or #ARGV ~= 2 then return invalid('purge expects 1 to 1000 jobs') end
  ids = redis.call('ZRANGE', K_DEAD, 0, n - 1)
  if #ids == 0 then return 0 end
else
  return invalid('purge expects "ids" or "oldest"')
end
if #ids < 1 or #ids > 1000 then return invalid('purge expects 1 to 1000 jobs') end
local gone = {}
local scores = redis.call('ZMSCORE', K_DEAD, unpack(ids))
for i, id in ipairs(ids) do
  if scores[i] then gone[#gone + 1] = id end
end
if #gone == 0 then return 0 end
variadic('ZREM', K_DEAD, gone)
variadic('HDEL', K_JOBS, gone)
variadic('HDEL', K_ATT, gone)
redis.call('HINCRBY', K_STATS, 'purged', #gone)
return #gone
