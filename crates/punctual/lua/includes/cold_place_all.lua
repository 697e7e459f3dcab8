-- cold_place_all: placing many jobs due at one time in the cold pool.
-- include: cold
-- include: cold_place

-- cold_place for jobs all due at `due`, which the caller found due at or
-- after cold_from(now): `ids` joins the bucket's list (kept, not copied,
-- when the bucket has none yet).
local function cold_place_all(ids, due)
  local s = due - due % COLD_BUCKET
  if not cold_ids then cold_ids = {} end
  local l = cold_ids[s]
  if not l then
    cold_ids[s] = ids
    return
  end
  for i = 1, #ids do l[#l + 1] = ids[i] end
end
