#!lua flags=no-writes
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

-- get: one job by id.
-- KEYS: the nine topic keys. ARGV[1] id.
-- Returns nil when no such job is live, else
--   {state, score, attempts, max attempts, token, due ms, created ms,
--    backoff, last error, payload, now ms}
-- where state is pool, ready, running, dead (or "orphan": a record in no set,
-- which punctual check reports) and score is the due time (pool, ready), the
-- lease deadline (running) or the time of death (dead).

local id = ARGV[1]
local rec = redis.call('HGET', K_JOBS, id)
local st, score = state_of(id)
if not rec and not st then return false end
local r = decode(rec)
if not r then
  return { st or 'orphan', score or 0, 0, 0, 0, 0, 0, '', 'record missing or unreadable', rec or '', now_ms() }
end
local topic_max = topic_defaults()
local attempts, token = att_of(redis.call('HGET', K_ATT, id))
return {
  st or 'orphan', score or 0, attempts, max_attempts(r, topic_max), token, r.due,
  r.created, r.backoff, r.err, r.payload, now_ms(),
}
