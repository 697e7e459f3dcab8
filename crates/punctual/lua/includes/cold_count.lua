-- cold_count: meta cold_n as a count.

-- meta cold_n, never below 0 (a record in no set taken for a cold job and
-- cancelled lowers it once too often).
local function cold_count(v)
  local n = tonumber(v) or 0
  if n < 0 then return 0 end
  return n
end
