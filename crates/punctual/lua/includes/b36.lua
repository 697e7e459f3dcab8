-- b36: base 36, as records and generated ids write numbers.

-- The byte of each base-36 digit, '0'..'9' then 'a'..'z'. A table
-- constructor, not a loop of string.byte: this line runs on every call of
-- every script, and the loop cost about 2.5 us per call (Redis 7.0,
-- measured with an empty script body).
local DIGIT_BYTES = {
  [0] = 48, 49, 50, 51, 52, 53, 54, 55, 56, 57,
  97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109,
  110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122,
}

-- Base 36, left-padded with zeros to `width` (when given). The digits go
-- into one reused table, right to left, and out as one string.char.
local B36_BUF = {}
local function b36(n, width)
  n = math.floor(n)
  local i = 13
  if n <= 0 then
    i = 12
    B36_BUF[12] = 48
  end
  while n > 0 do
    local r = n % 36
    i = i - 1
    B36_BUF[i] = DIGIT_BYTES[r]
    n = (n - r) / 36
  end
  local s = string.char(unpack(B36_BUF, i, 12))
  if width and #s < width then s = string.rep('0', width - #s) .. s end
  return s
end
