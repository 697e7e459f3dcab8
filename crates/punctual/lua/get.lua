#!lua flags=no-writes
-- get: one job by id.
-- KEYS: the nine topic keys. ARGV[1] id.
-- Returns nil when no such job is live, else
--   {state, score, attempts, max attempts, token, due ms, created ms,
--    backoff, last error, payload, now ms, options}
-- where options is the record's first field from its first ';' on (see
-- PROTOCOL.md "Per-job options"; empty without options)
-- State is pool (also a cold job), ready, running, dead (or "orphan": a record in no set,
-- which punctual check reports) and score is the due time (pool, ready), the
-- lease deadline (running) or the time of death (dead).
-- include: args
-- include: now_ms
-- include: options_text
-- include: record
-- include: att_of
-- include: retry
-- include: state

if #ARGV ~= 1 then return invalid('get expects one id') end
local id = ARGV[1]
local rec = redis.call('HGET', K_JOBS, id)
local st, score = state_of(id)
if st == 'cold' then st = 'pool' end
if not rec and not st then return false end
local r = decode(rec)
if not r then
  return { st or 'orphan', score or 0, 0, 0, 0, 0, 0, '', 'record missing or unreadable', rec or '', now_ms(), '' }
end
local topic_max = topic_defaults()
local attempts, token = att_of(redis.call('HGET', K_ATT, id))
return {
  st or 'orphan', score or 0, attempts, max_attempts(r, topic_max), token, r.due,
  r.created, r.backoff, r.err, r.payload, now_ms(), options_text(r.mfield),
}
