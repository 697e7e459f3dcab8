-- ended_att: the attempts-hash entry of a job leaving running.

-- The entry of a job leaving running: its attempts and token, unmarked.
local function ended_att(v)
  if v and string.byte(v, 1) == 48 then return string.sub(v, 2) end
  return v
end
