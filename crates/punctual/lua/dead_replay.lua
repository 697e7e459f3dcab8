#!lua
-- dead_replay: move dead jobs back to ready (due now) or, with due times, to
-- pool (due later), with attempts reset to 0 (the last error is kept until
-- the next failure). A job with an expiry deadline (option e) has it moved
-- by as much as its due time moves, so it gets its window again.
-- KEYS: the nine topic keys.
-- ARGV[1] "ids" then the ids (1..1000), due now;
-- or ARGV[1] "oldest", ARGV[2] n (1..1000), due now;
-- or ARGV[1] "due" then pairs of an id and a when ("d<ms>" delay from now or
-- "a<ms>" epoch ms, as in enqueue), 1..1000 pairs: each job is due then (a
-- time not in the future: due now, in ready). Every when is validated before
-- anything is written.
-- Returns the ids replayed (ids not in dead are skipped).
-- include: args
-- include: clock
-- include: b36
-- include: record
-- include: encode
-- include: due_of
-- include: earliest
-- include: bulk
-- include: cold_place
-- include: index_ready

local mode = ARGV[1]
local ids
local dues = {}
local now, up = clock()
if mode == 'ids' then
  ids = {}
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
elseif mode == 'oldest' then
  local n = int_arg(ARGV[2], 1, 1000)
  if not n or #ARGV ~= 2 then return invalid('replay expects 1 to 1000 jobs') end
  ids = redis.call('ZRANGE', K_DEAD, 0, n - 1)
  if #ids == 0 then return {} end
elseif mode == 'due' then
  if #ARGV % 2 ~= 1 then return invalid('replay "due" expects pairs of an id and a due time') end
  ids = {}
  for i = 2, #ARGV, 2 do
    local due, why = due_of(ARGV[i + 1], now, up)
    if not due then return invalid(why) end
    ids[#ids + 1] = ARGV[i]
    dues[#ids] = due
  end
else
  return invalid('replay expects "ids", "oldest" or "due"')
end
if #ids < 1 or #ids > 1000 then return invalid('replay expects 1 to 1000 jobs') end
local out, records, to_ready, to_pool = {}, {}, {}, {}
local pool_min
local seen = {}
for i, id in ipairs(ids) do
  -- An id given twice is replayed once, at its first due time.
  if not seen[id] and redis.call('ZSCORE', K_DEAD, id) then
    seen[id] = true
    local r = decode(redis.call('HGET', K_JOBS, id))
    if r then
      local due = dues[i] or now
      -- An expiry deadline moves with the due time, as reschedule moves it:
      -- the job gets a fresh window of the length it had (deadline minus
      -- the due time in its record), else it would expire again at once.
      if r.deadline then
        r.mfield = string.gsub(r.mfield, ';e[^;]*', ';e' .. b36(r.deadline + due - r.due), 1)
      end
      r.due = due
      records[#records + 1] = id
      records[#records + 1] = encode(r)
      if due <= now then
        to_ready[#to_ready + 1] = due
        to_ready[#to_ready + 1] = id
      elseif not cold_place(id, due, now) then
        to_pool[#to_pool + 1] = due
        to_pool[#to_pool + 1] = id
        if not pool_min or due < pool_min then pool_min = due end
      end
      out[#out + 1] = id
    end
  end
end
if #out > 0 then
  -- The cold pool's keys first (cold.lua's cold_place).
  cold_flush()
  variadic('HSET', K_JOBS, records)
  local old_min
  if pool_min then old_min = earliest(K_POOL) end
  if #to_ready > 0 then
    variadic('ZADD', K_READY, to_ready)
    index_ready(to_ready)
  end
  if #to_pool > 0 then variadic('ZADD', K_POOL, to_pool) end
  variadic('ZREM', K_DEAD, out)
  -- Attempts start again from 0 (no token goes to two claims, so none is kept).
  variadic('HDEL', K_ATT, out)
  redis.call('HINCRBY', K_STATS, 'replayed', #out)
  if #to_ready > 0 then redis.call('PUBLISH', K_READY, '') end
  if pool_min and (not old_min or pool_min < old_min) then
    redis.call('PUBLISH', K_POOL, pool_min)
  end
end
return out
