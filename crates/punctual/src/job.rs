//! What producers send and what readers get back.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

pub(crate) use crate::enqueued::{EnqueueStatus, Enqueued};
use crate::error::{Error, Result};
use crate::keys::validate_id;

/// Most deliveries a job may be given ([`Job::max_attempts`], and a topic's
/// default): a larger number is refused as a mistake.
///
/// ```
/// use punctual::{Job, MAX_ATTEMPTS};
/// assert!(Job::new("x").max_attempts(MAX_ATTEMPTS).validate().is_ok());
/// assert!(Job::new("x").max_attempts(MAX_ATTEMPTS + 1).validate().is_err());
/// ```
pub const MAX_ATTEMPTS: u32 = 10_000;

/// Ten years: a longer delay is refused as a mistake.
///
/// ```
/// use std::time::Duration;
/// use punctual::{Job, MAX_DELAY};
/// assert!(Job::new("x").delay(MAX_DELAY).validate().is_ok());
/// let err = Job::new("x").delay(MAX_DELAY + Duration::from_secs(1)).validate().unwrap_err();
/// assert_eq!(err.kind(), punctual::ErrorKind::InvalidInput);
/// ```
pub const MAX_DELAY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// When a job is due.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use punctual::{Job, When};
///
/// assert_eq!(When::default(), When::Now);
/// let in_an_hour = Job::new("x").when(When::Delay(Duration::from_secs(3600)));
/// let at_noon = Job::new("x").when(When::At(SystemTime::UNIX_EPOCH + Duration::from_secs(43_200)));
/// assert!(in_an_hour.validate().is_ok() && at_noon.validate().is_ok());
/// // Before 1970 cannot be sent.
/// let early = Job::new("x").when(When::At(SystemTime::UNIX_EPOCH - Duration::from_secs(1)));
/// assert!(early.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum When {
    /// Due as soon as it is enqueued.
    #[default]
    Now,
    /// Due this long after Redis receives it (measured by Redis `TIME`).
    Delay(Duration),
    /// Due at this wall-clock time (compared with Redis `TIME`). A time in the
    /// past means due now.
    At(SystemTime),
}

/// Whole milliseconds, rounded up: a delay of 1.5 ms waits 2 ms, never 1
/// (a job is never early, not even by a fraction of a millisecond).
pub(crate) fn ceil_ms(d: Duration) -> u128 {
    d.as_nanos().div_ceil(1_000_000)
}

impl When {
    /// The script's encoding: `d<ms>` or `a<epoch ms>`.
    pub(crate) fn encode(&self) -> Result<String> {
        match *self {
            When::Now => Ok("d0".into()),
            When::Delay(d) => {
                if d > MAX_DELAY {
                    return Err(Error::invalid(format!(
                        "invalid delay {}s: delays are at most ten years",
                        d.as_secs()
                    )));
                }
                Ok(format!("d{}", ceil_ms(d)))
            }
            When::At(t) => {
                let ms = t.duration_since(UNIX_EPOCH).map_err(|_| {
                    Error::invalid("invalid due time: before 1970; give a time after the epoch")
                })?;
                Ok(format!("a{}", ceil_ms(ms)))
            }
        }
    }
}

/// A job to enqueue: a payload and options, built with chained calls.
///
/// ```
/// use std::time::Duration;
/// let job = punctual::Job::new(r#"{"order": 10086}"#)
///     .id("order:10086")
///     .delay(Duration::from_secs(30 * 60))
///     .max_attempts(3);
/// assert!(job.validate().is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    pub(crate) payload: Vec<u8>,
    pub(crate) when: When,
    pub(crate) id: Option<String>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<Vec<Duration>>,
    pub(crate) expire: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) group: Option<String>,
    pub(crate) traceparent: Option<String>,
    pub(crate) tracestate: Option<String>,
}

impl Job {
    /// A job with this payload, due now, with a generated id.
    ///
    /// ```
    /// let job = punctual::Job::new("close order 10086");
    /// assert_eq!(job.payload(), b"close order 10086");
    /// let bytes = punctual::Job::new(vec![0u8, 159, 146, 150]); // any bytes
    /// assert_eq!(bytes.payload().len(), 4);
    /// ```
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Job {
            payload: payload.into(),
            when: When::Now,
            id: None,
            max_attempts: None,
            backoff: None,
            expire: None,
            timeout: None,
            group: None,
            traceparent: None,
            tracestate: None,
        }
    }

    /// A job whose payload is `value` as JSON.
    ///
    /// ```
    /// let job = punctual::Job::json(&serde_json::json!({"order": 1})).unwrap();
    /// assert_eq!(job.payload(), br#"{"order":1}"#);
    /// ```
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        serde_json::to_vec(value)
            .map(Job::new)
            .map_err(|e| Error::invalid(format!("payload is not serializable as JSON: {e}")))
    }

    /// Due `delay` from now (Redis's now).
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = punctual::Job::new("x").delay(Duration::from_secs(30 * 60));
    /// assert!(job.validate().is_ok());
    /// ```
    pub fn delay(mut self, delay: Duration) -> Self {
        self.when = When::Delay(delay);
        self
    }

    /// Due at `at`, compared with Redis's clock.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// let tomorrow = SystemTime::now() + Duration::from_secs(24 * 3600);
    /// let job = punctual::Job::new("x").at(tomorrow);
    /// assert!(job.validate().is_ok());
    /// ```
    pub fn at(mut self, at: SystemTime) -> Self {
        self.when = When::At(at);
        self
    }

    /// Due as `when` says.
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::{Job, When};
    /// let delay: Option<Duration> = None; // e.g. from a request
    /// let when = delay.map_or(When::Now, When::Delay);
    /// assert!(Job::new("x").when(when).validate().is_ok());
    /// ```
    pub fn when(mut self, when: When) -> Self {
        self.when = when;
        self
    }

    /// Use this id instead of a generated one. While a job with this id is
    /// live in the topic, enqueueing it again is a duplicate (or replaces it,
    /// with [`crate::EnqueueOptions::replace`]).
    ///
    /// ```
    /// let job = punctual::Job::new("x").id("order:10086");
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").id("bad\nid").validate().is_err());
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How many deliveries before the job goes to dead (default: the topic's
    /// setting, else 6): 1 to [`MAX_ATTEMPTS`].
    ///
    /// ```
    /// assert!(punctual::Job::new("x").max_attempts(3).validate().is_ok());
    /// assert!(punctual::Job::new("x").max_attempts(0).validate().is_err());
    /// ```
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Delays before retries: the n-th failure waits `ladder[n-1]` (the last
    /// step repeats). Default: the topic's ladder, else 0s, 5s, 30s, 2m, 10m, 30m.
    ///
    /// ```
    /// use std::time::Duration;
    /// // Retry after 10 s, then 1 min, then every 5 min.
    /// let job = punctual::Job::new("x").backoff(vec![
    ///     Duration::from_secs(10),
    ///     Duration::from_secs(60),
    ///     Duration::from_secs(300),
    /// ]);
    /// assert!(job.validate().is_ok());
    /// ```
    pub fn backoff(mut self, ladder: Vec<Duration>) -> Self {
        self.backoff = Some(ladder);
        self
    }

    /// Expiry: the job may start only within `window` after its due time
    /// (1 ms to ten years; fractions of a ms round up). Past that, a claim
    /// moves it to dead with the last error `expired: ...` instead of
    /// handing it out. The deadline is fixed at enqueue (due time +
    /// window): retries do not extend it; a reschedule moves it with the due
    /// time.
    ///
    /// ```
    /// use std::time::Duration;
    /// // A reminder that is pointless an hour after it was due.
    /// let job = punctual::Job::new("remind").delay(Duration::from_secs(600)).expire(Duration::from_secs(3600));
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").expire(Duration::ZERO).validate().is_err());
    /// ```
    pub fn expire(mut self, window: Duration) -> Self {
        self.expire = Some(window);
        self
    }

    /// The handler timeout for this job (1 ms to ten years; fractions of a
    /// ms round up), used by the worker instead of its configured one.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = punctual::Job::new("resize").timeout(Duration::from_secs(30));
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").timeout(Duration::ZERO).validate().is_err());
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The job's group (a tenant, customer or shop): 1 to
    /// [`crate::MAX_GROUP_LEN`] bytes of ASCII letters, digits, `_`, `.`,
    /// `@` and `-` ([`crate::validate_group`]).
    ///
    /// ```
    /// assert!(punctual::Job::new("x").group("shop-17").validate().is_ok());
    /// assert!(punctual::Job::new("x").group("shop 17").validate().is_err());
    /// ```
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The producer's W3C trace context (`traceparent`, checked by
    /// [`crate::validate_traceparent`]): stored with the job, kept through
    /// retries, reclaims and replays, handed to every attempt
    /// ([`crate::Delivery::traceparent`]), and the parent of the spans
    /// `punctual serve` exports. With the `opentelemetry` feature, a job
    /// without one takes the current tracing span's OpenTelemetry context
    /// when it is valid.
    ///
    /// ```
    /// let job = punctual::Job::new("x")
    ///     .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    ///     .tracestate("rojo=00f067aa0ba902b7");
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").traceparent("00-0-0-01").validate().is_err());
    /// ```
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// The producer's W3C `tracestate`, which goes with
    /// [`Job::traceparent`] (refused without one): at most
    /// [`crate::MAX_TRACESTATE_LEN`] bytes of printable ASCII.
    ///
    /// ```
    /// assert!(punctual::Job::new("x").tracestate("rojo=1").validate().is_err());
    /// ```
    pub fn tracestate(mut self, tracestate: impl Into<String>) -> Self {
        self.tracestate = Some(tracestate.into());
        self
    }

    /// The payload.
    ///
    /// ```
    /// assert_eq!(punctual::Job::new("hello").payload(), b"hello");
    /// ```
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Checks everything that can be checked without Redis (the payload
    /// limit is checked by [`crate::Queue`], which knows it).
    ///
    /// ```
    /// let err = punctual::Job::new("x").id("").validate().unwrap_err();
    /// assert!(err.to_string().starts_with("invalid id"), "{err}");
    /// assert!(punctual::Job::new("x").validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<()> {
        if let Some(id) = &self.id {
            validate_id(id)?;
        }
        if let Some(m) = self.max_attempts {
            check_max_attempts(m)?;
        }
        if let Some(ladder) = &self.backoff {
            if let Some(step) = ladder.iter().find(|d| **d > MAX_DELAY) {
                return Err(Error::invalid(format!(
                    "invalid backoff step {}s: steps are at most ten years",
                    step.as_secs()
                )));
            }
        }
        for (what, letter, d) in [("expiry", 'x', self.expire), ("timeout", 't', self.timeout)] {
            if let Some(d) = d {
                if d.is_zero() || d > MAX_DELAY {
                    return Err(Error::invalid(format!(
                        "invalid {what} ({letter}) of {d:?}: give 1 ms to ten years"
                    )));
                }
            }
        }
        if let Some(g) = &self.group {
            crate::options::validate_group(g)?;
        }
        if let Some(tp) = &self.traceparent {
            crate::options::validate_traceparent(tp)?;
        }
        if let Some(ts) = &self.tracestate {
            if self.traceparent.is_none() {
                return Err(Error::invalid(
                    "a tracestate needs a traceparent: give both, or neither",
                ));
            }
            crate::options::validate_tracestate(ts)?;
        }
        self.when.encode().map(drop)
    }

    /// The enqueue script's "max attempts" argument: the max attempts (empty
    /// for the topic's default), then the options,
    /// `;x<ms>;t<ms>;g<group>;p<traceparent>;s<tracestate, escaped>`.
    pub(crate) fn max_arg(&self) -> String {
        let mut s = self.max_attempts.map(|m| m.to_string()).unwrap_or_default();
        if let Some(d) = self.expire {
            s.push_str(&format!(";x{}", ceil_ms(d)));
        }
        if let Some(d) = self.timeout {
            s.push_str(&format!(";t{}", ceil_ms(d)));
        }
        if let Some(g) = &self.group {
            s.push_str(";g");
            s.push_str(g);
        }
        if let Some(tp) = &self.traceparent {
            s.push_str(";p");
            s.push_str(tp);
            if let Some(ts) = self.tracestate.as_deref().filter(|t| !t.is_empty()) {
                s.push_str(";s");
                s.push_str(&crate::options::escape_tracestate(ts));
            }
        } else {
            #[cfg(feature = "opentelemetry")]
            if let Some((tp, ts)) = crate::otel::current_context() {
                s.push_str(";p");
                s.push_str(&tp);
                if !ts.is_empty() {
                    s.push_str(";s");
                    s.push_str(&crate::options::escape_tracestate(&ts));
                }
            }
        }
        s
    }

    pub(crate) fn backoff_arg(&self) -> String {
        self.backoff
            .as_ref()
            .map(|l| {
                l.iter()
                    .map(|d| ceil_ms(*d).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    }
}

/// Refuses a max attempts outside 1..=[`MAX_ATTEMPTS`].
pub(crate) fn check_max_attempts(m: u32) -> Result<()> {
    if m == 0 || m > MAX_ATTEMPTS {
        return Err(Error::invalid(format!(
            "invalid max attempts {m}: max attempts must be at least 1 and at most {MAX_ATTEMPTS}"
        )));
    }
    Ok(())
}

/// Options of one enqueue call ([`crate::Queue::enqueue_with`]).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::{EnqueueOptions, EnqueueStatus, Job};
/// let opts = EnqueueOptions::default().replace(true);
/// let out = queue.enqueue_with("orders", vec![Job::new("v2").id("order:1")], &opts).await?;
/// assert_ne!(out[0].status, EnqueueStatus::Duplicate);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EnqueueOptions {
    /// Replace a live job with the same id instead of reporting a duplicate.
    pub replace: bool,
    /// Mark each job created in `P:{T}:fired` (kept 7 days), in the same
    /// script as its enqueue, and create none whose id is marked there
    /// ([`EnqueueStatus::FiredBefore`]): what makes an import rerun after an
    /// interruption enqueue nothing twice, even for jobs that ran meanwhile.
    pub mark: bool,
}

impl EnqueueOptions {
    /// Replace live jobs with the same id.
    ///
    /// ```
    /// assert!(punctual::EnqueueOptions::default().replace(true).replace);
    /// ```
    pub fn replace(mut self, yes: bool) -> Self {
        self.replace = yes;
        self
    }

    /// Mark the jobs created in `P:{T}:fired` (7 days), and create none
    /// whose id is marked there (see [`EnqueueOptions::mark`] the field,
    /// and [`crate::Queue::unmark`]).
    ///
    /// ```
    /// assert!(punctual::EnqueueOptions::default().mark(true).mark);
    /// ```
    pub fn mark(mut self, yes: bool) -> Self {
        self.mark = yes;
        self
    }
}

/// Where a job is.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::State;
/// if let Some(job) = queue.get("orders", "order:1").await? {
///     match job.state {
///         State::Pool | State::Ready => println!("waiting"),
///         State::Running => println!("running, attempt {}", job.attempts),
///         State::Dead => println!("dead: {:?}", job.last_error),
///         _ => println!("{}", job.state),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum State {
    /// Waiting for its due time.
    Pool,
    /// Due, waiting for a worker.
    Ready,
    /// Leased by a worker.
    Running,
    /// In the dead-letter set.
    Dead,
    /// A record in no set: a broken invariant that `check` reports.
    Orphan,
}

impl State {
    /// The lowercase name.
    ///
    /// ```
    /// assert_eq!(punctual::State::Pool.as_str(), "pool");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Pool => "pool",
            State::Ready => "ready",
            State::Running => "running",
            State::Dead => "dead",
            State::Orphan => "orphan",
        }
    }
}

/// Parses the lowercase name ([`State::as_str`]).
///
/// ```
/// let s: punctual::State = "running".parse()?;
/// assert_eq!(s, punctual::State::Running);
/// assert!("Running".parse::<punctual::State>().is_err());
/// # Ok::<(), punctual::Error>(())
/// ```
impl std::str::FromStr for State {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<State> {
        Ok(match s {
            "pool" => State::Pool,
            "ready" => State::Ready,
            "running" => State::Running,
            "dead" => State::Dead,
            "orphan" => State::Orphan,
            _ => {
                return Err(crate::Error::invalid(format!(
                    "unknown state {s:?}: give pool, ready, running, dead or orphan"
                )))
            }
        })
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job as stored, from [`crate::Queue::get`] or the dead list.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// if let Some(job) = queue.get("orders", "order:1").await? {
///     let wait_ms = job.due_ms - job.now_ms;
///     println!("{} in {}, due in {wait_ms} ms", job.id, job.state);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct JobInfo {
    /// The id.
    pub id: String,
    /// Where it is.
    pub state: State,
    /// Deliveries so far (attempts count at claim time).
    pub attempts: u32,
    /// Deliveries allowed before dead.
    pub max_attempts: u32,
    /// Due time, epoch ms (Redis clock).
    pub due_ms: i64,
    /// Creation time, epoch ms (Redis clock).
    pub created_ms: i64,
    /// Lease deadline (running) or time of death (dead), epoch ms.
    pub state_since_ms: Option<i64>,
    /// The last error, if an attempt failed.
    pub last_error: Option<String>,
    /// The payload.
    #[serde(serialize_with = "ser_payload")]
    pub payload: Vec<u8>,
    /// Redis's clock when this was read, epoch ms.
    pub now_ms: i64,
    /// The expiry deadline ([`Job::expire`]): the job may start only until
    /// then, epoch ms.
    pub deadline_ms: Option<i64>,
    /// The handler timeout of this job ([`Job::timeout`]), ms.
    pub timeout_ms: Option<u64>,
    /// The job's group ([`Job::group`]).
    pub group: Option<String>,
    /// The producer's trace context ([`Job::traceparent`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Its tracestate ([`Job::tracestate`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

fn ser_payload<S: serde::Serializer>(p: &[u8], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(p))
}

/// Sizes and counters of a topic ([`crate::Queue::stats`]).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let s = queue.stats("orders").await?;
/// println!("{} waiting, {} ready, {} running, {} dead", s.pool, s.ready, s.running, s.dead);
/// if s.overdue > 0 {
///     eprintln!("{} jobs overdue: is a scheduler running?", s.overdue);
/// }
/// let done = s.counters.get("done").copied().unwrap_or(0);
/// # let _ = done;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct TopicStats {
    /// The topic.
    pub topic: String,
    /// How many partitions it has (1: not partitioned).
    pub partitions: u32,
    /// Jobs waiting for their due time.
    pub pool: u64,
    /// Due jobs waiting for a worker.
    pub ready: u64,
    /// Leased jobs: started, or waiting inside a worker to start (see
    /// `waiting`).
    pub running: u64,
    /// Of `running`, the jobs leased by a worker but not started yet
    /// (waiting inside it for a place to start, as in a resident pool's
    /// queue), as the live workers' last beats report them (the registry:
    /// [`crate::registry::ProcessInfo::waiting`]); at most `running`.
    pub waiting: u64,
    /// Dead jobs.
    pub dead: u64,
    /// Whether workers are told not to claim.
    pub paused: bool,
    /// Milliseconds until the next due job, if any.
    pub next_due_in_ms: Option<i64>,
    /// Milliseconds the oldest ready job has waited, if any.
    pub oldest_ready_ms: Option<i64>,
    /// Jobs still in the pool although their due time has passed (no
    /// scheduler running, or one too slow). 0 within a tick when healthy.
    pub overdue: u64,
    /// Milliseconds the most overdue job in the pool is past its due time,
    /// if any is overdue.
    pub overdue_ms: Option<i64>,
    /// Counters since the topic began: enqueued, duplicates, claimed, done,
    /// retried, dead, expired (also counted in dead), reclaimed, promoted,
    /// cancelled, replayed, purged, orphans.
    pub counters: std::collections::BTreeMap<String, u64>,
    /// The topic's limits ([`crate::Queue::set_limits`]); on a partitioned
    /// topic, the partitions' shares added up.
    pub limits: crate::Limits,
    /// Which limit holds ready jobs back right now (None: none does, or
    /// ready is empty). On a partitioned topic, that of any partition
    /// (`max_running` first).
    pub limited: Option<crate::Limited>,
}

/// One broken invariant found by [`crate::Queue::check`].
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for v in queue.check("orders").await? {
///     eprintln!("{} {}: {}", v.topic, v.id, v.problem);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The topic.
    pub topic: String,
    /// The job id.
    pub id: String,
    /// What is wrong, e.g. `in pool,ready` or `no record (in running)`.
    pub problem: String,
}

/// Which dead jobs to replay or purge.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::DeadSelector;
/// queue.dead_replay("orders", DeadSelector::Ids(vec!["order:1".into()])).await?;
/// queue.dead_replay("orders", DeadSelector::Oldest(100)).await?;
/// queue.dead_purge("orders", DeadSelector::All).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DeadSelector {
    /// These ids.
    Ids(Vec<String>),
    /// The oldest n.
    Oldest(usize),
    /// All of them (purge only; replays all in batches).
    All,
}

/// A job as a listing shows it ([`crate::Queue::list`],
/// [`crate::Queue::peek`]): its id and its score in the state's set, epoch
/// ms (pool and ready: due time; running: lease deadline; dead: time of
/// death).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for punctual::Listed { id, at_ms, .. } in queue.peek("orders", punctual::State::Pool, 10).await? {
///     println!("{id} is due at {at_ms}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Listed {
    /// The job id.
    pub id: String,
    /// Its score in the state's set, epoch ms (for a job in the cold pool,
    /// its record's due time).
    pub at_ms: i64,
}

/// One page of [`crate::Queue::list`]: ids with their score in the state's
/// set (pool: due time; ready: due time; running: lease deadline; dead: time
/// of death; epoch ms), sorted by it, and the cursor of the next page.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let page = queue.list("orders", punctual::State::Dead, "", None, 100).await?;
/// for job in &page.jobs {
///     println!("{} died at {}", job.id, job.at_ms);
/// }
/// if page.cursor.is_some() {
///     println!("more on the next page");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ListPage {
    /// Ids and scores (ms), lowest score first within the page.
    pub jobs: Vec<Listed>,
    /// Pass it back for the next page; `None`: the listing is complete.
    pub cursor: Option<String>,
}

/// What [`crate::Queue::delete_topic`] did.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::TopicDeleted;
/// match queue.delete_topic("old-orders").await? {
///     TopicDeleted::Deleted => println!("deleted"),
///     TopicDeleted::Unknown => println!("no such topic"),
///     TopicDeleted::HoldsJobs(n) => println!("refused: {n} jobs left"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopicDeleted {
    /// Its keys and its entries in the topic set and partition counts are gone.
    Deleted,
    /// No such topic: not listed, no partition count, no key.
    Unknown,
    /// Refused: it holds this many jobs (in any state or partition); nothing
    /// was deleted.
    HoldsJobs(u64),
}

/// When replayed dead jobs become due ([`crate::Queue::dead_replay_paced`]).
///
/// The pacing is in the jobs' due times (Redis's clock, read once at the
/// start): paced jobs wait in pool, so it holds without the caller staying
/// alive, and a scheduler releases them.
///
/// ```
/// use std::time::Duration;
/// use punctual::ReplayPace;
///
/// let pace = ReplayPace::Rate { jobs: 100, per: Duration::from_secs(1) };
/// assert_eq!(pace.offset(250, 50_000), Duration::from_millis(2500));
/// let pace = ReplayPace::Spread(Duration::from_secs(600));
/// assert_eq!(pace.offset(1, 600), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplayPace {
    /// Every job due now, in ready.
    #[default]
    Now,
    /// `jobs` per `per`: the i-th job replayed (from 0) is due
    /// i × per / jobs after the start.
    Rate {
        /// Jobs per `per` (at least 1).
        jobs: u64,
        /// The period (at least 1 ms).
        per: Duration,
    },
    /// Evenly over this window: the i-th of n is due i × window / n after
    /// the start (the last one a step before the window ends).
    Spread(Duration),
}

impl ReplayPace {
    /// How long after the start the `i`-th (from 0) of `n` jobs is due.
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::ReplayPace;
    /// assert_eq!(ReplayPace::Now.offset(999, 1000), Duration::ZERO);
    /// let pace = ReplayPace::Spread(Duration::from_secs(100));
    /// assert_eq!(pace.offset(3, 10), Duration::from_secs(30));
    /// ```
    pub fn offset(&self, i: usize, n: usize) -> Duration {
        let ms = match *self {
            ReplayPace::Now => 0,
            ReplayPace::Rate { jobs, per } => i as u128 * per.as_millis() / u128::from(jobs.max(1)),
            ReplayPace::Spread(window) => i as u128 * window.as_millis() / (n.max(1) as u128),
        };
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// The pacing as a user writes it, for messages and the audit trail:
    /// `("rate", "100/s")`, `("rate", "50/10s")`, `("spread", "10m")`;
    /// `None` for [`ReplayPace::Now`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::ReplayPace;
    /// let pace = ReplayPace::Rate { jobs: 100, per: Duration::from_secs(1) };
    /// assert_eq!(pace.describe(), Some(("rate", "100/s".to_string())));
    /// let pace = ReplayPace::Rate { jobs: 50, per: Duration::from_secs(10) };
    /// assert_eq!(pace.describe(), Some(("rate", "50/10s".to_string())));
    /// let pace = ReplayPace::Spread(Duration::from_secs(600));
    /// assert_eq!(pace.describe(), Some(("spread", "10m".to_string())));
    /// assert_eq!(ReplayPace::Now.describe(), None);
    /// ```
    pub fn describe(&self) -> Option<(&'static str, String)> {
        match *self {
            ReplayPace::Now => None,
            ReplayPace::Rate { jobs, per } => {
                let per = exact_span(per);
                let per = per
                    .strip_prefix("1")
                    .filter(|u| u.starts_with(|c: char| c.is_ascii_alphabetic()))
                    .map(str::to_string)
                    .unwrap_or(per);
                Some(("rate", format!("{jobs}/{per}")))
            }
            ReplayPace::Spread(window) => Some(("spread", exact_span(window))),
        }
    }

    /// Checks the pacing: a rate of at least one job per period of at least
    /// 1 ms, a window of at least 1 ms, at most ten years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::ReplayPace;
    /// assert!(ReplayPace::Rate { jobs: 10, per: Duration::from_secs(1) }.validate().is_ok());
    /// assert!(ReplayPace::Rate { jobs: 0, per: Duration::from_secs(1) }.validate().is_err());
    /// assert!(ReplayPace::Spread(Duration::ZERO).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        match *self {
            ReplayPace::Now => Ok(()),
            ReplayPace::Rate { jobs, per } => {
                if jobs == 0 || per < Duration::from_millis(1) || per > MAX_DELAY {
                    return Err(Error::invalid(
                        "replay rate must be at least one job per period of 1 ms to ten years",
                    ));
                }
                Ok(())
            }
            ReplayPace::Spread(w) => {
                if w < Duration::from_millis(1) || w > MAX_DELAY {
                    return Err(Error::invalid("replay spread must be 1 ms to ten years"));
                }
                Ok(())
            }
        }
    }
}

/// A duration in its largest whole unit (`10m`, `90s`, `1500ms`), as
/// `--delay`, `--spread` and rates parse it back.
fn exact_span(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_of_a_millisecond_round_up_never_down() {
        let d = |ns| When::Delay(Duration::from_nanos(ns)).encode().unwrap();
        assert_eq!(d(1_500_000), "d2");
        assert_eq!(d(1), "d1");
        assert_eq!(d(2_000_000), "d2");
        assert_eq!(d(0), "d0");
        let at = When::At(UNIX_EPOCH + Duration::from_nanos(1_000_000_001));
        assert_eq!(at.encode().unwrap(), "a1001");
        let job = Job::new("x").backoff(vec![Duration::from_micros(1500), Duration::from_secs(1)]);
        assert_eq!(job.backoff_arg(), "2,1000");
    }

    #[test]
    fn names_of_states_and_statuses_round_trip_as_serde_writes_them() {
        for s in [
            State::Pool,
            State::Ready,
            State::Running,
            State::Dead,
            State::Orphan,
        ] {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        let err = "Pool".parse::<State>().unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(
            err.to_string().contains("pool, ready, running, dead"),
            "{err}"
        );
        for s in [
            EnqueueStatus::Created,
            EnqueueStatus::Duplicate,
            EnqueueStatus::Replaced,
            EnqueueStatus::Dead,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(s.to_string(), s.as_str());
        }
    }
}
