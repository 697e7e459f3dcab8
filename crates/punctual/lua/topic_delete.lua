#!lua flags=allow-oom
-- topic_delete: delete one topic's keys (of a partition T#i, or of T itself)
-- when it holds no job, in one atomic step: no job can slip in between the
-- check and the deletion. The global P:topics and P:partitions entries are
-- removed by the caller afterwards (Queue::delete_topic), never here.
-- KEYS: the nine topic keys, optionally followed by P:{T}:fired (the
-- occurrences of schedules fired into this topic or partition), deleted
-- with them. ARGV: none.
-- Returns the number of jobs held (pool + ready + running + dead, plus
-- records in no set); 0 means every one of the keys was deleted, anything
-- else that nothing was written. (The schedules themselves, P:{T}:schedules
-- and :schedules:last of the topic, are deleted by the caller, which holds
-- the firers' lock meanwhile.)
-- include: args
-- include: cold

if #ARGV ~= 0 then return invalid('topic_delete takes no arguments') end
local held = redis.call('ZCARD', K_POOL) + redis.call('ZCARD', K_READY)
  + redis.call('ZCARD', K_RUNNING) + redis.call('ZCARD', K_DEAD)
local records = redis.call('HLEN', K_JOBS)
if held > 0 then return held end
if records > 0 then return records end
-- A topic with groups: its group indexes (only stale entries are left, and
-- only groups in P:{T}:groups, or held back in P:{T}:gwait, have a
-- non-empty index) and the groups set.
if redis.call('HGET', K_META, 'groups') == '1' then
  local keys = { KEY_BASE .. 'g:', KEY_BASE .. 'groups' }
  for _, set in ipairs({ 'groups', 'gwait' }) do
    for _, grp in ipairs(redis.call('ZRANGE', KEY_BASE .. set, 0, -1)) do keys[#keys + 1] = KEY_BASE .. 'g:' .. grp end
  end
  local i = 1
  while i <= #keys do
    local j = math.min(i + 999, #keys)
    redis.call('DEL', unpack(keys, i, j))
    i = j + 1
  end
end
-- P:{T}:retried: no job is left, so no id of it is either.
if (tonumber(redis.call('HGET', K_META, 'retried_n')) or 0) > 0 then redis.call('DEL', K_RETRIED) end
-- The cold pool's buckets (PROTOCOL.md "The cold pool"): only stale
-- entries are left, since no record is.
local buckets = redis.call('ZRANGE', K_COLD, 0, -1)
for i = 1, #buckets do buckets[i] = KEY_BASE .. 'c:' .. buckets[i] end
buckets[#buckets + 1] = K_COLD
local i = 1
while i <= #buckets do
  local j = math.min(i + 999, #buckets)
  redis.call('DEL', unpack(buckets, i, j))
  i = j + 1
end
-- Group limits and their state (PROTOCOL.md "Group limits").
redis.call('DEL', KEY_BASE .. 'gwait', KEY_BASE .. 'glimits', KEY_BASE .. 'grunning', KEY_BASE .. 'gbucket')
redis.call('DEL', K_POOL, K_READY, K_RUNNING, K_DEAD, K_JOBS, K_META, K_STATS, K_SEQ, K_ATT)
if K_FIRED then redis.call('DEL', K_FIRED) end
return 0
