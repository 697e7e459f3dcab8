//! `claim` (lua/claim.lua): pops ready jobs and leases them. Its
//! arguments, its reply (the jobs as [`Delivery`]s) and its resend rule:
//! never resent blindly (a resent claim leases more jobs to nobody, each
//! losing an attempt).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::{lease_ms, Lease, Partition};
use crate::queue::{Queue, MAX_BATCH};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// Whether a claim call may be sent twice: never (see `conn.rs`).
pub(super) fn must_not_repeat(_argv: &[&[u8]]) -> bool {
    true
}

/// A record as `claim` returns it, decoded.
#[derive(Debug)]
struct ClaimedRecord {
    /// Max attempts (`topic_max` when M gives none).
    max: i64,
    due: i64,
    created: i64,
    /// The per-job options of M.
    opts: crate::options::RecordField,
    payload: Vec<u8>,
}

/// Decodes a record as `claim` returns it (`M:D:G:B:E:` + E bytes of last
/// error + payload, see lua/includes/record.lua; M may carry options, see
/// [`crate::options::parse_field`]): max attempts (`topic_max` when M has
/// none), due ms, created ms, options, payload. None when the header is not
/// one (the script has checked it with the same rules). The payload is the
/// record's own buffer with the header cut off (no copy to a new one).
fn decode_claimed(mut rec: Vec<u8>, topic_max: i64) -> Option<ClaimedRecord> {
    let mut fields = [&rec[..0]; 5];
    let mut at = 0;
    for f in &mut fields {
        let len = rec[at..].iter().position(|&b| b == b':')?;
        *f = &rec[at..at + len];
        at += len + 1;
    }
    let [m, d, g, b, e] = fields;
    let all = |s: &[u8], ok: fn(&u8) -> bool| s.iter().all(ok);
    if d.is_empty()
        || !all(d, u8::is_ascii_alphanumeric)
        || g.is_empty()
        || !all(g, u8::is_ascii_alphanumeric)
        || !all(b, |c| c.is_ascii_digit() || *c == b',')
        || e.is_empty()
        || !all(e, u8::is_ascii_digit)
    {
        return None;
    }
    let opts = crate::options::parse_field(m)?;
    // Digits past i64 saturate, as Lua's numbers would not matter there
    // (as would any other text, which the checks above have ruled out).
    // By hand: `from_str_radix` wants a `&str`, checked again per field.
    let num = |s: &[u8], radix: u32| {
        if s.is_empty() {
            return Some(i64::MAX);
        }
        let mut n: i64 = 0;
        for &c in s {
            let Some(d) = char::from(c).to_digit(radix) else {
                return Some(i64::MAX);
            };
            match n
                .checked_mul(i64::from(radix))
                .and_then(|n| n.checked_add(i64::from(d)))
            {
                Some(v) => n = v,
                None => return Some(i64::MAX),
            }
        }
        Some(n)
    };
    let max = opts.max.unwrap_or(topic_max);
    let due = num(d, 36)?;
    let created = due.saturating_sub(num(g, 36)?);
    let err_len = usize::try_from(num(e, 10)?).unwrap_or(usize::MAX);
    let start = at.saturating_add(err_len).min(rec.len());
    rec.drain(..start);
    Some(ClaimedRecord {
        max,
        due,
        created,
        opts,
        payload: rec,
    })
}

/// A job handed out by [`claim`]: leased to the caller until its lease
/// deadline, which [`extend`](crate::raw::extend) pushes back. Ack or fail
/// it with its `token`; a stale token (the lease expired and the job was
/// re-delivered) is refused.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use std::time::Duration;
/// let part: punctual::raw::Partition = "orders".parse()?;
/// for job in punctual::raw::claim(&queue, &part, 10, Duration::from_secs(30)).await? {
///     println!(
///         "{} attempt {}/{}, {} bytes, {:?} late",
///         job.id, job.attempt, job.max_attempts, job.payload.len(), job.lateness()
///     );
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Delivery {
    /// The topic.
    pub topic: String,
    /// The job id.
    pub id: String,
    /// The lease token (fencing): the claim's, shared by every job it
    /// handed out, and given to no other claim of the topic, even after a
    /// Redis restart or failover that lost writes (tokens are at least
    /// Redis's clock in microseconds). The lease is the pair id, token.
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
    /// The expiry deadline ([`crate::Job::expire`]), epoch ms: the claim
    /// handed the job out no later than this.
    pub deadline_ms: Option<i64>,
    /// The handler timeout of this job ([`crate::Job::timeout`]); the
    /// worker uses it instead of its configured one.
    pub timeout: Option<Duration>,
    /// The job's group ([`crate::Job::group`]).
    pub group: Option<String>,
    /// The producer's W3C trace context ([`crate::Job::traceparent`]),
    /// the same on every attempt.
    pub traceparent: Option<String>,
    /// Its tracestate ([`crate::Job::tracestate`]).
    pub tracestate: Option<String>,
    /// Redis's clock at the claim, epoch microseconds: the job started no
    /// earlier than this, and this is never before `due_ms`.
    pub claimed_us: i64,
    /// When the claim's reply arrived, on this process's monotonic clock.
    pub received: std::time::Instant,
    /// When the claim was sent, on this process's monotonic clock: the
    /// lease was taken between this and `received`, so it is at most
    /// `sent.elapsed()` old (a worker stopped between the claim and the
    /// reading of its reply holds a lease older than the reply says).
    pub sent: std::time::Instant,
    /// When its worker's keeper last extended the lease (see
    /// [`Delivery::lease_in_doubt`]); None outside a worker.
    pub(crate) extended: Option<std::sync::Arc<crate::held::Extended>>,
    /// Fires when an operator cancels this job while it runs (`punctual
    /// cancel`, [`Queue::cancel`] from any process or host): a [`crate::Worker`]
    /// hears it on the topic's cancel channel and fires it (and then the
    /// handler's own token, which also fires on timeout, lost lease and
    /// shutdown). The job is already ended in Redis: stop the work, and
    /// whatever the handler answers is not recorded. Clones of a delivery
    /// share it. A handler that ignores it is dropped after
    /// [`crate::WorkerConfig::cancelled_grace`].
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue) {
    /// use punctual::{Outcome, Worker, WorkerConfig};
    /// let worker = Worker::new(queue, WorkerConfig::default()).handle("exports", |job| async move {
    ///     tokio::select! {
    ///         _ = job.cancelled.cancelled() => Outcome::retry("cancelled by an operator: not recorded"),
    ///         _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => Outcome::Done,
    ///     }
    /// });
    /// # let _ = worker; }
    /// ```
    pub cancelled: tokio_util::sync::CancellationToken,
}

/// A claim's round trip longer than this is taken for a stall between the
/// claim and the reading of its reply (SIGSTOP, a pause, swap): lateness
/// then counts from when the claim was sent ([`Delivery::lateness_us`]).
pub(crate) const STALLED_REPLY: Duration = Duration::from_millis(10);

impl Delivery {
    /// Whether this job's lease may already be lost although nothing said
    /// so: its worker has not known it held for over half the lease, not
    /// since the claim was sent nor since its keeper last extended it (the
    /// worker was stopped, or Redis unreachable, for that long). A handler
    /// that holds jobs before starting them asks this right before each
    /// start, and hands the job back instead of starting it. False for a
    /// delivery outside a worker.
    pub fn lease_in_doubt(&self) -> bool {
        self.extended
            .as_ref()
            .is_some_and(|e| e.in_doubt(self.sent))
    }

    /// The instant after which this job must not start, as things stand:
    /// the earlier of when its lease comes in doubt
    /// ([`Delivery::lease_in_doubt`]; a later extension of the lease moves
    /// it) and when its expiry passes ([`Delivery::expiry_error`]). None
    /// when neither applies. A handler that hands the job to another
    /// process before starting it gives it this deadline.
    pub fn start_by(&self) -> Option<std::time::Instant> {
        let lease = self.extended.as_ref().map(|e| e.doubt_from(self.sent));
        let expiry = self.deadline_ms.map(|deadline| {
            // expiry_error: expired once the claim's clock, advanced as in
            // lateness_us, is past the deadline's last millisecond.
            let us = (deadline + 1) * 1000 - self.claimed_us;
            self.lateness_base() + Duration::from_micros((us - 1).max(0) as u64)
        });
        match (lease, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The local instant Redis's clock at the claim is counted from (see
    /// [`Delivery::lateness_us`]).
    fn lateness_base(&self) -> std::time::Instant {
        if self.received.duration_since(self.sent) > STALLED_REPLY {
            self.sent
        } else {
            self.received
        }
    }

    /// How late the job is now, in microseconds: Redis's clock at the claim
    /// minus the due time, plus the local time since the claim's reply (no
    /// cross-host skew). Negative would mean an early start; the claim script
    /// never hands out a job before its due time. When the claim's round
    /// trip took longer than 10 ms (the worker stalled between the claim
    /// and the reading of its reply), the local time counts from when the
    /// claim was sent instead: an upper bound, never less than the truth.
    ///
    /// ```
    /// fn report(job: &punctual::Delivery) {
    ///     let late_ms = job.lateness_us() / 1000;
    ///     if late_ms > 1000 {
    ///         eprintln!("{} started {late_ms} ms after its due time", job.id);
    ///     }
    /// }
    /// # let _ = report;
    /// ```
    pub fn lateness_us(&self) -> i64 {
        self.lateness_us_at(std::time::Instant::now())
    }

    /// [`Delivery::lateness_us`] as it was, or will be, at `at` (a start
    /// later than now, e.g. when a job waited for a free program).
    pub fn lateness_us_at(&self, at: std::time::Instant) -> i64 {
        let since = at.saturating_duration_since(self.lateness_base());
        self.claimed_us - self.due_ms * 1000 + since.as_micros() as i64
    }

    /// When the job's expiry ([`crate::Job::expire`]) has passed by Redis's
    /// clock now (the claim's, advanced by the local clock as in
    /// [`Delivery::lateness_us`]), the error to end it with; None while it
    /// may start. A worker checks it right before a handler starts the job.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
    /// if let Some(error) = job.expiry_error() {
    ///     punctual::raw::fail_expired(&queue, &part, &job.lease(), &error).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn expiry_error(&self) -> Option<String> {
        let deadline = self.deadline_ms?;
        let now = (self.due_ms * 1000 + self.lateness_us()).div_euclid(1000);
        (now > deadline).then(|| {
            format!(
                "expired: could not start by its deadline, {} ms ago ({} ms after its due time); it was claimed in time but held unstarted",
                now - deadline,
                now - self.due_ms
            )
        })
    }

    /// [`Delivery::lateness_us`] as a duration (0 if it were negative).
    ///
    /// ```
    /// use std::time::Duration;
    /// fn is_late(job: &punctual::Delivery) -> bool {
    ///     job.lateness() > Duration::from_secs(1)
    /// }
    /// # let _ = is_late;
    /// ```
    pub fn lateness(&self) -> Duration {
        Duration::from_micros(self.lateness_us().max(0) as u64)
    }

    /// The payload parsed as JSON; a payload that is not that JSON is
    /// [`crate::ErrorKind::InvalidInput`].
    ///
    /// ```
    /// use punctual::Outcome;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Close {
    ///     order: u64,
    /// }
    ///
    /// async fn handle(job: punctual::Delivery) -> Outcome {
    ///     match job.json::<Close>() {
    ///         Ok(close) => {
    ///             println!("closing order {}", close.order);
    ///             Outcome::Done
    ///         }
    ///         Err(e) => Outcome::permanent(e.to_string()),
    ///     }
    /// }
    /// # let _ = handle;
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload).map_err(|e| {
            Error::invalid(format!(
                "payload of job {:?} is not the expected JSON: {e}",
                self.id
            ))
        })
    }
}

impl Delivery {
    /// The lease to ack, fail or extend this job with.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// for job in punctual::raw::claim(&queue, &part, 10, Duration::from_secs(30)).await? {
    ///     punctual::raw::ack(&queue, &part, &[job.lease()]).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Lease {
        Lease::with_attempt(self.id.clone(), self.token, self.attempt)
    }
}

/// How long a caller should wait before claiming again, when a topic's
/// limit held ready jobs back ([`claim_with_wait`]).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
/// use std::time::Duration;
/// use punctual::raw::{self, Wait};
/// let got = raw::claim_with_wait(&queue, &part, 10, Duration::from_secs(30)).await?;
/// match got.wait {
///     Some(Wait::For(d)) => tokio::time::sleep(d).await,
///     Some(Wait::UntilRunningEnds) => { /* wait for a wake-up on the ready channel */ }
///     None => {}
///     Some(_) => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// The rate limit: the next token comes after this long.
    For(Duration),
    /// `max_running` jobs run: wait until one ends (its ack or fail
    /// publishes on the ready channel).
    UntilRunningEnds,
}

/// What [`claim_with_wait`] got: the jobs, and whether a limit held ready
/// jobs back (then how long to wait before claiming again).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
/// use std::time::Duration;
/// let got = punctual::raw::claim_with_wait(&queue, &part, 10, Duration::from_secs(30)).await?;
/// println!("{} jobs, limited: {:?}", got.jobs.len(), got.wait);
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Claimed {
    /// The jobs handed out.
    pub jobs: Vec<Delivery>,
    /// Set when a limit (rate or max running) held ready jobs back.
    pub wait: Option<Wait>,
    /// How long after the claim the pool's earliest job is due, by Redis's
    /// clock: `Some(ZERO)` when due jobs were left in the pool (a limit or
    /// `k` held them back), `None` when the pool is empty, on a topic with
    /// groups (whose claims leave the pool to the scheduler), and after an
    /// empty reply (paused, or nothing anywhere).
    pub next_due: Option<Duration>,
    /// The claim's Redis time (µs) and when its reply arrived: how the
    /// worker maps Redis times to its own clock.
    pub(crate) clock: Option<(i64, std::time::Instant)>,
}

/// Pops up to `k` ready jobs of `part` and leases them for `lease`,
/// counting the attempt. Each [`Delivery`] names `part` as its topic.
/// A topic's limits may hand out fewer; [`claim_with_wait`] also says how
/// long to wait then.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use std::time::Duration;
/// let part: punctual::raw::Partition = "orders".parse()?;
/// let jobs = punctual::raw::claim(&queue, &part, 10, Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
pub async fn claim(
    queue: &Queue,
    part: &Partition,
    k: usize,
    lease: Duration,
) -> Result<Vec<Delivery>> {
    Ok(claim_with_wait(queue, part, k, lease).await?.jobs)
}

/// [`claim`], also saying whether the topic's limits held ready jobs back
/// and how long to wait before claiming again (the library's [`crate::Worker`]
/// sleeps that long, or until woken, instead of its idle check).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// use std::time::Duration;
/// use punctual::{raw::{self, Wait}, Job, Limits};
/// queue.set_limits("mail", &Limits::default().max_running(1)).await?;
/// queue.enqueue("mail", Job::new("a")).await?;
/// queue.enqueue("mail", Job::new("b")).await?;
/// let part: raw::Partition = "mail".parse()?;
/// let first = raw::claim_with_wait(&queue, &part, 10, Duration::from_secs(30)).await?;
/// assert_eq!(first.jobs.len(), 1);
/// let second = raw::claim_with_wait(&queue, &part, 10, Duration::from_secs(30)).await?;
/// assert!(second.jobs.is_empty());
/// assert_eq!(second.wait, Some(Wait::UntilRunningEnds));
/// # Ok(()) }
/// ```
pub async fn claim_with_wait(
    queue: &Queue,
    part: &Partition,
    k: usize,
    lease: Duration,
) -> Result<Claimed> {
    let topic = part.as_str();
    let sent = std::time::Instant::now();
    let v = queue
        .run(&SCRIPTS.claim, topic, |inv| {
            inv.arg(k.clamp(1, MAX_BATCH)).arg(lease_ms(lease));
        })
        .await?;
    let received = std::time::Instant::now();
    let mut r = Reply::new("claim", v)?;
    if r.is_empty() {
        return Ok(Claimed {
            jobs: Vec::new(),
            wait: None,
            next_due: None,
            clock: None,
        });
    }
    let claimed_us = r.int()?;
    let topic_max = r.int()?;
    let wait = match r.int()? {
        0 => None,
        ms if ms < 0 => Some(Wait::UntilRunningEnds),
        ms => Some(Wait::For(Duration::from_millis(ms as u64))),
    };
    // The claim's token (every job of it is leased under it) and the number
    // of jobs; then two entries per job, pairs j, attempt for the jobs not
    // on their first attempt, and the µs until the pool's next due time.
    let token = r.int()?;
    let m = r.int()?;
    if m < 0 || m as usize * 2 + 1 > r.len() {
        return Err(Error::protocol(
            "claim",
            "the job count does not match the reply",
        ));
    }
    let m = m as usize;
    let mut out = Vec::with_capacity(m);
    // The positions (1-based) of the jobs not handed out: ids not UTF-8.
    let mut not_text = Vec::new();
    for j in 1..=m {
        let raw = r.bytes()?;
        let record = r.bytes()?;
        let c = decode_claimed(record, topic_max).ok_or_else(|| {
            Error::protocol("claim", "a record the script passed cannot be decoded")
        })?;
        let max_attempts = c.max.clamp(0, u32::MAX as i64) as u32;
        let id = match String::from_utf8(raw) {
            Ok(id) => id,
            Err(e) => {
                not_text.push((j, e.into_bytes(), token));
                continue;
            }
        };
        out.push(Delivery {
            topic: topic.to_string(),
            id,
            token,
            attempt: 1,
            max_attempts,
            due_ms: c.due,
            created_ms: c.created,
            payload: c.payload,
            deadline_ms: c.opts.deadline_ms,
            timeout: c.opts.timeout_ms.map(Duration::from_millis),
            group: c.opts.group,
            traceparent: c.opts.traceparent,
            tracestate: c.opts.tracestate,
            claimed_us,
            received,
            sent,
            extended: None,
            cancelled: Default::default(),
        });
    }
    while r.len() > 1 {
        let j = r.int()?;
        let attempt = r.int()?.clamp(0, u32::MAX as i64) as u32;
        if j < 1 || j as usize > m {
            return Err(Error::protocol(
                "claim",
                "an attempt for a job not in the reply",
            ));
        }
        let j = j as usize;
        // Jobs not handed out before it shift its place in `out`.
        let skipped = not_text.iter().take_while(|(k, _, _)| *k < j).count();
        if not_text.iter().any(|(k, _, _)| *k == j) {
            continue;
        }
        out[j - 1 - skipped].attempt = attempt;
    }
    let next_due = match r.int()? {
        us if us < 0 => None,
        us => Some(Duration::from_micros(us as u64)),
    };
    // An id that is not UTF-8 (stored before enqueue refused them) cannot
    // be handed out: a Delivery's id is text, and its ack would name
    // another id. It goes to dead at once, for a person to see.
    for (_, raw, token) in not_text {
        let dead = queue
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
    Ok(Claimed {
        jobs: out,
        wait,
        next_due,
        clock: Some((claimed_us, received)),
    })
}

#[cfg(test)]
mod tests {
    use super::{decode_claimed, Delivery};
    use std::time::{Duration, Instant};

    fn delivery(deadline_ms: Option<i64>, lease: Option<Duration>) -> Delivery {
        let now = Instant::now();
        Delivery {
            topic: "t".into(),
            id: "a".into(),
            token: 1,
            attempt: 1,
            max_attempts: 3,
            due_ms: 1_000,
            created_ms: 1_000,
            payload: Vec::new(),
            deadline_ms,
            timeout: None,
            group: None,
            traceparent: None,
            tracestate: None,
            claimed_us: 1_000_000,
            received: now,
            sent: now,
            extended: lease.map(|l| std::sync::Arc::new(crate::held::Extended::new(l))),
            cancelled: Default::default(),
        }
    }

    #[test]
    fn start_by_is_when_expiry_or_lease_doubt_would_refuse_the_start() {
        assert_eq!(delivery(None, None).start_by(), None);
        // Expiry 50 ms after the claim's clock: start_by is its last
        // microsecond, where expiry_error still says it may start.
        let d = delivery(Some(1_050), None);
        let by = d.start_by().unwrap();
        let from = d.received;
        assert_eq!(by.duration_since(from), Duration::from_micros(50_999));
        // A lease of 40 ms comes in doubt after 20 ms: the earlier wins.
        let d = delivery(Some(1_050), Some(Duration::from_millis(40)));
        assert_eq!(
            d.start_by().unwrap().duration_since(d.sent),
            Duration::from_millis(20)
        );
        let d = delivery(Some(1_010), Some(Duration::from_millis(40)));
        assert_eq!(
            d.start_by().unwrap().duration_since(d.sent),
            Duration::from_micros(10_999)
        );
        // Both checks agree with it once it has passed.
        std::thread::sleep(Duration::from_millis(25));
        let d0 = delivery(Some(1_050), Some(Duration::from_millis(40)));
        assert!(d0.start_by().unwrap() > Instant::now());
        assert!(!d0.lease_in_doubt() && d0.expiry_error().is_none());
        let mut late = d0.clone();
        late.sent -= Duration::from_millis(30);
        late.received = late.sent;
        assert!(late.start_by().unwrap() < Instant::now());
        assert!(late.lease_in_doubt());
        late.extended = None;
        late.received -= Duration::from_millis(30);
        late.sent = late.received;
        assert!(late.start_by().unwrap() < Instant::now());
        assert!(late.expiry_error().is_some());
    }

    #[test]
    fn claimed_records_decode_as_the_lua_did() {
        let dec = |r: &[u8]| {
            let c = decode_claimed(r.to_vec(), 6)?;
            Some((c.max, c.due, c.created, c.payload))
        };
        // The example of docs/PROTOCOL.md ("A record decoded by hand").
        let r = b"5:mx34zkpw:0:60000,300000:0:{\"order\":10086}";
        let (max, due, created, payload) = dec(r).unwrap();
        assert_eq!(max, 5);
        assert_eq!(due, i64::from_str_radix("mx34zkpw", 36).unwrap());
        assert_eq!(created, due);
        assert_eq!(payload, b"{\"order\":10086}");
        // Topic default, a gap, a last error, colons in the payload.
        let (max, due, created, payload) = dec(b":1z:a::4:boom:x:y").unwrap();
        assert_eq!((max, due, created), (6, 71, 61));
        assert_eq!(payload, b":x:y");
        // An error length past the end leaves an empty payload.
        assert_eq!(dec(b":1:1::9:ab").unwrap().3, b"");
        // Digits past i64 saturate; upper case is base 36 too.
        let (_, due, created, _) = dec(b":zzzzzzzzzzzzzzzzzzzz:0::0:").unwrap();
        assert_eq!((due, created), (i64::MAX, i64::MAX));
        assert_eq!(dec(b":1Z:A::0:").unwrap().1, 71);
        assert_eq!(dec(b":1:1::99999999999999999999:ab").unwrap().3, b"");
        // Options after the max attempts.
        let c = decode_claimed(b"3;e10;t500;gacme:1z:a::0:p".to_vec(), 6).unwrap();
        assert_eq!((c.max, c.due, c.payload.as_slice()), (3, 71, &b"p"[..]));
        assert_eq!(c.opts.deadline_ms, Some(36));
        assert_eq!(c.opts.timeout_ms, Some(500));
        assert_eq!(c.opts.group.as_deref(), Some("acme"));
        assert_eq!(decode_claimed(b";gx:1z:a::0:p".to_vec(), 6).unwrap().max, 6);
        for bad in [
            &b"1:2:3:4"[..],
            b"x:1:1::0:",
            b":1::a:0:",
            b":1:1:a:0:",
            b":1:1::-1:",
            b"3;q1:1:1::0:",
            b"3;:1:1::0:",
        ] {
            assert!(
                decode_claimed(bad.to_vec(), 6).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
