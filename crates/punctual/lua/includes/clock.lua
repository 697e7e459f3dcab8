-- clock: Redis's clock, rounded down and up, and in microseconds.

-- Redis's clock: ms rounded down, ms rounded up, and microseconds. A delay
-- counts from the rounded-up ms, so a job is never due before the instant
-- of the call plus its delay, to the microsecond.
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  local now = s * 1000 + math.floor(us / 1000)
  local up = now
  if us % 1000 ~= 0 then up = now + 1 end
  return now, up, s * 1000000 + us
end
