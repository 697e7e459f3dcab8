-- token_str: the token of an attempts-hash entry, as fencing compares it.

-- The token of an attempts-hash value ("A:T") as claim wrote it (decimal
-- digits, no sign or leading zero); nil when absent. Fencing compares it
-- with the token presented, as strings: only that exact form matches (no
-- hex, exponent or leading zeros), and no number is made.
local function token_str(v)
  if not v then return nil end
  local p = string.find(v, ':', 1, true)
  return p and string.sub(v, p + 1)
end
