-- rate: a rate limit's token bucket (the topic's, and each group's).
-- include: args

-- A topic's rate (meta `rate`, "n/period ms"): n and the period, or nil
-- when unset or unreadable (then no rate applies).
local function rate_of(v)
  if not v then return nil end
  local n, p = string.match(v, '^(%d+)/(%d+)$')
  n, p = tonumber(n), tonumber(p)
  if not n or n < 1 or not p or p < 1 or n > 1000000 or p > 86400000 then return nil end
  return n, p
end

-- The bucket size: meta `burst`, else a tenth of a second's worth, at least 1.
local function burst_of(v, n, p)
  return int_arg(v, 1, 1000000) or math.max(1, math.floor(n * 100 / p))
end

-- The tokens in the bucket at `now` (meta `bucket` = "tokens:last refill
-- ms"; a missing or unreadable bucket is full).
local function bucket_tokens(v, burst, n, p, now)
  local tk, last
  if v then tk, last = string.match(v, '^(%d+%.?%d*):(%d+)$') end
  tk, last = tonumber(tk), tonumber(last)
  if not tk or not last then return burst end
  local elapsed = now - last
  if elapsed < 0 then elapsed = 0 end
  return math.min(burst, tk + elapsed * n / p)
end
