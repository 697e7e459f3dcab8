-- drop_retried: removes ids from P:{T}:retried (K_RETRIED, in keys.lua).
-- include: bulk

-- Removes ids from P:{T}:retried, when meta retried_n says it has members
-- (else the set is not touched). Called before a script's other writes.
local function drop_retried(ids)
  if (tonumber(redis.call('HGET', K_META, 'retried_n')) or 0) <= 0 then return end
  local removed = variadic('SREM', K_RETRIED, ids)
  if removed > 0 then redis.call('HINCRBY', K_META, 'retried_n', -removed) end
end
