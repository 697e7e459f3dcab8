#!lua flags=allow-oom
-- extend: push the lease deadline of running jobs to now + lease, never
-- earlier than it was. Fenced.
-- Runs even when Redis is over maxmemory (it updates scores in place).
-- KEYS: the nine topic keys. ARGV[1] lease ms, then pairs id, token.
-- Returns one integer per pair: 1 extended, 0 the lease is lost (stop work).
-- include: args
-- include: now_ms
-- include: token_str

local lease = int_arg(ARGV[1], 1, MAX_DELAY_MS)
local n = (#ARGV - 1) / 2
if not lease or n < 1 or n > 1000 or (#ARGV - 1) % 2 ~= 0 then
  return invalid('extend expects a lease of 1 ms to ten years and 1 to 1000 pairs of id, token')
end
local ids = {}
for i = 1, n do ids[i] = ARGV[2 * i] end
local leased = redis.call('ZMSCORE', K_RUNNING, unpack(ids))
local atts = redis.call('HMGET', K_ATT, unpack(ids))
local deadline = now_ms() + lease
local out, leases = {}, {}
for i = 1, n do
  if leased[i] and token_str(atts[i]) == ARGV[2 * i + 1] then
    leases[#leases + 1] = deadline
    leases[#leases + 1] = ids[i]
    out[i] = 1
  else
    -- As in ack: checked only when refused.
    if not int_arg(ARGV[2 * i + 1], 0, MAX_SAFE) then
      return invalid('extend expects tokens as decimal integers, got "' .. ARGV[2 * i + 1] .. '"')
    end
    out[i] = 0
  end
end
-- GT: never earlier (nothing tells the schedulers of an earlier deadline).
-- At most 2000 arguments: one call.
if #leases > 0 then redis.call('ZADD', K_RUNNING, 'GT', unpack(leases)) end
return out
