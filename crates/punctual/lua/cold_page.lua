#!lua flags=no-writes
-- cold_page: a page of one cold bucket's live jobs (PROTOCOL.md "The cold
-- pool"), for listings.
-- KEYS: the nine topic keys. ARGV[1] the bucket's start (epoch ms, a
-- multiple of 60000), ARGV[2] offset, ARGV[3] count (1..1000), ARGV[4] id
-- prefix (may be empty).
-- Reads LRANGE P:{T}:c:<start> offset offset+count-1 and returns
--   {next offset (-1: the list ends within this page), id, due ms, id, due ms, ...}
-- for the live cold jobs among those entries: the id has a record due in
-- [start, start + 60000) and is in none of pool, ready, running and dead
-- (the move's test), and starts with the prefix. Each id once per call;
-- stale entries (a cancelled or moved job, a duplicate) are skipped.
-- include: args
-- include: record
-- include: cold

local start, offset, count = int_arg(ARGV[1], 0, MAX_SAFE), int_arg(ARGV[2], 0, MAX_SAFE), int_arg(ARGV[3], 1, 1000)
if not start or not offset or not count or #ARGV ~= 4 or start % COLD_BUCKET ~= 0 then
  return invalid('cold page expects a bucket start (a multiple of 60000), an offset, a count of 1 to 1000 and an id prefix')
end
local key = KEY_BASE .. 'c:' .. start
local prefix = ARGV[4]
local entries = redis.call('LRANGE', key, offset, offset + count - 1)
local out = { -1 }
if offset + count < redis.call('LLEN', key) then out[1] = offset + count end
local seen = {}
for _, id in ipairs(entries) do
  if not seen[id] and string.sub(id, 1, #prefix) == prefix then
    seen[id] = true
    local r = decode(redis.call('HGET', K_JOBS, id))
    if r and r.due >= start and r.due < start + COLD_BUCKET
      and not redis.call('ZSCORE', K_POOL, id) and not redis.call('ZSCORE', K_READY, id)
      and not redis.call('ZSCORE', K_RUNNING, id) and not redis.call('ZSCORE', K_DEAD, id) then
      out[#out + 1] = id
      out[#out + 1] = r.due
    end
  end
end
return out
