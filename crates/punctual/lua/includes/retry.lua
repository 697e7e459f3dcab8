-- retry: a job's max attempts and backoff, with the topic's defaults.
-- include: args
-- include: meta

-- Topic settings: max attempts and backoff ladder, with built-in defaults.
local function topic_defaults()
  local m = meta()
  return int_arg(m.max_attempts, 1, MAX_ATTEMPTS) or DEFAULT_MAX_ATTEMPTS, m.backoff or DEFAULT_BACKOFF
end

local function max_attempts(r, topic_max)
  return r.max or topic_max
end

-- Delay before the next attempt after `attempts` failed ones.
local function backoff_ms(r, topic_backoff, attempts)
  local ladder = r.backoff
  if ladder == '' then ladder = topic_backoff end
  local steps = {}
  for s in string.gmatch(ladder, '%d+') do steps[#steps + 1] = tonumber(s) end
  if #steps == 0 then return 0 end
  local i = attempts
  if i < 1 then i = 1 end
  if i > #steps then i = #steps end
  -- A ladder written by hand may hold absurd steps: cap them like delays.
  if steps[i] > MAX_DELAY_MS then return MAX_DELAY_MS end
  return steps[i]
end
