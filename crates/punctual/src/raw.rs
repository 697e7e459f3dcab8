//! The runtime's low-level operations: claim, ack, fail, extend, tick. Most
//! programs use [`crate::Worker`] and [`crate::Scheduler`], which call these;
//! they are public for runtimes of one's own, tests and benchmarks.
//!
//! Every call names one [`Partition`] (a topic, or one partition of a
//! partitioned topic) and holds jobs by their [`Lease`]: the job id and the
//! fencing token of its claim, which a stale holder cannot use.
//!
//! ```no_run
//! # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
//! use std::time::Duration;
//! use punctual::raw::{self, FailKind, TickLimits};
//!
//! for part in raw::partitions(&queue, "orders").await? {
//!     raw::tick(&queue, &part, &TickLimits::default()).await?;
//!     for job in raw::claim(&queue, &part, 10, Duration::from_secs(30)).await? {
//!         if job.payload.is_empty() {
//!             raw::fail(&queue, &part, &job.lease(), "empty payload", FailKind::Permanent).await?;
//!         } else {
//!             raw::ack(&queue, &part, &[job.lease()]).await?;
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::partition::{partition_name, MAX_PARTITIONS};
use crate::queue::{Queue, MAX_BATCH, MAX_SAFE};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// The name a low-level call takes: a topic (`orders`), or one partition of
/// a partitioned topic (`orders#2`). Checked when made, so a call cannot
/// name keys that no topic has.
///
/// ```
/// use punctual::raw::Partition;
/// let p: Partition = "orders#2".parse()?;
/// assert_eq!((p.topic(), p.index()), ("orders", Some(2)));
/// assert_eq!(Partition::of("orders", 2, 3)?, p);
/// assert_eq!(Partition::of("orders", 0, 1)?.as_str(), "orders");
/// assert!("orders#x".parse::<Partition>().is_err());
/// assert!("orders#1024".parse::<Partition>().is_err());
/// # Ok::<(), punctual::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition(String);

impl Partition {
    /// Partition `i` of `topic` among `k` (the topic itself when `k` is 1).
    ///
    /// ```
    /// use punctual::raw::Partition;
    /// let all: Vec<Partition> = (0..4).map(|i| Partition::of("clicks", i, 4)).collect::<Result<_, _>>()?;
    /// assert_eq!(all[3].as_str(), "clicks#3");
    /// assert!(Partition::of("clicks", 4, 4).is_err());
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn of(topic: &str, i: u32, k: u32) -> Result<Partition> {
        validate_topic(topic)?;
        if k == 0 || k > MAX_PARTITIONS || i >= k {
            return Err(Error::invalid(format!(
                "invalid partition {i} of {k}: give 0 to k-1, with k from 1 to {MAX_PARTITIONS}"
            )));
        }
        Ok(Partition(partition_name(topic, i, k)))
    }

    /// A name taken from this library (a worker's or scheduler's own list),
    /// not checked again.
    pub(crate) fn known(name: &str) -> Partition {
        Partition(name.to_string())
    }

    /// The name, as the keys use it.
    ///
    /// ```
    /// let p = punctual::raw::Partition::of("orders", 1, 2)?;
    /// assert_eq!(p.as_str(), "orders#1");
    /// assert_eq!(punctual::TopicKeys::new("punctual", p.as_str()).pool(), "punctual:{orders#1}:pool");
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The topic this is (a partition of).
    ///
    /// ```
    /// use punctual::raw::Partition;
    /// assert_eq!("orders#5".parse::<Partition>()?.topic(), "orders");
    /// assert_eq!("orders".parse::<Partition>()?.topic(), "orders");
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn topic(&self) -> &str {
        self.0.split_once('#').map_or(&self.0, |(t, _)| t)
    }

    /// Which partition this is, or None for a topic that is not
    /// partitioned.
    ///
    /// ```
    /// use punctual::raw::Partition;
    /// assert_eq!("orders#5".parse::<Partition>()?.index(), Some(5));
    /// assert_eq!("orders".parse::<Partition>()?.index(), None);
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn index(&self) -> Option<u32> {
        self.0.split_once('#').and_then(|(_, i)| i.parse().ok())
    }
}

impl std::str::FromStr for Partition {
    type Err = Error;

    fn from_str(name: &str) -> Result<Partition> {
        let Some((topic, i)) = name.split_once('#') else {
            validate_topic(name)?;
            return Ok(Partition(name.to_string()));
        };
        validate_topic(topic)?;
        let bad = || {
            Error::invalid(format!(
                "invalid partition {name:?}: give topic#i, with i from 0 to {}",
                MAX_PARTITIONS - 1
            ))
        };
        // Decimal without a sign or leading zeros, as partition_name writes it.
        if i.is_empty()
            || !i.bytes().all(|b| b.is_ascii_digit())
            || (i.len() > 1 && i.starts_with('0'))
        {
            return Err(bad());
        }
        match i.parse::<u32>() {
            Ok(n) if n < MAX_PARTITIONS => Ok(Partition(name.to_string())),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Partition {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The partitions of `topic` as the layout in Redis has them (`[topic]`
/// when it is not partitioned).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for part in punctual::raw::partitions(&queue, "orders").await? {
///     println!("{part}");
/// }
/// # Ok(()) }
/// ```
pub async fn partitions(queue: &Queue, topic: &str) -> Result<Vec<Partition>> {
    Ok(queue
        .partition_names(topic)
        .await?
        .into_iter()
        .map(Partition)
        .collect())
}

/// A claimed job as the fenced calls name it: its id and the token of the
/// claim. A lease that expired (the job was reclaimed, cancelled or claimed
/// again) is refused.
///
/// ```
/// let lease = punctual::raw::Lease::new("order:10086", 1_700_000_000_000_000);
/// assert_eq!(lease.id, "order:10086");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The job id.
    pub id: String,
    /// The lease token of the claim ([`Delivery::token`]).
    pub token: i64,
    /// The attempt the claim counted ([`Delivery::attempt`]), or 0 when
    /// unknown ([`Lease::new`]). Only a shortcut: with it, [`ack`] sends
    /// the attempts entry the claim wrote (`0A:T`), which the script checks
    /// with one string comparison; the token alone decides either way.
    pub attempt: u32,
}

impl Lease {
    /// The lease of job `id` claimed with `token`.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
    /// use punctual::raw::{ack, Lease};
    /// // Id and token kept from a claim, e.g. by another process.
    /// let (id, token) = ("order:10086".to_string(), 1_700_000_000_000_000);
    /// let acked = ack(&queue, &part, &[Lease::new(id, token)]).await?;
    /// if !acked[0] {
    ///     println!("the lease expired: another attempt may run");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn new(id: impl Into<String>, token: i64) -> Lease {
        Lease {
            id: id.into(),
            token,
            attempt: 0,
        }
    }

    /// The lease of job `id` claimed with `token` as its attempt `attempt`
    /// (what [`Delivery::lease`] returns).
    ///
    /// ```
    /// let lease = punctual::raw::Lease::with_attempt("order:10086", 1_700_000_000_000_000, 2);
    /// assert_eq!(lease.attempt, 2);
    /// ```
    pub fn with_attempt(id: impl Into<String>, token: i64, attempt: u32) -> Lease {
        Lease {
            id: id.into(),
            token,
            attempt,
        }
    }

    /// The token as `ack` sends it: the attempts entry the claim wrote
    /// (`0A:T`, PROTOCOL.md "Attempts and tokens") when the attempt is
    /// known, else the token alone. Written right to left into `buf`, by
    /// hand: `format!` cost about 1,000 instructions per job (callgrind).
    fn ack_arg<'b>(&self, buf: &'b mut [u8; 32]) -> &'b [u8] {
        // At most 1 + 10 + 1 + 20 bytes ("0" + u32 + ":" + i64): it fits.
        fn digits(buf: &mut [u8; 32], at: &mut usize, mut v: u64) {
            loop {
                *at -= 1;
                buf[*at] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
        }
        let mut at = buf.len();
        digits(buf, &mut at, self.token.unsigned_abs());
        if self.token < 0 {
            at -= 1;
            buf[at] = b'-';
        }
        if self.attempt > 0 {
            at -= 1;
            buf[at] = b':';
            digits(buf, &mut at, u64::from(self.attempt));
            at -= 1;
            buf[at] = b'0';
        }
        &buf[at..]
    }
}

/// How [`fail`] treats the attempt.
///
/// ```
/// use std::time::Duration;
/// use punctual::raw::FailKind;
/// let later = FailKind::Retry { after: Some(Duration::from_secs(60)) };
/// assert_ne!(later, FailKind::Permanent);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// Retry: after `after`, or the topic's backoff ladder when None; to
    /// dead anyway when the attempts are used up.
    Retry {
        /// The delay before the next attempt.
        after: Option<Duration>,
    },
    /// A permanent failure: to dead now.
    Permanent,
}

/// The batch limits of one [`tick`]. The default is the scheduler's.
///
/// ```
/// let limits = punctual::raw::TickLimits { max_ready: 1_000, ..Default::default() };
/// assert_eq!(limits.promote_batch, 200);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickLimits {
    /// Most jobs promoted from pool to ready (1 to 1,000).
    pub promote_batch: usize,
    /// Promotion stops while ready holds this many jobs.
    pub max_ready: usize,
    /// Most expired leases reclaimed (1 to 1,000).
    pub reclaim_batch: usize,
}

impl Default for TickLimits {
    fn default() -> Self {
        TickLimits::from(&crate::SchedulerConfig::default())
    }
}

impl From<&crate::SchedulerConfig> for TickLimits {
    fn from(c: &crate::SchedulerConfig) -> Self {
        TickLimits {
            promote_batch: c.promote_batch,
            max_ready: c.max_ready,
            reclaim_batch: c.reclaim_batch,
        }
    }
}

/// A lease as the scripts take it: 1 ms to ten years.
fn lease_ms(lease: Duration) -> u64 {
    lease.min(crate::job::MAX_DELAY).as_millis().max(1) as u64
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
/// error + payload, see lib.lua; M may carry options, see
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
/// deadline, which [`extend`] pushes back. Ack or fail it with its
/// `token`; a stale token (the lease expired and the job was re-delivered)
/// is refused.
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
    /// When its worker's keeper last extended the lease (see
    /// [`Delivery::lease_in_doubt`]); None outside a worker.
    pub(crate) extended: Option<std::sync::Arc<crate::held::Extended>>,
}

/// A claim's round trip longer than this is taken for a stall between the
/// claim and the reading of its reply (SIGSTOP, a pause, swap): lateness
/// then counts from when the claim was sent ([`Delivery::lateness_us`]).
pub(crate) const STALLED_REPLY: Duration = Duration::from_millis(10);

impl Delivery {
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
        let since = if self.received.duration_since(self.sent) > STALLED_REPLY {
            at.saturating_duration_since(self.sent)
        } else {
            at.saturating_duration_since(self.received)
        };
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

/// What one scheduler tick did ([`tick`]).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
/// use punctual::raw::{tick, TickLimits};
/// // Tick until nothing is left to do now, then sleep until the next due job.
/// loop {
///     let t = tick(&queue, &part, &TickLimits::default()).await?;
///     if !t.more {
///         let nap = t.next_due.unwrap_or(std::time::Duration::from_secs(1));
///         tokio::time::sleep(nap.min(std::time::Duration::from_secs(1))).await;
///     }
/// #   break;
/// }
/// # Ok(()) }
/// ```
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
    /// Time until the next due job in pool, or until the next move of a
    /// cold bucket into pool when that is earlier, by Redis's clock.
    pub next_due: Option<Duration>,
    /// Time until the next lease deadline, by Redis's clock.
    pub next_lease: Option<Duration>,
}

/// What [`fail`] did.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// use punctual::raw::{fail, FailKind, Failed};
/// if fail(&queue, &part, &job.lease(), "bad input", FailKind::Permanent).await? == Failed::Dead {
///     println!("{} is in the dead-letter set", job.id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failed {
    /// Back in pool (or ready), to be retried.
    Retry,
    /// Moved to dead: permanent failure or attempts used up.
    Dead,
    /// Refused: the lease is no longer this caller's.
    Stale,
    /// Handed back unstarted ([`hand_back`]): in ready again, its attempt
    /// not counted.
    Back,
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
            claimed_us,
            received,
            sent,
            cancelled: Default::default(),
            extended: None,
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

/// How one `ack` call sends its leases. The jobs of one claim share its
/// token, so leases are grouped by the argument their token goes as (the
/// attempts entry, or the token alone): the script's grouped form sends each
/// group's token once and one argument per job, not two (PROTOCOL.md
/// "ack"). Pairs of id and token when that is not shorter (a call of one
/// or two jobs, or of as many tokens as jobs). A lease with an empty id is
/// left out: no job has one (enqueue refuses it), and a first argument ""
/// would read as the grouped form.
struct AckPlan {
    /// The positions of the leases sent, group after group (in the pair
    /// form, as given). The script's i-th id is `order[i - 1]`.
    order: Vec<usize>,
    /// Each group's first place in `order` and its count; empty for pairs.
    groups: Vec<(usize, usize)>,
}

impl AckPlan {
    fn of(leases: &[Lease]) -> AckPlan {
        let sent: Vec<usize> = (0..leases.len())
            .filter(|&i| !leases[i].id.is_empty())
            .collect();
        let mut order = sent.clone();
        // Stable: a group's ids go in the order given.
        order.sort_by_key(|&i| (leases[i].token, leases[i].attempt));
        let mut groups: Vec<(usize, usize)> = Vec::new();
        for (at, &i) in order.iter().enumerate() {
            let key = (leases[i].token, leases[i].attempt);
            match groups.last_mut() {
                Some((first, count))
                    if (leases[order[*first]].token, leases[order[*first]].attempt) == key =>
                {
                    *count += 1
                }
                _ => groups.push((at, 1)),
            }
        }
        // Grouped: "", g, a token and a count per group, the ids.
        if 2 + 2 * groups.len() + order.len() >= 2 * order.len() {
            return AckPlan {
                order: sent,
                groups: Vec::new(),
            };
        }
        AckPlan { order, groups }
    }
}

/// Acks jobs: they are done and deleted. Returns one flag per lease: acked,
/// or refused because the lease is no longer held (a lease with an empty
/// id, which no job has, is refused without being sent). An id given twice
/// with one token is acked once; its other places are refused.
/// (The script replies with the number acked and the positions refused.)
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// let acked = punctual::raw::ack(&queue, &part, &[job.lease()]).await?;
/// assert_eq!(acked, [true]);
/// # Ok(()) }
/// ```
pub async fn ack(queue: &Queue, part: &Partition, done: &[Lease]) -> Result<Vec<bool>> {
    let mut flags = Vec::with_capacity(done.len());
    for chunk in done.chunks(MAX_BATCH) {
        let plan = AckPlan::of(chunk);
        let start = flags.len();
        flags.resize(start + chunk.len(), false);
        if plan.order.is_empty() {
            continue;
        }
        let v = queue
            .run(&SCRIPTS.ack, part.as_str(), |inv| {
                let mut buf = [0u8; 32];
                if plan.groups.is_empty() {
                    for &i in &plan.order {
                        inv.arg(&chunk[i].id).arg(chunk[i].ack_arg(&mut buf));
                    }
                } else {
                    inv.arg("").arg(plan.groups.len());
                    for &(first, count) in &plan.groups {
                        inv.arg(chunk[plan.order[first]].ack_arg(&mut buf))
                            .arg(count);
                    }
                    for &i in &plan.order {
                        inv.arg(&chunk[i].id);
                    }
                }
            })
            .await?;
        let mut r = Reply::new("ack", v)?;
        let acked = r.int()?;
        for &i in &plan.order {
            flags[start + i] = true;
        }
        let mut refused = 0;
        while !r.is_empty() {
            match r.int()? {
                p if p >= 1 && p as usize <= plan.order.len() => {
                    flags[start + plan.order[p as usize - 1]] = false
                }
                p => {
                    return Err(Error::protocol(
                        "ack",
                        format!("a refused position {p} out of range"),
                    ))
                }
            }
            refused += 1;
        }
        if acked + refused != plan.order.len() as i64 {
            return Err(Error::protocol(
                "ack",
                "the counts do not add up to the jobs given",
            ));
        }
    }
    Ok(flags)
}

/// Fails an attempt, fenced by the lease: retried (after the given delay or
/// the backoff ladder) or moved to dead (permanent, or the attempts are
/// used up). `error` is kept as the job's last error.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// use punctual::raw::{FailKind, Failed};
/// let kind = FailKind::Retry { after: None };
/// match punctual::raw::fail(&queue, &part, &job.lease(), "card declined", kind).await? {
///     Failed::Retry | Failed::Dead => {}
///     Failed::Stale => println!("someone else holds it now"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
pub async fn fail(
    queue: &Queue,
    part: &Partition,
    lease: &Lease,
    error: &str,
    kind: FailKind,
) -> Result<Failed> {
    let (after, permanent) = match kind {
        FailKind::Retry { after } => (after, false),
        FailKind::Permanent => (None, true),
    };
    let delay = after
        .map(|d| crate::job::ceil_ms(d.min(crate::job::MAX_DELAY)).to_string())
        .unwrap_or_default();
    fail_as(
        queue,
        part,
        lease,
        error,
        &delay,
        if permanent { "1" } else { "0" },
    )
    .await
}

/// Sends a leased job whose expiry ([`crate::Job::expire`]) passed before
/// its handler started to dead, as the claim would have: `error` kept as
/// its last error, counted in the topic's `expired` and `dead`. Fenced
/// like [`fail`].
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// let r = punctual::raw::fail_expired(&queue, &part, &job.lease(), "expired: held past its deadline").await?;
/// assert!(matches!(r, punctual::raw::Failed::Dead | punctual::raw::Failed::Stale));
/// # Ok(()) }
/// ```
pub async fn fail_expired(
    queue: &Queue,
    part: &Partition,
    lease: &Lease,
    error: &str,
) -> Result<Failed> {
    fail_as(queue, part, lease, error, "", "2").await
}

/// Hands a leased job that no handler started back: to ready at once (at
/// its due time's place), its attempt not counted, its last error kept.
/// Fenced like [`fail`]; [`Failed::Back`] when done.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// use std::time::Duration;
/// use punctual::{raw::{self, Failed}, Job};
/// queue.enqueue("mail", Job::new("a").id("a")).await?;
/// let part: raw::Partition = "mail".parse()?;
/// let job = raw::claim(&queue, &part, 1, Duration::from_secs(30)).await?.remove(0);
/// assert_eq!(raw::hand_back(&queue, &part, &job.lease()).await?, Failed::Back);
/// // Claimed again, it is still its first attempt.
/// let again = raw::claim(&queue, &part, 1, Duration::from_secs(30)).await?.remove(0);
/// assert_eq!((again.id.as_str(), again.attempt), ("a", 1));
/// # Ok(()) }
/// ```
pub async fn hand_back(queue: &Queue, part: &Partition, lease: &Lease) -> Result<Failed> {
    fail_as(queue, part, lease, "", "", "3").await
}

async fn fail_as(
    queue: &Queue,
    part: &Partition,
    lease: &Lease,
    error: &str,
    delay: &str,
    kind: &str,
) -> Result<Failed> {
    let v = queue
        .run(&SCRIPTS.fail, part.as_str(), |inv| {
            inv.arg(&lease.id)
                .arg(lease.token)
                .arg(error)
                .arg(delay)
                .arg(kind);
        })
        .await?;
    let mut r = Reply::new("fail", v)?;
    Ok(match r.string()?.as_str() {
        "retry" => Failed::Retry,
        "dead" => Failed::Dead,
        "back" => Failed::Back,
        _ => Failed::Stale,
    })
}

/// Extends leases to now + `lease`, never earlier than they were (a
/// deadline already later stays); returns one flag per lease: extended, or
/// lost (stop working on that job: it was reclaimed or cancelled).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// use std::time::Duration;
/// let held = punctual::raw::extend(&queue, &part, &[job.lease()], Duration::from_secs(30)).await?;
/// if !held[0] {
///     println!("lost the lease of {}", job.id);
/// }
/// # Ok(()) }
/// ```
pub async fn extend(
    queue: &Queue,
    part: &Partition,
    held: &[Lease],
    lease: Duration,
) -> Result<Vec<bool>> {
    let mut flags = Vec::with_capacity(held.len());
    for chunk in held.chunks(MAX_BATCH) {
        let v = queue
            .run(&SCRIPTS.extend, part.as_str(), |inv| {
                inv.arg(lease_ms(lease));
                for l in chunk {
                    inv.arg(&l.id).arg(l.token);
                }
            })
            .await?;
        let f: Vec<i64> =
            redis::from_redis_value(v).map_err(|e| Error::protocol("extend", e.to_string()))?;
        flags.extend(f.into_iter().map(|x| x == 1));
    }
    Ok(flags)
}

/// One scheduler step on `part`: reclaim expired leases, then promote due
/// jobs, at most a batch of each.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
/// let t = punctual::raw::tick(&queue, &part, &Default::default()).await?;
/// println!("promoted {}, next due in {:?}", t.promoted, t.next_due);
/// # Ok(()) }
/// ```
pub async fn tick(queue: &Queue, part: &Partition, limits: &TickLimits) -> Result<Tick> {
    Ok(tick_with_grace(queue, part, limits, Duration::ZERO)
        .await?
        .0)
}

/// [`tick`] that, on a topic without groups, promotes only jobs due more
/// than `grace` ago (workers claim due jobs from the pool themselves; the
/// scheduler promotes what they left). `next_due` is then the time until
/// the earliest due time plus the grace, to the µs. Also returns the tick's
/// Redis time (µs) and when its reply arrived, to map Redis times to the
/// caller's clock.
pub(crate) async fn tick_with_grace(
    queue: &Queue,
    part: &Partition,
    limits: &TickLimits,
    grace: Duration,
) -> Result<(Tick, Option<(i64, std::time::Instant)>)> {
    let v = queue
        .run(&SCRIPTS.tick, part.as_str(), |inv| {
            inv.arg(limits.promote_batch.clamp(1, MAX_BATCH))
                .arg(limits.max_ready.clamp(1, MAX_SAFE))
                .arg(limits.reclaim_batch.clamp(1, MAX_BATCH))
                .arg(grace.as_millis().min(60_000) as u64);
        })
        .await?;
    let received = std::time::Instant::now();
    let mut r = Reply::new("tick", v)?;
    let ms = |v: i64| (v >= 0).then(|| Duration::from_millis(v as u64));
    let mut t = Tick {
        promoted: r.int()? as u64,
        reclaimed: r.int()? as u64,
        dead: r.int()? as u64,
        refused: r.int()? == 1,
        more: r.int()? == 1,
        next_due: ms(r.int()?),
        next_lease: ms(r.int()?),
    };
    // The next due time to the µs (not whole ms, which a sleep rounds up).
    let mut clock = None;
    if !r.is_empty() {
        let us = r.int()?;
        t.next_due = (us >= 0).then(|| Duration::from_micros(us as u64));
        clock = Some((r.int()?, received));
    }
    Ok((t, clock))
}

#[cfg(test)]
mod tests {
    use super::{decode_claimed, AckPlan, Lease, Partition};

    #[test]
    fn ack_args_are_the_attempts_entry_or_the_token() {
        let mut buf = [0u8; 32];
        let l = Lease::with_attempt("a", 1_700_000_000_000_000, 3);
        assert_eq!(l.ack_arg(&mut buf), b"03:1700000000000000");
        assert_eq!(Lease::new("a", -5).ack_arg(&mut buf), b"-5");
        let widest = Lease::with_attempt("a", i64::MIN, u32::MAX);
        assert_eq!(
            widest.ack_arg(&mut buf),
            b"04294967295:-9223372036854775808"
        );
    }

    #[test]
    fn acks_of_jobs_sharing_a_token_go_grouped_and_small_ones_in_pairs() {
        let l = |id: &str, token, attempt| Lease::with_attempt(id, token, attempt);
        // Two claims' jobs interleaved, one of them on its second attempt:
        // 2 + 2 * 3 + 9 = 17 arguments instead of 18.
        let leases = [
            l("a", 9, 1),
            l("b", 7, 1),
            l("c", 9, 1),
            l("d", 7, 1),
            l("e", 9, 2),
            l("f", 7, 1),
            l("g", 9, 1),
            l("h", 7, 1),
            l("i", 9, 1),
        ];
        let plan = AckPlan::of(&leases);
        assert_eq!(plan.order, [1, 3, 5, 7, 0, 2, 6, 8, 4]);
        assert_eq!(plan.groups, [(0, 4), (4, 4), (8, 1)]);
        // Without the last job, pairs are as short: 16 arguments either way.
        let plan = AckPlan::of(&leases[..8]);
        assert!(plan.groups.is_empty());
        assert_eq!(plan.order, (0..8).collect::<Vec<_>>());
        // One token: grouped from five jobs on (9 arguments against 10).
        let one = |n: usize| AckPlan::of(&vec![l("x", 1, 1); n]).groups;
        assert!(one(4).is_empty());
        assert_eq!(one(5), [(0, 5)]);
        assert_eq!(one(1000), [(0, 1000)]);
        assert!(one(0).is_empty());
        // Empty ids are left out, in either form.
        let plan = AckPlan::of(&[l("", 1, 1), l("a", 1, 1), l("", 2, 1)]);
        assert_eq!((plan.order, plan.groups), (vec![1], vec![]));
        let mut six = vec![l("x", 1, 1); 6];
        six[0].id.clear();
        let plan = AckPlan::of(&six);
        assert_eq!(plan.order, [1, 2, 3, 4, 5]);
        assert_eq!(plan.groups, [(0, 5)]);
        assert!(AckPlan::of(&[l("", 1, 1)]).order.is_empty());
        // The token alone (attempt unknown) is a group of its own.
        let plan = AckPlan::of(&[vec![l("x", 1, 0); 5], vec![l("y", 1, 1); 5]].concat());
        assert_eq!(plan.groups, [(0, 5), (5, 5)]);
    }

    #[test]
    fn partitions_are_topics_or_topic_hash_index() {
        for ok in ["orders", "orders#0", "orders#7", "orders#1023"] {
            let p: Partition = ok.parse().unwrap();
            assert_eq!(p.as_str(), ok);
            assert_eq!(p.topic(), "orders");
        }
        for bad in [
            "",
            "a{b}",
            "orders#",
            "orders#-1",
            "orders#01",
            "orders#1024",
            "orders#x",
            "#1",
            "orders#1#2",
            "orders #1",
        ] {
            assert!(bad.parse::<Partition>().is_err(), "{bad:?}");
        }
        assert_eq!(Partition::of("orders", 3, 4).unwrap().index(), Some(3));
        assert!(Partition::of("orders", 4, 4).is_err());
        assert!(Partition::of("orders", 0, 0).is_err());
        assert_eq!(Partition::of("orders", 0, 1).unwrap().index(), None);
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
