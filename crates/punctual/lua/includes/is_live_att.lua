-- is_live_att: whether an attempts-hash entry carries the live mark.

-- The live mark: claim writes a job's attempts entry as "0A:T", a zero
-- before the attempts, and every script that takes the job out of running
-- drops the zero (fail, tick's reclaim) or deletes the entry (ack, cancel,
-- enqueue's replace). So a marked entry whose token matches proves the
-- lease without a look in running. An entry without the mark (a job that
-- left running, or a lease taken by a version before the mark) is checked
-- against running as well. att_of and token_str read both forms.
local function is_live_att(v)
  return string.byte(v, 1) == 48
end
