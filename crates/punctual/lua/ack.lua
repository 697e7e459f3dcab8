#!lua flags=allow-oom
-- ack: the jobs are done; delete them. Fenced: only the holder of the current
-- lease (the token its claim returned) can ack. Runs even when Redis is over
-- maxmemory, since it only deletes.
-- KEYS: the nine topic keys. ARGV: pairs id, token (1..1000 pairs).
-- Returns one integer per pair: 1 acked, 0 refused (the job is no longer
-- running under that token: reclaimed, re-delivered, cancelled or replaced).
-- Publishes on the ready channel when it frees a slot of a topic at its
-- max_running (or of a group at its own, see release_groups).
-- A lease is proven by its attempts entry alone when the entry carries the
-- live mark ("0A:T", see is_live_att) and ends in ":" and the token; an
-- unmarked entry with that token is also looked up in running.

local n = #ARGV / 2
if n < 1 or n > 1000 or #ARGV % 2 ~= 0 then
  return invalid('ack expects 1 to 1000 pairs of id, token')
end
local ids = {}
for i = 1, n do ids[i] = ARGV[2 * i - 1] end
local atts = redis.call('HMGET', K_ATT, unpack(ids))
local out, done, nd = {}, ids, n
local find, byte = string.find, string.byte
for i = 1, n do
  local v, tok = atts[i], ARGV[2 * i]
  local ok = false
  if v then
    -- The entry ends in ":" and the token: compared in place, no new string.
    local at = #v - #tok
    if byte(v, at) == 58 and find(v, tok, at + 1, true) then
      ok = is_live_att(v) or redis.call('ZSCORE', K_RUNNING, ids[i]) ~= false
    end
  end
  if ok then
    out[i] = 1
  else
    -- Checked only when refused, so a good ack pays nothing: a token that
    -- is not an integer is an error, not a refusal.
    if not int_arg(tok, 0, MAX_SAFE) then
      return invalid('ack expects tokens as decimal integers, got "' .. tok .. '"')
    end
    out[i] = 0
    if done == ids then
      -- The first refusal: from here on, only the accepted ids are deleted.
      done, nd = {}, 0
      for j = 1, i - 1 do
        nd = nd + 1
        done[nd] = ids[j]
      end
    end
  end
  if out[i] == 1 and done ~= ids then
    nd = nd + 1
    done[nd] = ids[i]
  end
end
if nd > 0 then
  local full, glim = at_max_running()
  if glim then
    -- Each job's group counts down once, even when its id was given twice.
    local uniq, once = {}, {}
    for i = 1, nd do
      if not once[done[i]] then
        once[done[i]] = true
        uniq[#uniq + 1] = done[i]
      end
    end
    release_groups(uniq, true)
  end
  redis.call('ZREM', K_RUNNING, unpack(done, 1, nd))
  redis.call('HDEL', K_JOBS, unpack(done, 1, nd))
  local acked = redis.call('HDEL', K_ATT, unpack(done, 1, nd))
  if acked < nd then
    -- An id given twice: its first pair acked it, the others are refused.
    local seen = {}
    for i = 1, n do
      if out[i] == 1 then
        if seen[ids[i]] then out[i] = 0 else seen[ids[i]] = true end
      end
    end
  end
  redis.call('HINCRBY', K_STATS, 'done', acked)
  if full then redis.call('PUBLISH', K_READY, '') end
end
return out
