#!lua flags=no-writes
-- dead_list: a page of dead jobs, most recent death first.
-- KEYS: the nine topic keys. ARGV[1] offset, ARGV[2] count (1..1000).
-- Returns a flat array, nine entries per job (attempts from the attempts hash):
--   id, died ms, attempts, max attempts, due ms (of the last attempt),
--   created ms, last error, payload, options (the record's first field from
--   its first ';' on; empty without options)
-- include: args
-- include: options_text
-- include: record
-- include: att_of
-- include: retry

local offset, count = int_arg(ARGV[1], 0, MAX_SAFE), int_arg(ARGV[2], 1, 1000)
if not offset or not count or #ARGV ~= 2 then
  return invalid('dead list expects an offset and a count of 1 to 1000')
end
local page = redis.call('ZRANGE', K_DEAD, offset, offset + count - 1, 'REV', 'WITHSCORES')
if #page == 0 then return {} end
local ids = {}
for i = 1, #page, 2 do ids[#ids + 1] = page[i] end
local recs = redis.call('HMGET', K_JOBS, unpack(ids))
local atts = redis.call('HMGET', K_ATT, unpack(ids))
local topic_max = topic_defaults()
local out = {}
for i, id in ipairs(ids) do
  local r = decode(recs[i])
    or { due = 0, created = 0, err = 'record missing or unreadable', payload = '', mfield = '' }
  local n = #out
  out[n + 1] = id
  out[n + 2] = page[2 * i]
  out[n + 3] = att_of(atts[i])
  out[n + 4] = max_attempts(r, topic_max)
  out[n + 5] = r.due
  out[n + 6] = r.created
  out[n + 7] = r.err
  out[n + 8] = r.payload
  out[n + 9] = options_text(r.mfield)
end
return out
