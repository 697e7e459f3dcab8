-- due_of: a due time from a "when" argument.
-- include: args

-- Parse a "when": "d<ms>" delay from now, or "a<ms>" absolute epoch ms.
-- `now` and `up` are the clock rounded down and up (see clock()).
-- A delay counts from `up`, so the job is never due before the instant of
-- the call plus the delay. Returns the due time, or nil and a reason.
local function due_of(when, now, up)
  local kind, v = string.match(when, '^([da])(%d+)$')
  if not kind or #v > 16 then return nil, 'malformed due time "' .. when .. '"' end
  v = tonumber(v)
  if kind == 'd' then
    if v == 0 then return now end
    if v > MAX_DELAY_MS then return nil, 'due time more than ten years ahead' end
    return up + v
  end
  if v > now + MAX_DELAY_MS then return nil, 'due time more than ten years ahead' end
  if v < now then return now end
  return v
end
