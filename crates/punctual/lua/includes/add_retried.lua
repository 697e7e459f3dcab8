-- add_retried: adds ids to P:{T}:retried (K_RETRIED, in keys.lua).
-- include: bulk

-- Adds ids to P:{T}:retried (K_RETRIED), counting the new members in meta
-- retried_n. Called before a script's other writes.
local function add_retried(ids)
  local added = variadic('SADD', K_RETRIED, ids)
  if added > 0 then redis.call('HINCRBY', K_META, 'retried_n', added) end
end
