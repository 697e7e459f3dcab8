-- reserve_tokens: claim's lease tokens.

-- Reserves n lease tokens and returns the value just before the first. They
-- follow the topic's seq counter and never fall below Redis's clock in
-- microseconds, so a restart that lost the latest writes (an RDB snapshot,
-- AOF everysec, a failover to a replica that lagged) cannot hand a token out
-- again: the clock moved on meanwhile. They stay below 2^53 until 2255.
-- One SET ... GET in the common case (seq behind the clock); a second SET
-- when seq is ahead (a burst of more than one token per microsecond).
local function reserve_tokens(n, now_us)
  local old = tonumber(redis.call('SET', K_SEQ, string.format('%d', now_us + n), 'GET')) or 0
  if old <= now_us then return now_us end
  redis.call('SET', K_SEQ, string.format('%d', old + n))
  return old
end
