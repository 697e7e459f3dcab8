//! [`WorkerConfig`], a [`Worker`](crate::Worker)'s settings.

use std::time::Duration;

use crate::registry::Registry;

/// Most jobs a [`Worker`](crate::Worker) claims per call by default (its concurrency when
/// lower; [`WorkerConfig::claim_batch`] sets another). A claim holds Redis's
/// one thread while it runs (claim and ack together took about 4.3 µs of
/// Redis per job in the drain phase on a 2-core machine),
/// and the worker reads and parses its reply before it claims again:
/// claims of 250 kept Redis busier and drained 100,000 jobs about 12 %
/// faster than claims of 1,000 (BENCHMARKS.md, round 9).
///
/// ```
/// assert_eq!(punctual::DEFAULT_CLAIM_BATCH, 250);
/// ```
pub const DEFAULT_CLAIM_BATCH: usize = 250;

/// Settings of a [`Worker`](crate::Worker).
///
/// ```
/// use std::time::Duration;
/// use punctual::WorkerConfig;
/// let config = WorkerConfig::default()
///     .concurrency(64)
///     .lease(Duration::from_secs(60))
///     .timeout(Duration::from_secs(45));
/// assert_eq!(config.concurrency, 64);
/// assert_eq!(config.shutdown_timeout, Duration::from_secs(30)); // a default
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Jobs run at once in this process (default 16).
    pub concurrency: usize,
    /// Lease length; extended every third of it while a handler runs
    /// (default 30 s).
    pub lease: Duration,
    /// Most jobs one claim takes (default: `concurrency`, at most
    /// [`DEFAULT_CLAIM_BATCH`], 250; at most 1,000 when set).
    pub claim_batch: usize,
    /// Safety net: with no wake-up, look for work this often anyway
    /// (default 30 s). Wake-ups make this matter only after lost messages.
    pub idle_check: Duration,
    /// Handler timeout for topics registered without one (default 30 s).
    /// A job pushed with a timeout of its own ([`crate::Job::timeout`]) is
    /// given that instead, as it is with a topic's own timeout.
    pub timeout: Duration,
    /// After shutdown starts, how long to wait for running handlers and
    /// their acks before giving up on them (their leases will expire and the
    /// jobs be re-delivered) (default 30 s).
    pub shutdown_timeout: Duration,
    /// Longest wait a handler may ask for with [`Outcome::retry_after`](crate::Outcome::retry_after)
    /// (an HTTP `Retry-After`, say): longer ones are cut to this, so no
    /// answer can park a job for years (default 1 day).
    pub max_retry_delay: Duration,
    /// How this worker appears in the process registry (default: it
    /// registers with a generated id and beats every 5 s).
    pub registry: Registry,
    /// After a run's cancellation token fires for a timeout or a lost
    /// lease, how long the handler has to stop by itself before it is
    /// dropped (default 1 s). See [`Handler`](crate::Handler).
    pub cancel_grace: Duration,
    /// After an operator cancelled a running job (its
    /// [`Delivery::cancelled`](crate::Delivery::cancelled) token fired, then the run's token), how long
    /// the handler has to stop by itself before it is dropped (default 5 s).
    pub cancelled_grace: Duration,
    /// How long a done job's ack may wait for others to share its Redis
    /// call (default 0: each goes at once; `serve` uses 2 ms, at most 1 s).
    /// It waits only while fewer than 64 acks of its topic wait, none is in
    /// flight, and this worker still runs other jobs of the topic whose
    /// acks may join it: a lone job, or a topic running one job at a time
    /// (`max_running = 1`), is acked at once. A wait delays only the ack
    /// (the job shows as running meanwhile), not the next job; a worker
    /// killed meanwhile leaves the job to its lease, as for any run not
    /// yet acked.
    pub ack_linger: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 16,
            lease: Duration::from_secs(30),
            claim_batch: 0,
            idle_check: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(30),
            max_retry_delay: Duration::from_secs(24 * 3600),
            registry: Registry::default(),
            cancel_grace: Duration::from_secs(1),
            cancelled_grace: Duration::from_secs(5),
            ack_linger: Duration::ZERO,
        }
    }
}

impl WorkerConfig {
    /// Jobs at once.
    ///
    /// ```
    /// let config = punctual::WorkerConfig::default().concurrency(4);
    /// assert_eq!(config.concurrency, 4);
    /// ```
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    /// Lease length.
    ///
    /// ```
    /// use std::time::Duration;
    /// // A job whose worker died is delivered again about 10 s later; a
    /// // running one has its lease extended every 3.3 s.
    /// let config = punctual::WorkerConfig::default().lease(Duration::from_secs(10));
    /// assert_eq!(config.lease, Duration::from_secs(10));
    /// ```
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = d;
        self
    }
    /// Claim batch size (0: the default, `concurrency` up to
    /// [`DEFAULT_CLAIM_BATCH`]).
    ///
    /// ```
    /// // Take at most 8 jobs per claim, though 32 may run at once.
    /// let config = punctual::WorkerConfig::default().concurrency(32).claim_batch(8);
    /// assert_eq!(config.claim_batch, 8);
    /// ```
    pub fn claim_batch(mut self, n: usize) -> Self {
        self.claim_batch = n;
        self
    }
    /// Safety-net poll interval.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = punctual::WorkerConfig::default().idle_check(Duration::from_secs(10));
    /// assert_eq!(config.idle_check, Duration::from_secs(10));
    /// ```
    pub fn idle_check(mut self, d: Duration) -> Self {
        self.idle_check = d;
        self
    }
    /// Default handler timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// // Handlers registered without a timeout of their own get 5 s.
    /// let config = punctual::WorkerConfig::default().timeout(Duration::from_secs(5));
    /// assert_eq!(config.timeout, Duration::from_secs(5));
    /// ```
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }
    /// Shutdown grace period.
    ///
    /// ```
    /// use std::time::Duration;
    /// // Give running handlers 2 minutes to finish on shutdown.
    /// let config = punctual::WorkerConfig::default().shutdown_timeout(Duration::from_secs(120));
    /// assert_eq!(config.shutdown_timeout, Duration::from_secs(120));
    /// ```
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = d;
        self
    }
    /// Longest retry delay a handler may ask for.
    ///
    /// ```
    /// use std::time::Duration;
    /// // A handler answering Outcome::retry_after("429", 3 days) waits 1 hour.
    /// let config = punctual::WorkerConfig::default().max_retry_delay(Duration::from_secs(3600));
    /// assert_eq!(config.max_retry_delay, Duration::from_secs(3600));
    /// ```
    pub fn max_retry_delay(mut self, d: Duration) -> Self {
        self.max_retry_delay = d;
        self
    }
    /// Registry settings ([`Registry::off`] to stay out of it).
    ///
    /// ```
    /// use punctual::{registry::Registry, WorkerConfig};
    /// let config = WorkerConfig::default().registry(Registry::default().id("billing-7/worker-0"));
    /// assert_eq!(config.registry.id.as_deref(), Some("billing-7/worker-0"));
    /// ```
    pub fn registry(mut self, r: Registry) -> Self {
        self.registry = r;
        self
    }
    /// How long a handler whose token fired (timeout, lost lease) may take
    /// to stop before it is dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = punctual::WorkerConfig::default().cancel_grace(Duration::from_millis(200));
    /// assert_eq!(c.cancel_grace, Duration::from_millis(200));
    /// ```
    pub fn cancel_grace(mut self, d: Duration) -> Self {
        self.cancel_grace = d;
        self
    }
    /// How long a handler whose job an operator cancelled while it ran may
    /// take to stop before it is dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = punctual::WorkerConfig::default().cancelled_grace(Duration::from_secs(10));
    /// assert_eq!(c.cancelled_grace, Duration::from_secs(10));
    /// ```
    pub fn cancelled_grace(mut self, d: Duration) -> Self {
        self.cancelled_grace = d;
        self
    }

    /// Sets [`WorkerConfig::ack_linger`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = punctual::WorkerConfig::default().ack_linger(Duration::from_millis(2));
    /// assert_eq!(c.ack_linger, Duration::from_millis(2));
    /// ```
    pub fn ack_linger(mut self, d: Duration) -> Self {
        self.ack_linger = d.min(Duration::from_secs(1));
        self
    }
}
