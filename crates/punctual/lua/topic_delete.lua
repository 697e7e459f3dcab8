#!lua flags=allow-oom
-- topic_delete: delete one topic's keys (of a partition T#i, or of T itself)
-- when it holds no job, in one atomic step: no job can slip in between the
-- check and the deletion. The global P:topics and P:partitions entries are
-- removed by the caller afterwards (Queue::delete_topic), never here.
-- KEYS: the nine topic keys. ARGV: none.
-- Returns the number of jobs held (pool + ready + running + dead, plus
-- records in no set); 0 means every one of the nine keys was deleted,
-- anything else that nothing was written.

if #ARGV ~= 0 then return invalid('topic_delete takes no arguments') end
local held = redis.call('ZCARD', K_POOL) + redis.call('ZCARD', K_READY)
  + redis.call('ZCARD', K_RUNNING) + redis.call('ZCARD', K_DEAD)
local records = redis.call('HLEN', K_JOBS)
if held > 0 then return held end
if records > 0 then return records end
redis.call('DEL', K_POOL, K_READY, K_RUNNING, K_DEAD, K_JOBS, K_META, K_STATS, K_SEQ, K_ATT)
return 0
