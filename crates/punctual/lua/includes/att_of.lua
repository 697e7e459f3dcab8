-- att_of: the attempts and token of an attempts-hash entry.

-- Attempts and token from an attempts-hash value ("A:T", or "0A:T" while
-- live); 0, 0 when absent.
local function att_of(v)
  if not v then return 0, 0 end
  local a, t = string.match(v, '^(%d+):(%d+)$')
  return tonumber(a) or 0, tonumber(t) or 0
end
