#!lua flags=allow-oom
-- ack: the jobs are done; delete them. Fenced: only the holder of the current
-- lease (the token its claim returned) can ack. Runs even when Redis is over
-- maxmemory, since it only deletes.
-- KEYS: the nine topic keys. ARGV: pairs id, token (1..1000 pairs).
-- Returns one integer per pair: 1 acked, 0 refused (the job is no longer
-- running under that token: reclaimed, re-delivered, cancelled or replaced).
-- Publishes on the ready channel when it frees a slot of a topic at its
-- max_running (or of a group at its own, see release_groups).

local n = #ARGV / 2
if n < 1 or n > 1000 or #ARGV % 2 ~= 0 then
  return invalid('ack expects 1 to 1000 pairs of id, token')
end
local ids = {}
for i = 1, n do ids[i] = ARGV[2 * i - 1] end
local leased = redis.call('ZMSCORE', K_RUNNING, unpack(ids))
local atts = redis.call('HMGET', K_ATT, unpack(ids))
local out, done, seen = {}, {}, {}
for i = 1, n do
  if leased[i] and not seen[ids[i]] and token_str(atts[i]) == ARGV[2 * i] then
    seen[ids[i]] = true
    done[#done + 1] = ids[i]
    out[i] = 1
  else
    -- Checked only when refused, so a good ack pays nothing: a token that
    -- is not an integer is an error, not a refusal.
    if not int_arg(ARGV[2 * i], 0, MAX_SAFE) then
      return invalid('ack expects tokens as decimal integers, got "' .. ARGV[2 * i] .. '"')
    end
    out[i] = 0
  end
end
if #done > 0 then
  local full, glim = at_max_running()
  release_groups(done, glim)
  variadic('ZREM', K_RUNNING, done)
  variadic('HDEL', K_JOBS, done)
  variadic('HDEL', K_ATT, done)
  redis.call('HINCRBY', K_STATS, 'done', #done)
  if full then redis.call('PUBLISH', K_READY, '') end
end
return out
