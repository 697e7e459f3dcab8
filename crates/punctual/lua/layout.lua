#!lua
-- layout: part of changing a topic's partition count (Queue::set_partitions).
-- Writes the new count into this physical topic's meta ("partitions"), so an
-- enqueue routed with another count is refused (see enqueue), and, with
-- "check", does so only when the physical topic holds no job, in the same
-- atomic step: no job can slip in between the check and the change.
-- KEYS: the nine topic keys (of a partition T#i, or of T itself).
-- ARGV[1] the count (1..1024), ARGV[2] "check" or "set".
-- Returns the number of jobs held (pool, with the cold pool's, + ready +
-- running + dead; with "check", at least the number of records); with
-- "check", anything but 0 means nothing was written.
-- include: args
-- include: cold_count

local k = int_arg(ARGV[1], 1, 1024)
if not k or (ARGV[2] ~= 'check' and ARGV[2] ~= 'set') or #ARGV ~= 2 then
  return invalid('layout expects a partition count of 1 to 1024 and "check" or "set"')
end
local held = redis.call('ZCARD', K_POOL) + redis.call('ZCARD', K_READY)
  + redis.call('ZCARD', K_RUNNING) + redis.call('ZCARD', K_DEAD)
  + cold_count(redis.call('HGET', K_META, 'cold_n'))
-- Records count too: a cold job is in no set, and so is an orphan.
if ARGV[2] == 'check' then
  held = math.max(held, redis.call('HLEN', K_JOBS))
  if held > 0 then return held end
end
redis.call('HSET', K_META, 'partitions', k)
return held
