//! The runtime's operations on [`Queue`]: claim, ack, fail, extend, tick.

use std::time::Duration;

use super::{Queue, MAX_BATCH, MAX_SAFE};
use crate::error::{Error, Result};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// A lease as the scripts take it: 1 ms to ten years.
fn lease_ms(lease: Duration) -> u64 {
    lease.min(crate::job::MAX_DELAY).as_millis().max(1) as u64
}

/// Decodes a record as `claim` returns it (`M:D:G:B:E:` + E bytes of last
/// error + payload, see lib.lua): max attempts (`topic_max` when M is
/// empty), due ms, created ms, payload. None when the header is not one
/// (the script has checked it with the same pattern).
fn decode_claimed(rec: &[u8], topic_max: i64) -> Option<(i64, i64, i64, Vec<u8>)> {
    let mut fields = [&rec[..0]; 5];
    let mut at = 0;
    for f in &mut fields {
        let len = rec[at..].iter().position(|&b| b == b':')?;
        *f = &rec[at..at + len];
        at += len + 1;
    }
    let [m, d, g, b, e] = fields;
    let all = |s: &[u8], ok: fn(&u8) -> bool| s.iter().all(ok);
    if !all(m, u8::is_ascii_digit)
        || d.is_empty()
        || !all(d, u8::is_ascii_alphanumeric)
        || g.is_empty()
        || !all(g, u8::is_ascii_alphanumeric)
        || !all(b, |c| c.is_ascii_digit() || *c == b',')
        || e.is_empty()
        || !all(e, u8::is_ascii_digit)
    {
        return None;
    }
    // Digits past i64 saturate, as Lua's numbers would not matter there.
    let num = |s: &[u8], radix: u32| {
        let s = std::str::from_utf8(s).ok()?;
        Some(i64::from_str_radix(s, radix).unwrap_or(i64::MAX))
    };
    let max = if m.is_empty() { topic_max } else { num(m, 10)? };
    let due = num(d, 36)?;
    let created = due.saturating_sub(num(g, 36)?);
    let err_len = usize::try_from(num(e, 10)?).unwrap_or(usize::MAX);
    let start = at.saturating_add(err_len).min(rec.len());
    Some((max, due, created, rec[start..].to_vec()))
}

/// A job handed out by [`Queue::claim`]: leased to the caller until its lease
/// deadline, which [`Queue::extend`] pushes back. Ack or fail it with its
/// `token`; a stale token (the lease expired and the job was re-delivered)
/// is refused.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Delivery {
    /// The topic.
    pub topic: String,
    /// The job id.
    pub id: String,
    /// The lease token (fencing): unique per claim within the topic, and
    /// never handed out again, even after a Redis restart or failover that
    /// lost writes (tokens are at least Redis's clock in microseconds).
    pub token: i64,
    /// Which delivery this is: 1 on the first.
    pub attempt: u32,
    /// Deliveries allowed before the job goes to dead.
    pub max_attempts: u32,
    /// When the job was due, epoch ms (Redis clock).
    pub due_ms: i64,
    /// When the job was created, epoch ms (Redis clock).
    pub created_ms: i64,
    /// The payload.
    pub payload: Vec<u8>,
    /// Redis's clock at the claim, epoch microseconds: the job started no
    /// earlier than this, and this is never before `due_ms`.
    pub claimed_us: i64,
    /// When the claim's reply arrived, on this process's monotonic clock.
    pub received: std::time::Instant,
}

impl Delivery {
    /// How late the job is now, in microseconds: Redis's clock at the claim
    /// minus the due time, plus the local time since the claim's reply (no
    /// cross-host skew). Negative would mean an early start; the claim script
    /// never hands out a job before its due time.
    pub fn lateness_us(&self) -> i64 {
        self.claimed_us - self.due_ms * 1000 + self.received.elapsed().as_micros() as i64
    }

    /// [`Delivery::lateness_us`] as a duration (0 if it were negative).
    pub fn lateness(&self) -> Duration {
        Duration::from_micros(self.lateness_us().max(0) as u64)
    }

    /// The payload parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload).map_err(|e| {
            Error::invalid(format!(
                "payload of job {:?} is not the expected JSON: {e}",
                self.id
            ))
        })
    }
}

/// What one scheduler tick did ([`Queue::tick`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Tick {
    /// Jobs moved from pool to ready.
    pub promoted: u64,
    /// Expired leases moved back to pool (or ready) for another attempt.
    pub reclaimed: u64,
    /// Expired leases whose attempts were used up, moved to dead.
    pub dead: u64,
    /// Promotion was refused because ready holds `max_ready` jobs.
    pub refused: bool,
    /// A batch limit was hit: tick again now.
    pub more: bool,
    /// Time until the next due job in pool, by Redis's clock.
    pub next_due: Option<Duration>,
    /// Time until the next lease deadline, by Redis's clock.
    pub next_lease: Option<Duration>,
}

/// What [`Queue::fail`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failed {
    /// Back in pool (or ready), to be retried.
    Retry,
    /// Moved to dead: permanent failure or attempts used up.
    Dead,
    /// Refused: the lease is no longer this caller's.
    Stale,
}

impl Queue {

    /// Pops up to `k` ready jobs and leases them for `lease`, counting the
    /// attempt. Most callers use [`crate::Worker`] instead.
    pub async fn claim(&self, topic: &str, k: usize, lease: Duration) -> Result<Vec<Delivery>> {
        let v = self
            .run(&SCRIPTS.claim, topic, |inv| {
                inv.arg(k.clamp(1, MAX_BATCH)).arg(lease_ms(lease));
            })
            .await?;
        let received = std::time::Instant::now();
        let mut r = Reply::new("claim", v)?;
        if r.is_empty() {
            return Ok(Vec::new());
        }
        let claimed_us = r.int()?;
        let topic_max = r.int()?;
        let mut out = Vec::with_capacity(r.len() / 4);
        let mut not_text = Vec::new();
        while !r.is_empty() {
            let raw = r.bytes()?;
            let token = r.int()?;
            let attempt = r.int()?.clamp(0, u32::MAX as i64) as u32;
            let record = r.bytes()?;
            let (max_attempts, due_ms, created_ms, payload) = decode_claimed(&record, topic_max)
                .ok_or_else(|| {
                    Error::protocol("claim", "a record the script passed cannot be decoded")
                })?;
            let max_attempts = max_attempts.clamp(0, u32::MAX as i64) as u32;
            let id = match String::from_utf8(raw) {
                Ok(id) => id,
                Err(e) => {
                    not_text.push((e.into_bytes(), token));
                    continue;
                }
            };
            out.push(Delivery {
                topic: topic.to_string(),
                id,
                token,
                attempt,
                max_attempts,
                due_ms,
                created_ms,
                payload,
                claimed_us,
                received,
            });
        }
        // An id that is not UTF-8 (stored before enqueue refused them)
        // cannot be handed out: a Delivery's id is text, and its ack would
        // name another id. It goes to dead at once, for a person to see.
        for (raw, token) in not_text {
            let dead = self
                .run(&SCRIPTS.fail, topic, |inv| {
                    inv.arg(&raw[..])
                        .arg(token)
                        .arg("the id is not valid UTF-8, so no client can ack it (stored before punctual refused such ids): purge it, or enqueue it again under a UTF-8 id")
                        .arg("")
                        .arg("1");
                })
                .await;
            if let Err(e) = dead {
                // Its lease expires and a later claim tries again.
                tracing::warn!(topic, id = %raw.escape_ascii(), error = %e, "could not move a job whose id is not UTF-8 to dead");
            }
        }
        Ok(out)
    }

    /// Acks (id, token) pairs: the jobs are done and deleted. Returns one
    /// flag per pair: acked, or refused because the lease is no longer held.
    pub async fn ack(&self, topic: &str, done: &[(String, i64)]) -> Result<Vec<bool>> {
        let mut flags = Vec::with_capacity(done.len());
        for chunk in done.chunks(MAX_BATCH) {
            let v = self
                .run(&SCRIPTS.ack, topic, |inv| {
                    for (id, token) in chunk {
                        inv.arg(id).arg(token);
                    }
                })
                .await?;
            let f: Vec<i64> =
                redis::from_redis_value(v).map_err(|e| Error::protocol("ack", e.to_string()))?;
            flags.extend(f.into_iter().map(|x| x == 1));
        }
        Ok(flags)
    }

    /// Fails an attempt: retry after `retry_after` (or the backoff ladder),
    /// or dead when `permanent` or the attempts are used up. Fenced by `token`.
    pub async fn fail(
        &self,
        topic: &str,
        id: &str,
        token: i64,
        error: &str,
        retry_after: Option<Duration>,
        permanent: bool,
    ) -> Result<Failed> {
        let v = self
            .run(&SCRIPTS.fail, topic, |inv| {
                inv.arg(id)
                    .arg(token)
                    .arg(error)
                    .arg(
                        retry_after
                            .map(|d| crate::job::ceil_ms(d.min(crate::job::MAX_DELAY)).to_string())
                            .unwrap_or_default(),
                    )
                    .arg(if permanent { "1" } else { "0" });
            })
            .await?;
        let mut r = Reply::new("fail", v)?;
        Ok(match r.string()?.as_str() {
            "retry" => Failed::Retry,
            "dead" => Failed::Dead,
            _ => Failed::Stale,
        })
    }

    /// Extends leases to now + `lease`, never earlier than they were (a
    /// deadline already later stays); returns one flag per pair: extended,
    /// or lost (stop working on that job: it was reclaimed or cancelled).
    pub async fn extend(
        &self,
        topic: &str,
        held: &[(String, i64)],
        lease: Duration,
    ) -> Result<Vec<bool>> {
        let mut flags = Vec::with_capacity(held.len());
        for chunk in held.chunks(MAX_BATCH) {
            let v = self
                .run(&SCRIPTS.extend, topic, |inv| {
                    inv.arg(lease_ms(lease));
                    for (id, token) in chunk {
                        inv.arg(id).arg(token);
                    }
                })
                .await?;
            let f: Vec<i64> =
                redis::from_redis_value(v).map_err(|e| Error::protocol("extend", e.to_string()))?;
            flags.extend(f.into_iter().map(|x| x == 1));
        }
        Ok(flags)
    }

    /// One scheduler step: reclaim expired leases, then promote due jobs, at
    /// most a batch of each. Most callers use [`crate::Scheduler`] instead.
    pub async fn tick(
        &self,
        topic: &str,
        batch: usize,
        max_ready: usize,
        reclaim_batch: usize,
    ) -> Result<Tick> {
        let v = self
            .run(&SCRIPTS.tick, topic, |inv| {
                inv.arg(batch.clamp(1, MAX_BATCH))
                    .arg(max_ready.clamp(1, MAX_SAFE))
                    .arg(reclaim_batch.clamp(1, MAX_BATCH));
            })
            .await?;
        let mut r = Reply::new("tick", v)?;
        let ms = |v: i64| (v >= 0).then(|| Duration::from_millis(v as u64));
        Ok(Tick {
            promoted: r.int()? as u64,
            reclaimed: r.int()? as u64,
            dead: r.int()? as u64,
            refused: r.int()? == 1,
            more: r.int()? == 1,
            next_due: ms(r.int()?),
            next_lease: ms(r.int()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::decode_claimed;

    #[test]
    fn claimed_records_decode_as_the_lua_did() {
        // The example of docs/PROTOCOL.md ("A record decoded by hand").
        let r = b"5:mx34zkpw:0:60000,300000:0:{\"order\":10086}";
        let (max, due, created, payload) = decode_claimed(r, 6).unwrap();
        assert_eq!(max, 5);
        assert_eq!(due, i64::from_str_radix("mx34zkpw", 36).unwrap());
        assert_eq!(created, due);
        assert_eq!(payload, b"{\"order\":10086}");
        // Topic default, a gap, a last error, colons in the payload.
        let (max, due, created, payload) = decode_claimed(b":1z:a::4:boom:x:y", 6).unwrap();
        assert_eq!((max, due, created), (6, 71, 61));
        assert_eq!(payload, b":x:y");
        // An error length past the end leaves an empty payload.
        assert_eq!(decode_claimed(b":1:1::9:ab", 6).unwrap().3, b"");
        for bad in [
            &b"1:2:3:4"[..],
            b"x:1:1::0:",
            b":1::a:0:",
            b":1:1:a:0:",
            b":1:1::-1:",
        ] {
            assert!(
                decode_claimed(bad, 6).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
