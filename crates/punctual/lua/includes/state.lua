-- state: which set holds a job.
-- include: record
-- include: cold_settings
-- include: cold_due

local STATE_KEY = { pool = K_POOL, ready = K_READY, running = K_RUNNING, dead = K_DEAD }

-- Which set holds `id`, and its score there: pool, ready, running, dead,
-- or 'cold' (a cold job, in the pool: its record's due time), else nil.
local function state_of(id)
  local s = redis.call('ZSCORE', K_POOL, id)
  if s then return 'pool', tonumber(s) end
  s = redis.call('ZSCORE', K_READY, id)
  if s then return 'ready', tonumber(s) end
  s = redis.call('ZSCORE', K_RUNNING, id)
  if s then return 'running', tonumber(s) end
  s = redis.call('ZSCORE', K_DEAD, id)
  if s then return 'dead', tonumber(s) end
  if cold_at() then
    local r = decode(redis.call('HGET', K_JOBS, id))
    if r and is_cold_due(r.due) then return 'cold', r.due end
  end
  return nil
end
