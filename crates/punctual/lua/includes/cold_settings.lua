-- cold_settings: the topic's cold_after and cold_at (meta), parsed once per call.
-- include: args
-- include: meta
-- include: cold

-- cold_after and cold_at below are read per job (cold_place, is_cold_due):
-- each keeps the number it parsed with the meta value it came from (a
-- string, or false when absent; NONE: nothing parsed yet), so a call parses
-- each once (parsing them per job cost a cold enqueue about 4,000
-- instructions per job, callgrind).
local NONE = {}
local cold_after_raw, cold_after_v = NONE, nil
local cold_at_raw, cold_at_v = NONE, nil

-- The topic's cold_after (meta), 0 when no job is to be placed cold.
local function cold_after()
  local w = meta().cold_after
  if w ~= cold_after_raw then
    cold_after_raw = w
    cold_after_v = w and int_arg(w, 0, MAX_DELAY_MS) or COLD_AFTER
  end
  return cold_after_v
end

-- meta cold_at as a number; nil when absent (or not a number).
local function cold_at()
  local a = meta().cold_at
  if a ~= cold_at_raw then
    cold_at_raw = a
    cold_at_v = int_arg(a, 0, MAX_SAFE)
  end
  return cold_at_v
end
