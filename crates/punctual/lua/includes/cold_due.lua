-- cold_due: whether a job in no set is a cold job.
-- include: cold_settings

-- Whether a job in no set, with this record due time, is a cold job.
local function is_cold_due(due)
  local at = cold_at()
  if not at then return false end
  return due >= at
end
