-- claimable: claim's check of a record it is about to lease.
-- include: opts_of
-- include: record

-- A readable record without options, without captures. (A record with
-- options fails it, and is read with decode.)
local HEADER_CHECK = '^%d*:%w+:%w+:[%d,]*:%d+:'

-- claim's check of a record: whether it reads, and for one whose expiry
-- deadline is before `now`, the record decoded (true, r). Only a record with
-- options pays for more than one string.find, and only an expired one is
-- decoded whole.
local HEADER_M = '^([^:]*):%w+:%w+:[%d,]*:%d+:'
local function claimable(rec, now)
  if string.find(rec, HEADER_CHECK) then return true, nil end
  local m = string.match(rec, HEADER_M)
  if not m then return false, nil end
  local max, o = opts_of(m)
  if max == false then return false, nil end
  if o and o.deadline and o.deadline < now then return true, decode(rec) end
  return true, nil
end
