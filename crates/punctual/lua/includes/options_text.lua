-- options_text: the options part of a record's M field, as listings show it.

-- The options part of an M field: from its first ';' on ('' without).
local function options_text(m)
  local p = string.find(m, ';', 1, true)
  if not p then return '' end
  return string.sub(m, p)
end
