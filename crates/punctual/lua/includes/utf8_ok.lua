-- utf8_ok: the UTF-8 check of ids and payloads.

-- Whether s is valid UTF-8 (no overlong forms, surrogates or code points
-- past U+10FFFF). ASCII is checked by one string.find.
local function utf8_ok(s)
  local i, n = 1, #s
  while i <= n do
    local j = string.find(s, '[\128-\255]', i)
    if not j then return true end
    local c, b = string.byte(s, j, j + 1)
    local len
    if c >= 0xC2 and c <= 0xDF then len = 2
    elseif c >= 0xE0 and c <= 0xEF then len = 3
    elseif c >= 0xF0 and c <= 0xF4 then len = 4
    else return false end
    if not b or (c == 0xE0 and b < 0xA0) or (c == 0xED and b > 0x9F)
      or (c == 0xF0 and b < 0x90) or (c == 0xF4 and b > 0x8F) then
      return false
    end
    for k = j + 1, j + len - 1 do
      local x = string.byte(s, k)
      if not x or x < 0x80 or x > 0xBF then return false end
    end
    i = j + len
  end
  return true
end
