#!lua
-- group_limits: set the limits every group of a topic has by default, or
-- one group's own limits (PROTOCOL.md "Group limits").
-- KEYS: the nine topic keys.
-- ARGV[1] what: "default" (meta group_rate, group_burst, group_max_running),
-- "group" (P:{T}:glimits, replacing the defaults for ARGV[2]) or "clear"
-- (ARGV[2] goes back to the defaults); ARGV[2] the group ("" with
-- "default"; "" is also the group of jobs without one); ARGV[3] rate
-- ("<n>/<period ms>" or "": none), ARGV[4] burst ("" : a tenth of a
-- second's worth, at least 1), ARGV[5] max_running ("": none).
-- Keeps meta `glimited` = 1 while any group limit is set. Switching it on
-- counts the running jobs of each group (O(running), once); switching it off
-- drops the counts and buckets. Every group held back (gwait) returns to
-- P:{T}:groups, so the next claim judges it by the new limits, and the ready
-- channel is published. Returns 1 when the topic has group limits, else 0.
-- include: args
-- include: rate
-- include: group_count

if #ARGV ~= 5 then return invalid('group_limits expects what, a group, a rate, a burst and a max running') end
local what, grp, rate, burst, max = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if (rate ~= '' and not rate_of(rate)) or (burst ~= '' and (rate == '' or not int_arg(burst, 1, 1000000)))
  or (max ~= '' and not int_arg(max, 1, 1000000)) then
  return invalid('group_limits expects a rate n/ms (1..1000000 per 1 ms to a day), a burst of 1..1000000 '
    .. 'with a rate, and a max running of 1..1000000, or "" for none')
end
local K_GLIMITS, K_GRUNNING = KEY_BASE .. 'glimits', KEY_BASE .. 'grunning'
local K_GROUPS, K_GWAIT = KEY_BASE .. 'groups', KEY_BASE .. 'gwait'
if what == 'default' and grp == '' then
  local set, del = {}, {}
  for field, v in pairs({ group_rate = rate, group_burst = burst, group_max_running = max }) do
    if v == '' then del[#del + 1] = field else set[#set + 1] = field; set[#set + 1] = v end
  end
  if #set > 0 then redis.call('HSET', K_META, unpack(set)) end
  if #del > 0 then redis.call('HDEL', K_META, unpack(del)) end
elseif what == 'group' then
  redis.call('HSET', K_GLIMITS, grp, rate .. ';' .. burst .. ';' .. max)
elseif what == 'clear' then
  redis.call('HDEL', K_GLIMITS, grp)
else
  return invalid('group_limits expects "default" (with group ""), "group" or "clear"')
end

local d = redis.call('HMGET', K_META, 'group_rate', 'group_max_running', 'glimited')
local on = d[1] ~= false or d[2] ~= false or redis.call('HLEN', K_GLIMITS) > 0
local was = d[3] == '1'
if on and not was then
  -- Count each group's running jobs, from their records.
  redis.call('DEL', K_GRUNNING)
  local total, i = redis.call('ZCARD', K_RUNNING), 0
  local count, names = {}, {}
  while i < total do
    local ids = redis.call('ZRANGE', K_RUNNING, i, i + 999)
    count_groups(redis.call('HMGET', K_JOBS, unpack(ids)), count, names)
    i = i + 1000
  end
  for _, g in ipairs(names) do redis.call('HSET', K_GRUNNING, g, count[g]) end
  redis.call('HSET', K_META, 'glimited', '1')
elseif was and not on then
  redis.call('HDEL', K_META, 'glimited')
  redis.call('DEL', K_GRUNNING, KEY_BASE .. 'gbucket')
end
-- Held groups return; the next claim holds them again if it must.
local vt = redis.call('HGET', K_META, 'vtime') or '0'
local held = redis.call('ZRANGE', K_GWAIT, 0, -1)
local i = 1
while i <= #held do
  local j = math.min(i + 999, #held)
  local adds = {}
  for x = i, j do
    adds[#adds + 1] = vt
    adds[#adds + 1] = held[x]
  end
  redis.call('ZADD', K_GROUPS, 'NX', unpack(adds))
  i = j + 1
end
redis.call('DEL', K_GWAIT)
redis.call('PUBLISH', K_READY, '')
if on then return 1 end
return 0
