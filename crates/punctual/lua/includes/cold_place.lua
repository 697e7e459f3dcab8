-- cold_place: placing jobs in the cold pool.
-- include: bulk
-- include: cold
-- include: cold_settings

-- The earliest due time cold_place places cold at `now` (math.huge when
-- none): lets a loop skip the call for near jobs.
local function cold_from(now)
  local w, at = cold_after(), cold_at()
  if w == 0 or not at then return math.huge end
  if at > now + w then return at end
  return now + w
end

-- Jobs placed cold by this call, by bucket start. cold_place collects,
-- cold_flush writes.
local cold_ids = nil

-- Places a job due at `due` (epoch ms) cold when the rule says so, and
-- returns whether it did; the caller puts it into pool otherwise. `from`,
-- when given, is cold_from(now), computed once by a caller that places
-- many jobs (its function calls cost about 2,400 instructions per job).
local function cold_place(id, due, now, from)
  if due < (from or cold_from(now)) then return false end
  local s = due - due % COLD_BUCKET
  if not cold_ids then cold_ids = {} end
  local l = cold_ids[s]
  if not l then
    l = {}
    cold_ids[s] = l
  end
  l[#l + 1] = id
  return true
end

-- Writes what cold_place collected: RPUSH per bucket, the index, cold_n.
-- Called before the script's other writes (see above). A bucket that is
-- new and now the first publishes the time it is to be moved (its start
-- minus cold_after) on the pool channel: a sleeping scheduler plans its
-- tick for the first bucket's move, from its last tick or from this.
-- Returns the number of jobs placed.
local function cold_flush()
  if not cold_ids then return 0 end
  local n, new = 0, {}
  for s, l in pairs(cold_ids) do
    local ss = string.format('%d', s)
    variadic('RPUSH', KEY_BASE .. 'c:' .. ss, l)
    n = n + #l
    if redis.call('ZADD', K_COLD, 'NX', ss, ss) == 1 then new[ss] = s end
  end
  redis.call('HINCRBY', K_META, 'cold_n', n)
  cold_ids = nil
  if next(new) then
    local first = redis.call('ZRANGE', K_COLD, 0, 0)[1]
    if new[first] then
      local w = cold_after()
      if w == 0 then w = COLD_AFTER end
      redis.call('PUBLISH', K_POOL, string.format('%d', new[first] - w))
    end
  end
  return n
end
