-- at_max_running: whether the topic is at its max_running, read by the scripts that
-- take jobs out of running.
-- include: args
-- include: meta

-- Whether the topic is at its max_running (meta), read before a script
-- takes jobs out of running: then it publishes on the ready channel after,
-- so a worker waiting for a free slot claims at once. False (and no
-- ZCARD) when the topic has no max_running.
-- Also returns whether the topic has group limits (meta `glimited` = 1),
-- for release_groups, from the same HMGET.
local function at_max_running()
  local m = meta()
  local mr = int_arg(m.max_running, 1, MAX_SAFE)
  return mr ~= nil and redis.call('ZCARD', K_RUNNING) >= mr, m.glimited == '1'
end
