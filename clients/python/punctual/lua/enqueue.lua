#!lua
-- lib.lua: helpers shared by every punctual script. It is inserted after the
-- shebang line of each script (see src/scripts.rs), so each script is one
-- self-contained text; `punctual script NAME` prints the assembled text.
--
-- KEYS, the same for every script (one topic T, prefix P):
--   KEYS[1] P:{T}:pool     ZSET id -> due ms        (also the pub/sub channel
--                                                    "pool has an earlier job")
--   KEYS[2] P:{T}:ready    ZSET id -> due ms        (also the pub/sub channel
--                                                    "ready has jobs")
--   KEYS[3] P:{T}:running  ZSET id -> lease deadline ms
--   KEYS[4] P:{T}:dead     ZSET id -> time of death ms
--   KEYS[5] P:{T}:jobs     HASH id -> record
--   KEYS[6] P:{T}:meta     HASH topic settings: max_attempts, backoff, paused
--   KEYS[7] P:{T}:stats    HASH counters
--   KEYS[8] P:{T}:seq      STRING counter for generated ids and lease tokens
--   KEYS[9] P:{T}:attempts HASH id -> "A:T": deliveries so far and the token
--                          of the latest claim; absent until the first claim
--
-- Record (never rewritten by claim, ack or extend): "M:D:G:B:E:" then E bytes
-- of last error, then the payload. M max attempts (decimal, empty: topic
-- default), D due time (ms, base 36), G due - created (ms, base 36), B backoff
-- ladder (ms, comma separated, empty: topic default), E length of the last
-- error (decimal).

local K_POOL, K_READY, K_RUNNING, K_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_JOBS, K_META, K_STATS, K_SEQ = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_ATT = KEYS[9]

local DEFAULT_MAX_ATTEMPTS = 6
local DEFAULT_BACKOFF = '0,5000,30000,120000,600000,1800000'
-- Ten years in ms: longer delays are refused as absurd.
local MAX_DELAY_MS = 315360000000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'

-- Base 36, left-padded with zeros to `width` (when given).
local function b36(n, width)
  n = math.floor(n)
  local out = {}
  if n <= 0 then out[1] = '0' end
  while n > 0 do
    local r = n % 36
    table.insert(out, 1, string.sub(DIGITS, r + 1, r + 1))
    n = (n - r) / 36
  end
  local s = table.concat(out)
  if width and #s < width then s = string.rep('0', width - #s) .. s end
  return s
end

local HEADER = '^(%d*):(%w+):(%w+):([%d,]*):(%d+):()'

local function decode(rec)
  if not rec then return nil end
  local m, d, g, b, e, p = string.match(rec, HEADER)
  if not m then return nil end
  e = tonumber(e)
  local due = tonumber(d, 36)
  return {
    max = tonumber(m),
    due = due,
    created = due - tonumber(g, 36),
    backoff = b,
    err = string.sub(rec, p, p + e - 1),
    payload = string.sub(rec, p + e),
  }
end

local function encode(r)
  local gap = r.due - r.created
  if gap < 0 then gap = 0 end
  return table.concat({
    r.max or '', ':', b36(r.due), ':', b36(gap), ':', r.backoff, ':', #r.err, ':', r.err, r.payload,
  })
end

-- Attempts and token from an attempts-hash value ("A:T"); 0, 0 when absent.
local function att_of(v)
  if not v then return 0, 0 end
  local a, t = string.match(v, '^(%d+):(%d+)$')
  return tonumber(a) or 0, tonumber(t) or 0
end

-- Topic settings: max attempts and backoff ladder, with built-in defaults.
local function topic_defaults()
  local m = redis.call('HMGET', K_META, 'max_attempts', 'backoff')
  return tonumber(m[1]) or DEFAULT_MAX_ATTEMPTS, m[2] or DEFAULT_BACKOFF
end

local function max_attempts(r, topic_max)
  return r.max or topic_max
end

-- Delay before the next attempt after `attempts` failed ones.
local function backoff_ms(r, topic_backoff, attempts)
  local ladder = r.backoff
  if ladder == '' then ladder = topic_backoff end
  local steps = {}
  for s in string.gmatch(ladder, '%d+') do steps[#steps + 1] = tonumber(s) end
  if #steps == 0 then return 0 end
  local i = attempts
  if i < 1 then i = 1 end
  if i > #steps then i = #steps end
  -- A ladder written by hand may hold absurd steps: cap them like delays.
  if steps[i] > MAX_DELAY_MS then return MAX_DELAY_MS end
  return steps[i]
end

-- Parse a "when": "d<ms>" delay from now, or "a<ms>" absolute epoch ms.
-- Returns the due time, or nil and a reason.
local function due_of(when, now)
  local kind, v = string.match(when, '^([da])(%d+)$')
  if not kind then return nil, 'malformed due time "' .. when .. '"' end
  v = tonumber(v)
  local due
  if kind == 'd' then due = now + v else due = v end
  if due > now + MAX_DELAY_MS then return nil, 'due time more than ten years ahead' end
  if due < now then due = now end
  return due
end

local function earliest(key)
  local e = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #e == 0 then return nil end
  return tonumber(e[2])
end

-- Which set holds `id`, and its score there.
local function state_of(id)
  local s = redis.call('ZSCORE', K_POOL, id)
  if s then return 'pool', tonumber(s) end
  s = redis.call('ZSCORE', K_READY, id)
  if s then return 'ready', tonumber(s) end
  s = redis.call('ZSCORE', K_RUNNING, id)
  if s then return 'running', tonumber(s) end
  s = redis.call('ZSCORE', K_DEAD, id)
  if s then return 'dead', tonumber(s) end
  return nil
end

local STATE_KEY = { pool = K_POOL, ready = K_READY, running = K_RUNNING, dead = K_DEAD }

-- Run `cmd key` with `args` in chunks, so no unpack() grows unbounded.
local function variadic(cmd, key, args)
  local n = #args
  local i = 1
  while i <= n do
    local j = i + 3999
    if j > n then j = n end
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

local function invalid(msg)
  return redis.error_reply('PUNCTUAL_INVALID ' .. msg)
end

-- enqueue: add jobs to a topic, one or a batch, atomically.
-- KEYS: the nine topic keys (see lib.lua).
-- ARGV[1] max payload bytes, ARGV[2] replace live ids (1) or report them as
-- duplicates (0), ARGV[3] n, then n groups of five:
--   id ("" = generate), payload, when ("d<ms>" delay or "a<ms>" epoch ms),
--   max attempts ("" = topic default), backoff ladder ("" = topic default,
--   else ms values separated by commas).
-- Returns: a flat array id1, status1, id2, status2 ... where status is
-- 1 created, 0 duplicate (nothing changed), 2 replaced.
-- Errors: "PUNCTUAL_INVALID <reason>" and nothing is written, when any job of
-- the batch is invalid.

local max_payload = tonumber(ARGV[1])
local replace = ARGV[2] == '1'
local n = tonumber(ARGV[3])
if not max_payload or not n or n < 1 or n > 1000 or #ARGV ~= 3 + 5 * n then
  return invalid('enqueue expects 1 to 1000 jobs of five arguments each')
end

local now = now_ms()
local dues = {}
local generate = 0
for i = 1, n do
  local b = 3 + 5 * (i - 1)
  local id, payload, when, max, backoff = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  if id == '' then
    generate = generate + 1
  elseif #id > 200 then
    return invalid('job ' .. i .. ': id is ' .. #id .. ' bytes, over the 200-byte limit')
  elseif string.find(id, '%c') then
    return invalid('job ' .. i .. ': ids may not contain control characters')
  end
  if #payload > max_payload then
    return invalid('job ' .. i .. ': payload is ' .. #payload .. ' bytes, over the ' .. max_payload .. '-byte limit')
  end
  local due, why = due_of(when, now)
  if not due then return invalid('job ' .. i .. ': ' .. why) end
  if not string.match(max, '^%d*$') or #max > 10 or (max ~= '' and tonumber(max) < 1) then
    return invalid('job ' .. i .. ': max attempts must be a positive integer')
  end
  if not string.match(backoff, '^[%d,]*$') then
    return invalid('job ' .. i .. ': backoff must be ms values separated by commas')
  end
  for step in string.gmatch(backoff, '%d+') do
    if #step > 12 or tonumber(step) > MAX_DELAY_MS then
      return invalid('job ' .. i .. ': backoff steps are at most ten years')
    end
  end
  dues[i] = due
end

-- Generated ids: 8 base-36 digits of the server time (ms), then 4 of a
-- per-topic sequence (shared with lease tokens), so they sort by creation
-- time; an id already live is skipped. Twelve bytes fit Redis's smallest
-- string allocation.
local seq = 0
if generate > 0 then seq = redis.call('INCRBY', K_SEQ, generate) - generate end
local stamp = b36(now, 8)
-- Record headers, built once per distinct due time.
local heads = {}

local out, records, to_pool, to_ready = {}, {}, {}, {}
local seen = {}
-- Replaced ids and the set they were in: left only after the new entry is written.
local old_state, dest = {}, {}
local created, dup = 0, 0
local pool_min = nil
for i = 1, n do
  local b = 3 + 5 * (i - 1)
  local id = ARGV[b + 1]
  local status = 1
  if id == '' then
    -- A fresh id. Looked up anyway, so that even a clock stepped back or a
    -- producer's own id of the same shape can never be overwritten.
    repeat
      seq = seq + 1
      id = stamp .. b36(seq % 1679616, 4)
    until not seen[id] and redis.call('HEXISTS', K_JOBS, id) == 0
  elseif seen[id] then
    -- The same id twice in one batch: the first one wins, even with replace.
    status = 0
  elseif redis.call('HEXISTS', K_JOBS, id) == 1 then
    if replace then
      status = 2
      old_state[id] = state_of(id) or false
    else
      status = 0
    end
  end
  if status ~= 0 then
    seen[id] = true
    local due = dues[i]
    local head = heads[due]
    if not head then
      head = ':' .. b36(due) .. ':' .. b36(due - now) .. ':'
      heads[due] = head
    end
    records[#records + 1] = id
    records[#records + 1] = ARGV[b + 4] .. head .. ARGV[b + 5] .. ':0:' .. ARGV[b + 2]
    if due <= now then
      dest[id] = 'ready'
      to_ready[#to_ready + 1] = due
      to_ready[#to_ready + 1] = id
    else
      dest[id] = 'pool'
      to_pool[#to_pool + 1] = due
      to_pool[#to_pool + 1] = id
      if not pool_min or due < pool_min then pool_min = due end
    end
    created = created + 1
  else
    dup = dup + 1
  end
  out[#out + 1] = id
  out[#out + 1] = status
end

if created > 0 then
  local old_min = nil
  if pool_min then old_min = earliest(K_POOL) end
  variadic('HSET', K_JOBS, records)
  if #to_pool > 0 then
    variadic('ZADD', K_POOL, to_pool)
    if not old_min or pool_min < old_min then redis.call('PUBLISH', K_POOL, pool_min) end
  end
  if #to_ready > 0 then
    variadic('ZADD', K_READY, to_ready)
    redis.call('PUBLISH', K_READY, '')
  end
  for id, st in pairs(old_state) do
    if st and st ~= dest[id] then redis.call('ZREM', STATE_KEY[st], id) end
  end
  -- A replaced job starts again: attempts reset. (Its old delivery cannot
  -- ack the new one: it is no longer running, and tokens never repeat.)
  local replaced = {}
  for id in pairs(old_state) do replaced[#replaced + 1] = id end
  if #replaced > 0 then variadic('HDEL', K_ATT, replaced) end
  redis.call('HINCRBY', K_STATS, 'enqueued', created)
end
if dup > 0 then redis.call('HINCRBY', K_STATS, 'duplicates', dup) end
return out
