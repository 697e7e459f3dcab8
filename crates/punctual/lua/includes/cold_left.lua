-- cold_left: a cold job left the cold pool other than by tick.

-- A cold job left the cold pool other than by tick's move (cancel,
-- reschedule, replace, unfire): its list entry stays, stale.
local function cold_left(n)
  redis.call('HINCRBY', K_META, 'cold_n', -n)
end
