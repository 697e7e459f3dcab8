//! The worker runtime: one fetcher claims in batches and hands jobs to
//! `concurrency` slots, claiming no more than its handlers can start now
//! (free slots, and a topic's [`Capacity`] where its handler has one); each
//! slot checks its job's expiry and lease right before the handler starts
//! (DESIGN.md "A lease is taken to be worked on"); a keeper extends the
//! leases of running jobs; a
//! settler records outcomes (acks batched per topic, each fail on its own,
//! none waiting behind another). Idle, the fetcher blocks on a wake-up, or
//! sleeps until the pool's next job is due (claims take due jobs straight
//! from the pool: docs/decisions.md "Workers claim due jobs straight from the
//! pool").

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::handler::{BoxedHandler, Handler, Json, Outcome};
use crate::held::Extended;
use crate::keys::validate_topic;
use crate::queue::{Queue, MAX_BATCH};
use crate::raw::{self, Delivery, FailKind, Failed, Lease, Partition};
use crate::registry::{Registry, Role};

/// Most jobs a [`Worker`] claims per call by default (its concurrency when
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

/// Settings of a [`Worker`].
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
    /// Longest wait a handler may ask for with [`Outcome::retry_after`]
    /// (an HTTP `Retry-After`, say): longer ones are cut to this, so no
    /// answer can park a job for years (default 1 day).
    pub max_retry_delay: Duration,
    /// How this worker appears in the process registry (default: it
    /// registers with a generated id and beats every 5 s).
    pub registry: Registry,
    /// After a run's cancellation token fires for a timeout or a lost
    /// lease, how long the handler has to stop by itself before it is
    /// dropped (default 1 s). See [`Handler`].
    pub cancel_grace: Duration,
    /// After an operator cancelled a running job (its
    /// [`Delivery::cancelled`] token fired, then the run's token), how long
    /// the handler has to stop by itself before it is dropped (default 5 s).
    pub cancelled_grace: Duration,
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
}

struct TopicEntry {
    /// The topic, or one partition of it (`orders#2`): what claims name.
    name: String,
    /// The topic handlers see.
    logical: String,
    handler: BoxedHandler,
    timeout: Duration,
    /// When the handler enforces the job's timeout itself: how long the
    /// worker lets a job run (instead of `timeout` or the job's own).
    backstop: Option<Backstop>,
    /// How many jobs the handler can start now, when it says
    /// ([`Worker::capacity`]): claims take no more.
    gate: Option<Arc<Capacity>>,
}

/// How many jobs of a topic its handler can start now, for a handler that
/// starts jobs on resources of its own (a pool of programs, each taking a
/// few at once): a [`Worker`] given it ([`Worker::capacity`]) claims no
/// more jobs of the topic than are free, so no job waits leased while
/// nobody works on it. The handler opens capacity as its resources become
/// able to start jobs and closes it as they stop; the worker counts a job
/// as using one from its claim until its handler returns.
///
/// ```
/// use punctual::Capacity;
/// let cap = Capacity::new();
/// assert_eq!(cap.free(), 0); // nothing can start yet: nothing is claimed
/// cap.open(4); // a program that takes 4 jobs at once is ready
/// assert_eq!(cap.free(), 4);
/// cap.close(4); // it exited
/// assert_eq!(cap.free(), 0);
/// ```
#[derive(Debug, Default)]
pub struct Capacity {
    state: Mutex<CapacityState>,
    /// Jobs claimed for it that no handler started yet.
    waiting: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct CapacityState {
    open: usize,
    used: usize,
    /// The fetcher's wake-up: told when capacity frees.
    waker: Option<Arc<Notify>>,
}

impl Capacity {
    /// No capacity yet.
    pub fn new() -> Arc<Capacity> {
        Arc::new(Capacity::default())
    }

    /// `n` more jobs can be started at once (a program became ready).
    pub fn open(&self, n: usize) {
        let mut st = self.state.lock().unwrap();
        st.open += n;
        if let Some(w) = &st.waker {
            w.notify_one();
        }
    }

    /// `n` fewer (a program stopped taking jobs).
    pub fn close(&self, n: usize) {
        let mut st = self.state.lock().unwrap();
        st.open = st.open.saturating_sub(n);
    }

    /// A claimed job now waits inside the handler for a place to start
    /// (a resident pool's queue): until [`Capacity::started`], the
    /// worker's registry record counts it as leased but not running
    /// ([`crate::registry::ProcessInfo::waiting`]).
    pub fn waits(&self) {
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A job counted by [`Capacity::waits`] started, or left unstarted.
    pub fn started(&self) {
        let _ = self.waiting.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |n| n.checked_sub(1),
        );
    }

    /// Jobs waiting to start ([`Capacity::waits`]).
    pub fn waiting(&self) -> u64 {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Jobs that could be claimed now: open capacity not in use.
    pub fn free(&self) -> usize {
        let st = self.state.lock().unwrap();
        st.open.saturating_sub(st.used)
    }

    /// Takes up to `want` of the free capacity; returns how much.
    fn take(&self, want: usize) -> usize {
        let mut st = self.state.lock().unwrap();
        let k = st.open.saturating_sub(st.used).min(want);
        st.used += k;
        k
    }

    /// A job that held one unit ended: the fetcher may claim again.
    fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut st = self.state.lock().unwrap();
        st.used = st.used.saturating_sub(n);
        if let Some(w) = &st.waker {
            w.notify_one();
        }
    }

    /// The fetcher took more than its claim brought back: the rest is free
    /// again, without a wake-up (the fetcher knows, and a wake-up here would
    /// have it claim again at once, in a loop, while nothing is due).
    fn unused(&self, n: usize) {
        let mut st = self.state.lock().unwrap();
        st.used = st.used.saturating_sub(n);
    }

    fn wake(&self, notify: Arc<Notify>) {
        self.state.lock().unwrap().waker = Some(notify);
    }
}

/// One job's use of a topic's [`Capacity`], given back when dropped (when
/// its slot ends).
struct Ticket(Option<Arc<Capacity>>);

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.give_back(1);
        }
    }
}

/// See [`Worker::handler_with_backstop`].
type Backstop = Arc<dyn Fn(&Delivery) -> Duration + Send + Sync>;

/// Runs handlers for jobs of some topics.
///
/// It also measures how late each job starts and adds the figures to the
/// topic's per-minute history in Redis every 5 s and when it stops
/// ([`Queue::history`]).
///
/// ```no_run
/// # async fn demo() -> punctual::Result<()> {
/// use punctual::{Outcome, Queue, Worker, WorkerConfig};
/// let queue = Queue::connect("redis://127.0.0.1:6379").await?;
/// Worker::new(queue, WorkerConfig::default().concurrency(8))
///     .handle("orders", |job| async move {
///         println!("closing order {}", String::from_utf8_lossy(&job.payload));
///         Outcome::Done
///     })
///     .run(async { tokio::signal::ctrl_c().await.ok(); })
///     .await?;
/// # Ok(()) }
/// ```
///
/// A test of a handler, end to end, against a private `redis-server`
/// started by `punctual-testkit` (a dev-dependency; it needs
/// `redis-server` on the `PATH`):
///
/// ```
/// use std::time::Duration;
/// use punctual::{CancellationToken, Job, Outcome, Queue, Scheduler, SchedulerConfig, Worker, WorkerConfig};
/// use punctual_testkit::{eventually, RedisServer};
///
/// #[tokio::main]
/// async fn main() {
///     let redis = RedisServer::start(); // stopped when dropped
///     let queue = Queue::connect(redis.url()).await.unwrap();
///     queue.enqueue("orders", Job::new("42")).await.unwrap();
///     let stop = CancellationToken::new();
///     let scheduler = Scheduler::new(queue.clone(), SchedulerConfig::default()).topic("orders");
///     let worker = Worker::new(queue.clone(), WorkerConfig::default())
///         .handle("orders", |_job| async { Outcome::Done });
///     let s = tokio::spawn(scheduler.run(stop.clone().cancelled_owned()));
///     let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
///     eventually(Duration::from_secs(10), "the job is done", async || {
///         let s = queue.stats("orders").await.unwrap();
///         s.pool + s.ready + s.running + s.dead == 0
///     })
///     .await;
///     stop.cancel();
///     s.await.unwrap().unwrap();
///     w.await.unwrap().unwrap();
/// }
/// ```
pub struct Worker {
    queue: Queue,
    config: WorkerConfig,
    topics: Vec<TopicEntry>,
    observer: Option<AttemptObserver>,
}

/// Told of every attempt's end ([`Worker::on_attempt`]).
type AttemptObserver = Arc<dyn Fn(AttemptEnd) + Send + Sync>;

/// One attempt of a job, as it ended ([`Worker::on_attempt`]): what
/// `punctual serve` exports as an OpenTelemetry span.
///
/// ```
/// let end: Option<punctual::AttemptEnd> = None; // given to the observer
/// # let _ = end;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AttemptEnd {
    /// The topic (a partitioned topic's logical name).
    pub topic: String,
    /// The job id.
    pub id: String,
    /// Which delivery this was: 1 on the first.
    pub attempt: u32,
    /// The claim's lease token ([`Delivery::token`]).
    pub token: i64,
    /// The producer's trace context ([`Delivery::traceparent`]).
    pub traceparent: Option<String>,
    /// Its tracestate.
    pub tracestate: Option<String>,
    /// When the handler was started (or the expired job turned down).
    pub started: std::time::SystemTime,
    /// When the handler's answer was in.
    pub ended: std::time::SystemTime,
    /// How late the job started, in microseconds ([`Delivery::lateness_us`]).
    pub lateness_us: i64,
    /// `done`, `retry`, `dead`, `expired`, `handed back`, `cancelled` (an
    /// operator cancelled the job while it ran: [`Delivery::cancelled`]),
    /// or `lost` (the lease was lost while the handler ran: the job was
    /// reclaimed, or cancelled and the message missed; the handler's answer
    /// no longer counts).
    pub outcome: &'static str,
    /// The error of a failed attempt.
    pub error: Option<String>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .field(
                "topics",
                &self.topics.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

struct Settle {
    topic: usize,
    id: String,
    token: i64,
    /// The claim's attempt: the ack sends the attempts entry ("0A:T").
    attempt: u32,
    outcome: Outcome,
}

/// One run of a handler, as the keeper and the shutdown see it.
struct Running {
    /// Cancelled when the lease is lost: the run's slot then fires the
    /// handler's token and drops the run after the grace.
    lost: CancellationToken,
    /// The delivery's [`Delivery::cancelled`]: fired by the cancel
    /// listener when an operator cancelled the job.
    cancelled: CancellationToken,
    /// Drops the run at once (the shutdown timeout).
    abort: AbortHandle,
    /// When the keeper last extended its lease (the delivery's copy tells
    /// a handler that holds it before starting whether it still may).
    extended: Arc<Extended>,
}

struct Shared {
    queue: Queue,
    config: WorkerConfig,
    topics: Vec<TopicEntry>,
    /// Jobs leased by this process, until their ack or fail is recorded:
    /// per topic entry (the index of `topics`), by id.
    inflight: Mutex<Vec<HashMap<String, (i64, Running)>>>,
    /// Cancelled when shutdown starts; each run's token is a child of it.
    stopping: CancellationToken,
    /// How late jobs started, until added to the history in Redis.
    lateness: crate::history::LatenessBook,
    /// Told of every attempt's end ([`Worker::on_attempt`]).
    observer: Option<AttemptObserver>,
}

impl Worker {
    /// A worker with no handlers yet.
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// use punctual::{Queue, Worker, WorkerConfig};
    /// let queue = Queue::connect("redis://127.0.0.1:6379").await?;
    /// let worker = Worker::new(queue, WorkerConfig::default().concurrency(8));
    /// # let _ = worker; Ok(()) }
    /// ```
    pub fn new(queue: Queue, config: WorkerConfig) -> Self {
        Worker {
            queue,
            config,
            topics: Vec::new(),
            observer: None,
        }
    }

    /// Calls `observer` at the end of every attempt this worker runs,
    /// right after the handler answers (before the outcome is written to
    /// Redis), with the job's trace context, timing and outcome: `serve`
    /// exports each as an OpenTelemetry span. It should return at once.
    /// Without one, the worker does none of this work.
    ///
    /// ```
    /// # fn demo(worker: punctual::Worker) -> punctual::Worker {
    /// worker.on_attempt(|end| {
    ///     println!("{} attempt {}: {}", end.id, end.attempt, end.outcome);
    /// })
    /// # }
    /// ```
    pub fn on_attempt(mut self, observer: impl Fn(AttemptEnd) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Runs the closure `handler` for jobs of `topic`, with the default
    /// timeout (see the example on [`Worker`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::sync::{Arc, Mutex};
    /// use punctual::{Job, Outcome, Worker, WorkerConfig};
    /// queue.enqueue("mails", Job::new("welcome:alice")).await?;
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// let worker = Worker::new(queue.clone(), WorkerConfig::default()).handle("mails", move |job| {
    ///     let log = log.clone();
    ///     async move {
    ///         let text = String::from_utf8_lossy(&job.payload).into_owned();
    ///         log.lock().unwrap().push((job.attempt, text));
    ///         Outcome::Done
    ///     }
    /// });
    /// // Run until the job ran (a service would wait for a signal).
    /// let ran = seen.clone();
    /// let stop = async move {
    ///     punctual_testkit::eventually(std::time::Duration::from_secs(10), "the job ran", async || {
    ///         !ran.lock().unwrap().is_empty()
    ///     })
    ///     .await
    /// };
    /// worker.run(stop).await?;
    /// assert_eq!(*seen.lock().unwrap(), [(1, "welcome:alice".to_string())]);
    /// # Ok(()) }
    /// ```
    pub fn handle<F, Fut>(self, topic: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.handler(topic, handler)
    }

    /// Runs the closure `handler` for jobs of `topic`; a run longer than
    /// `timeout` (or the job's own, [`crate::Job::timeout`]) is stopped and
    /// retried.
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue) {
    /// use std::time::Duration;
    /// use punctual::{Outcome, Worker, WorkerConfig};
    /// let worker = Worker::new(queue, WorkerConfig::default())
    ///     .handle_with_timeout("thumbnails", Duration::from_secs(120), |_job| async {
    ///         Outcome::Done
    ///     });
    /// # let _ = worker; }
    /// ```
    pub fn handle_with_timeout<F, Fut>(
        self,
        topic: impl Into<String>,
        timeout: Duration,
        handler: F,
    ) -> Self
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.handler_with_timeout(topic, timeout, handler)
    }

    /// Runs any [`Handler`] for jobs of `topic`, with the default timeout:
    /// a type of yours, a [`BoxedHandler`], or a [`cancellable`](crate::cancellable)
    /// closure that watches its cancellation token.
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue) {
    /// use punctual::{cancellable, Outcome, Worker, WorkerConfig};
    /// let worker = Worker::new(queue, WorkerConfig::default()).handler(
    ///     "exports",
    ///     cancellable(|_job, cancel| async move {
    ///         tokio::select! {
    ///             _ = cancel.cancelled() => Outcome::retry("stopped"),
    ///             _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => Outcome::Done,
    ///         }
    ///     }),
    /// );
    /// # let _ = worker; }
    /// ```
    pub fn handler(self, topic: impl Into<String>, handler: impl Handler) -> Self {
        let timeout = self.config.timeout;
        self.handler_with_timeout(topic, timeout, handler)
    }

    /// [`Worker::handler`] with a timeout of its own.
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue, h: punctual::BoxedHandler) {
    /// use std::time::Duration;
    /// let worker = punctual::Worker::new(queue, Default::default())
    ///     .handler_with_timeout("reports", Duration::from_secs(600), h);
    /// # let _ = worker; }
    /// ```
    pub fn handler_with_timeout(
        mut self,
        topic: impl Into<String>,
        timeout: Duration,
        handler: impl Handler,
    ) -> Self {
        let topic = topic.into();
        self.topics.push(TopicEntry {
            name: topic.clone(),
            logical: topic,
            handler: BoxedHandler::new(handler),
            timeout,
            backstop: None,
            gate: None,
        });
        self
    }

    /// [`Worker::handler`] for a handler that enforces each job's timeout
    /// itself (a pool of programs, an HTTP call): the worker stops a run
    /// only after `backstop(job)`, a safety net behind the handler's own
    /// limit, instead of the job's timeout ([`crate::Job::timeout`]) or the
    /// default.
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue, h: punctual::BoxedHandler) {
    /// use std::time::Duration;
    /// // The handler gives up after the job's timeout (default 10 s); the
    /// // worker steps in a second later.
    /// let worker = punctual::Worker::new(queue, Default::default())
    ///     .handler_with_backstop("hooks", |d| d.timeout.unwrap_or(Duration::from_secs(10)) + Duration::from_secs(1), h);
    /// # let _ = worker; }
    /// ```
    pub fn handler_with_backstop(
        mut self,
        topic: impl Into<String>,
        backstop: impl Fn(&Delivery) -> Duration + Send + Sync + 'static,
        handler: impl Handler,
    ) -> Self {
        let topic = topic.into();
        self.topics.push(TopicEntry {
            name: topic.clone(),
            logical: topic,
            handler: BoxedHandler::new(handler),
            timeout: Duration::ZERO,
            backstop: Some(Arc::new(backstop)),
            gate: None,
        });
        self
    }

    /// Claims jobs of `topic` (registered before this call) only while
    /// `capacity` has room: its handler starts them on resources of its own
    /// (see [`Capacity`]).
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue, h: punctual::BoxedHandler) {
    /// use punctual::{Capacity, Worker};
    /// let programs = Capacity::new();
    /// let worker = Worker::new(queue, Default::default())
    ///     .handler("thumbnails", h)
    ///     .capacity("thumbnails", programs.clone());
    /// // ... as each program starts: programs.open(1); as it exits: programs.close(1).
    /// # let _ = worker; }
    /// ```
    pub fn capacity(mut self, topic: &str, capacity: Arc<Capacity>) -> Self {
        for t in self.topics.iter_mut().filter(|t| t.logical == topic) {
            t.gate = Some(capacity.clone());
        }
        self
    }

    /// Runs `handler` for jobs of `topic` with the payload parsed from
    /// JSON as `T`, and the delivery (id, attempt, ...). A payload that is
    /// not that JSON goes to dead at once (a permanent failure: no retry
    /// can fix it), with the parse error as its last error.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use punctual::{Delivery, Outcome, Worker, WorkerConfig};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Order {
    ///     id: u64,
    /// }
    ///
    /// Worker::new(queue, WorkerConfig::default())
    ///     .handle_json("orders", |order: Order, job: Delivery| async move {
    ///         println!("closing order {} (attempt {})", order.id, job.attempt);
    ///         Outcome::Done
    ///     })
    ///     .run(async { tokio::signal::ctrl_c().await.ok(); })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn handle_json<T, F, Fut>(self, topic: impl Into<String>, handler: F) -> Self
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.handler(topic, Json::new(handler))
    }

    /// Runs until `shutdown` completes, then stops claiming, lets running
    /// handlers finish (up to `shutdown_timeout`), records their outcomes and
    /// returns how many jobs it had to abandon (0 after a clean drain).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::{ErrorKind, Job, Outcome, Worker, WorkerConfig};
    /// queue.enqueue("orders", Job::new("42")).await?; // due now: ready at once
    /// let worker = Worker::new(queue.clone(), WorkerConfig::default())
    ///     .handle("orders", |_job| async { Outcome::Done });
    /// // Stop once the job is done (a service would wait for a signal).
    /// let done = async {
    ///     punctual_testkit::eventually(Duration::from_secs(10), "the job is done", async || {
    ///         let s = queue.stats("orders").await.unwrap();
    ///         s.ready + s.running == 0
    ///     })
    ///     .await
    /// };
    /// let stopped = worker.run(done).await?;
    /// assert_eq!(stopped.abandoned, 0);
    ///
    /// // A worker without a handler does not start.
    /// let idle = Worker::new(queue.clone(), WorkerConfig::default());
    /// assert_eq!(idle.run(async {}).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    /// # Ok(()) }
    /// ```
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<Stopped> {
        if self.topics.is_empty() {
            return Err(Error::invalid(
                "a worker needs at least one topic with a handler",
            ));
        }
        for t in &self.topics {
            validate_topic(&t.name)?;
        }
        if self.config.concurrency == 0 {
            return Err(Error::invalid("concurrency must be at least 1"));
        }
        if self.config.lease < Duration::from_millis(30) {
            return Err(Error::invalid("the lease must be at least 30 ms"));
        }
        let concurrency = self.config.concurrency;
        let mut logical: Vec<String> = self.topics.iter().map(|t| t.logical.clone()).collect();
        logical.sort();
        logical.dedup();
        // Its record tells, per topic, how many leased jobs wait inside a
        // handler to start.
        let gates: Vec<(String, Arc<Capacity>)> = self
            .topics
            .iter()
            .filter_map(|t| Some((t.logical.clone(), t.gate.clone()?)))
            .collect();
        let waiting = (!gates.is_empty()).then(|| -> crate::registry::Gauge {
            Arc::new(move || {
                let mut by_topic = std::collections::BTreeMap::new();
                for (topic, gate) in &gates {
                    *by_topic.entry(topic.clone()).or_default() += gate.waiting();
                }
                by_topic.retain(|_, n| *n > 0);
                by_topic
            })
        });
        let registration =
            self.config
                .registry
                .start(&self.queue, Role::Worker, &logical, waiting)?;
        // A partitioned topic is served as one entry per partition, with the
        // same handler; claims rotate over them all.
        let mut entries = Vec::new();
        for t in self.topics {
            for name in self.queue.partition_names(&t.logical).await? {
                entries.push(TopicEntry {
                    name,
                    logical: t.logical.clone(),
                    handler: t.handler.clone(),
                    timeout: t.timeout,
                    backstop: t.backstop.clone(),
                    gate: t.gate.clone(),
                });
            }
        }
        let stop_fetch = CancellationToken::new();
        let inflight = entries.iter().map(|_| HashMap::new()).collect();
        let shared = Arc::new(Shared {
            queue: self.queue,
            config: self.config,
            topics: entries,
            inflight: Mutex::new(inflight),
            stopping: stop_fetch.clone(),
            lateness: Default::default(),
            observer: self.observer,
        });
        let notify = Arc::new(Notify::new());
        for t in &shared.topics {
            if let Some(g) = &t.gate {
                g.wake(notify.clone());
            }
        }
        let plan = Arc::new(Plan::new(shared.config.idle_check));
        let timer = crate::wake::PreciseTimer::start()
            .map_err(|e| Error::invalid(format!("cannot start the worker's timer thread: {e}")))?;
        let mut channels = HashMap::new();
        for t in &shared.topics {
            let keys = shared.queue.keys(&t.name);
            channels.insert(
                keys.ready().to_string(),
                crate::wake::notifier(notify.clone()),
            );
            let plan = plan.clone();
            let on_pool: crate::wake::OnMessage = Arc::new(move |msg| plan.heard(msg));
            channels.insert(keys.pool().to_string(), on_pool);
            channels.insert(keys.cancel_channel(), on_cancel(&shared, &t.name));
        }
        let stop_rest = CancellationToken::new();
        let listener = crate::wake::listen(
            shared.queue.pubsub_clients().to_vec(),
            channels,
            stop_rest.clone(),
        );
        let slots = Arc::new(Semaphore::new(concurrency));
        let (settle_tx, settle_rx) = mpsc::unbounded_channel();
        let settler = tokio::spawn(settle_loop(shared.clone(), settle_rx).in_current_span());
        let settler_abort = settler.abort_handle();
        let keeper = tokio::spawn(keep_leases(shared.clone(), stop_rest.clone()).in_current_span());
        let flusher = {
            let (shared, stop) = (shared.clone(), stop_rest.clone());
            tokio::spawn(
                async move { shared.lateness.run(&shared.queue, stop).await }.in_current_span(),
            )
        };
        let fetcher = tokio::spawn(
            fetch_loop(
                shared.clone(),
                slots.clone(),
                notify,
                plan,
                timer.0.clone(),
                settle_tx,
                stop_fetch.clone(),
            )
            .in_current_span(),
        );

        shutdown.await;
        tracing::info!("worker stopping: no new claims; waiting for running jobs");
        stop_fetch.cancel();
        let drained = async {
            let _ = fetcher.await;
            // Every slot free means every handler finished and queued its outcome.
            let _ = slots.acquire_many(concurrency as u32).await;
            // The fetcher and slots dropped their senders: the settler drains and ends.
            let _ = settler.await;
        };
        let mut abandoned = 0;
        if tokio::time::timeout(shared.config.shutdown_timeout, drained)
            .await
            .is_err()
        {
            let left = shared
                .inflight
                .lock()
                .unwrap()
                .iter()
                .map(HashMap::len)
                .sum();
            abandoned = left;
            tracing::warn!(
                jobs = left,
                "shutdown timeout: giving up on running jobs; their leases will expire and they will be re-delivered"
            );
            for held in shared.inflight.lock().unwrap().iter_mut() {
                for (_, (_, run)) in held.drain() {
                    run.abort.abort();
                }
            }
            settler_abort.abort();
        }
        stop_rest.cancel();
        let _ = keeper.await;
        let _ = flusher.await;
        let _ = listener.await;
        if let Some(r) = registration {
            r.stop().await;
        }
        Ok(Stopped { abandoned })
    }
}

/// What the cancel channel of topic entry `name` goes to: a message
/// `<token>:<id>` fires the `cancelled` token of the run this process holds
/// under that id and token, if any (docs/PROTOCOL.md "cancel").
fn on_cancel(shared: &Arc<Shared>, name: &str) -> crate::wake::OnMessage {
    let ti = shared
        .topics
        .iter()
        .position(|t| t.name == name)
        .expect("a topic entry of this worker");
    let shared = Arc::downgrade(shared);
    Arc::new(move |msg| {
        let Some((token, id)) = msg.and_then(parse_cancel) else {
            return;
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let inflight = shared.inflight.lock().unwrap();
        if let Some((t, run)) = inflight[ti].get(id) {
            if *t == token {
                run.cancelled.cancel();
            }
        }
    })
}

/// A cancel message: `<token>:<id>`.
fn parse_cancel(msg: &[u8]) -> Option<(i64, &str)> {
    let msg = std::str::from_utf8(msg).ok()?;
    let (token, id) = msg.split_once(':')?;
    Some((token.parse().ok()?, id))
}

/// How a [`Worker`] stopped.
///
/// ```no_run
/// # async fn demo(worker: punctual::Worker) -> punctual::Result<()> {
/// let stopped = worker.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
/// if stopped.abandoned > 0 {
///     eprintln!("{} jobs were still running; they will be delivered again", stopped.abandoned);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stopped {
    /// Jobs still running at the shutdown timeout, stopped unfinished: their
    /// leases expire and they are delivered again.
    pub abandoned: usize,
}

/// When the fetcher should claim again for jobs due in the pool: planned
/// from the claims' replies (the pool's next due time) and from the pool
/// channel's messages (an earlier job was enqueued; the message carries its
/// due time, by Redis's clock).
struct Plan {
    state: Mutex<PlanState>,
    /// Woken when a message moved the plan earlier.
    replan: Notify,
    /// Messages planning beyond this are left to the safety net.
    horizon: Duration,
}

#[derive(Default)]
struct PlanState {
    /// The last claim's Redis time (µs) and when its reply arrived.
    clock: Option<(i64, std::time::Instant)>,
    /// When to claim again.
    wake: Option<std::time::Instant>,
}

impl Plan {
    fn new(horizon: Duration) -> Plan {
        Plan {
            state: Mutex::default(),
            replan: Notify::new(),
            horizon,
        }
    }

    /// A message on a pool channel: a job (or a lease) due at that epoch ms.
    fn heard(&self, msg: Option<&[u8]>) {
        let Some(ms) = crate::wake::message_ms(msg) else {
            // A (re)subscribe: the ready channel's waiter looks for work.
            return;
        };
        let now = std::time::Instant::now();
        let mut st = self.state.lock().unwrap();
        // Due already, or no claim yet to read the clock by: claim now.
        let at = st
            .clock
            .and_then(|c| crate::wake::local_instant(c, ms))
            .unwrap_or(now);
        if at > now + self.horizon || st.wake.is_some_and(|w| w <= at) {
            return;
        }
        st.wake = Some(at);
        drop(st);
        self.replan.notify_one();
    }
}

async fn fetch_loop(
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    notify: Arc<Notify>,
    plan: Arc<Plan>,
    timer: Arc<crate::wake::PreciseTimer>,
    settle: mpsc::UnboundedSender<Settle>,
    stop: CancellationToken,
) {
    let batch = match shared.config.claim_batch {
        0 => shared.config.concurrency.min(DEFAULT_CLAIM_BATCH),
        n => n,
    }
    .clamp(1, MAX_BATCH);
    let mut next_topic = 0;
    let mut backoff = Duration::from_millis(50);
    // After a full claim there is likely more: wait briefly for half a batch
    // of free slots rather than claim a handful at a time.
    let mut backlog = false;
    loop {
        // Wait for one free slot, then take as many more as are free.
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let mut permits = vec![first];
        // Every entry of `permits` must hold exactly one slot: it is one job.
        // (A claim batch of 2 or 3 makes `want` 0, and `acquire_many(0)`
        // yields a permit for no slot at all.)
        let want = (batch / 2).saturating_sub(1) as u32;
        if backlog && want > 0 {
            if let Ok(Ok(more)) = tokio::time::timeout(
                Duration::from_millis(2),
                slots.clone().acquire_many_owned(want),
            )
            .await
            {
                let mut more = more;
                while more.num_permits() > 1 {
                    permits.push(more.split(1).expect("more than one permit"));
                }
                permits.push(more);
            }
        }
        while permits.len() < batch {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let mut failed = false;
        // The shortest wait a topic's rate asked for: the next token.
        let mut limited: Option<Duration> = None;
        // From this round's replies: the earliest pool due time, and whether
        // due jobs were left in a pool with no limit holding them back.
        plan.state.lock().unwrap().wake = None;
        let mut next_due: Option<std::time::Instant> = None;
        let mut due_left = false;
        let n_topics = shared.topics.len();
        for i in 0..n_topics {
            if permits.is_empty() || stop.is_cancelled() {
                break;
            }
            let ti = (next_topic + i) % n_topics;
            let topic = &shared.topics[ti];
            // A handler with a capacity of its own: no more than it can start.
            let want = match &topic.gate {
                Some(g) => g.take(permits.len()),
                None => permits.len(),
            };
            if want == 0 {
                continue;
            }
            let part = Partition::known(&topic.name);
            let claimed =
                raw::claim_with_wait(&shared.queue, &part, want, shared.config.lease).await;
            if let Some(g) = &topic.gate {
                let got = claimed.as_ref().map_or(0, |c| c.jobs.len());
                g.unused(want - got.min(want));
            }
            match claimed {
                Ok(got) => {
                    if let Some(raw::Wait::For(d)) = got.wait {
                        limited = Some(limited.map_or(d, |l| l.min(d)));
                    }
                    if let Some((us, at)) = got.clock {
                        plan.state.lock().unwrap().clock = Some((us, at));
                        match got.next_due {
                            Some(d) if d.is_zero() => due_left |= got.wait.is_none(),
                            Some(d) => {
                                let w = at + d;
                                next_due = Some(next_due.map_or(w, |n| n.min(w)));
                            }
                            None => {}
                        }
                    }
                    // (Wait::UntilRunningEnds: the ack or fail that frees a
                    // slot publishes on the ready channel, which wakes us.)
                    // How late each job starts, added to the book once per
                    // claim (its jobs share the claim's clock and minute).
                    let mut starts = crate::Lateness::default();
                    let claimed_us = got.jobs.first().map(|j| j.claimed_us);
                    for mut job in got.jobs {
                        starts.record(job.lateness_us());
                        job.topic.clone_from(&topic.logical);
                        let permit = permits.pop().expect("claimed no more than the free slots");
                        let ticket = Ticket(topic.gate.clone());
                        spawn_slot(&shared, ti, job, (permit, ticket), settle.clone());
                    }
                    if let Some(us) = claimed_us {
                        shared.lateness.record(&topic.name, us, &starts);
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %topic.name, error = %e, "claim failed; retrying in {backoff:?}");
                    failed = true;
                }
            }
        }
        next_topic = (next_topic + 1) % n_topics;
        if let Some(w) = next_due {
            // Messages heard during the round may have planned earlier.
            let mut st = plan.state.lock().unwrap();
            st.wake = Some(st.wake.map_or(w, |p| p.min(w)));
        }
        let starved = !permits.is_empty() && !due_left;
        backlog = !starved && !failed;
        drop(permits);
        if failed {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
            continue;
        }
        backoff = Duration::from_millis(50);
        if starved {
            // Nothing more to claim: sleep until a wake-up (or the safety
            // net), until the next token of a rate-limited topic, or until
            // the pool's next job is due.
            let nap = limited.map_or(shared.config.idle_check, |d| {
                d.min(shared.config.idle_check)
            });
            let nap_until = tokio::time::Instant::now() + nap;
            loop {
                let wake = plan.state.lock().unwrap().wake;
                // To the instant (tokio's sleep would round up to whole ms).
                timer.set(wake);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = notify.notified() => break,
                    _ = tokio::time::sleep_until(nap_until) => break,
                    _ = timer.fired() => {
                        // (Or a deadline replaced since: then sleep on.)
                        if wake.is_some_and(|w| w <= std::time::Instant::now()) {
                            break;
                        }
                    }
                    // A message planned an earlier claim: sleep to that.
                    _ = plan.replan.notified() => continue,
                }
            }
            timer.set(None);
        }
    }
}

fn spawn_slot(
    shared: &Arc<Shared>,
    ti: usize,
    mut job: Delivery,
    permit: (tokio::sync::OwnedSemaphorePermit, Ticket),
    settle: mpsc::UnboundedSender<Settle>,
) {
    let topic = &shared.topics[ti];
    let (id, token, attempt) = (job.id.clone(), job.token, job.attempt);
    // The job's own timeout (Job::timeout) replaces the topic's, unless the
    // handler enforces it (then the backstop says how long to wait).
    let timeout = match &topic.backstop {
        Some(backstop) => backstop(&job),
        None => job.timeout.unwrap_or(topic.timeout),
    };
    let grace = shared.config.cancel_grace;
    let extended = Arc::new(Extended::new(shared.config.lease));
    job.extended = Some(extended.clone());
    // Right before the handler starts: the job's expiry, by Redis's clock
    // (the claim's, advanced by the local clock since), and the age of its
    // lease (at most the time since the claim was sent: a worker stalled
    // between the claim and its reply holds an older lease than it knows).
    let expired = expiry_passed(&job);
    let stale = job.sent.elapsed() > shared.config.lease / 3;
    // Fires at shutdown (a child of `stopping`), at the timeout and when the
    // lease is lost (both below).
    let cancel = shared.stopping.child_token();
    let lost = CancellationToken::new();
    // Fired by the cancel listener (an operator cancelled the job).
    let cancelled = job.cancelled.clone();
    let slot_cancelled = cancelled.clone();
    let cancelled_grace = shared.config.cancelled_grace;
    let handler = topic.handler.clone();
    let watch = Watch::start(shared, ti, &job);
    let slot_shared = shared.clone();
    let slot_lost = lost.clone();
    let slot_id = id.clone();
    // The handler runs inside its slot's task (one task per job, not two):
    // the slot polls it against the timeout and the lease, and drops it
    // (after the grace) when either ends first.
    let slot = async move {
        let (lost, id, shared, cancelled) = (slot_lost, slot_id, slot_shared, slot_cancelled);
        let _permit = permit;
        if let Some(error) = expired {
            let outcome = Outcome::Expired { error };
            Watch::finish(watch, Some(&outcome), &shared);
            let _ = settle.send(Settle {
                topic: ti,
                id,
                token,
                attempt,
                outcome,
            });
            return;
        }
        if stale {
            // Extended before it starts, or not started at all.
            let topic = &shared.topics[ti].name;
            let part = Partition::known(topic);
            let lease = [Lease::new(id.clone(), token)];
            match raw::extend(&shared.queue, &part, &lease, shared.config.lease).await {
                Ok(held) if held.first() == Some(&true) => {}
                Ok(_) => {
                    tracing::warn!(topic = %topic, id = %id, "not started: its lease was lost before its handler could start (this worker stalled after its claim); it was reclaimed or cancelled");
                    forget(&shared, ti, &id, token);
                    return;
                }
                Err(e) => {
                    tracing::warn!(topic = %topic, id = %id, error = %e, "not started: its lease is old and could not be extended; leaving the job to its lease");
                    forget(&shared, ti, &id, token);
                    return;
                }
            }
        }
        if cancelled.is_cancelled() {
            // Cancelled between the claim and now: never started.
            let topic = &shared.topics[ti].logical;
            tracing::info!(topic = %topic, id = %id, "not started: the job was cancelled");
            forget(&shared, ti, &id, token);
            return;
        }
        let run = AssertUnwindSafe(handler.call(job, cancel.clone())).catch_unwind();
        let mut run = std::pin::pin!(run);
        let finished = tokio::select! {
            r = &mut run => Some(r),
            _ = tokio::time::sleep(timeout) => None,
            _ = lost.cancelled() => None,
            _ = cancelled.cancelled() => None,
        };
        if cancelled.is_cancelled() {
            // An operator cancelled it: the cancel script ended the job
            // (its lease is revoked), so nothing is recorded. Ask the
            // handler to stop, give it the grace, then drop it.
            cancel.cancel();
            if finished.is_none() {
                let _ = tokio::time::timeout(cancelled_grace, &mut run).await;
            }
            let topic = &shared.topics[ti].logical;
            tracing::info!(topic = %topic, id = %id, "job cancelled while it ran: its handler was stopped; nothing recorded");
            Watch::cancelled(watch);
            forget(&shared, ti, &id, token);
            return;
        }
        let outcome = match finished {
            Some(Ok(outcome)) => outcome,
            Some(Err(panic)) => {
                Outcome::retry(format!("handler panicked: {}", panic_message(&panic)))
            }
            None => {
                // Timed out or lost its lease: ask the handler to stop, give
                // it the grace, then drop it; its answer no longer counts.
                cancel.cancel();
                let _ = tokio::time::timeout(grace, &mut run).await;
                if lost.is_cancelled() {
                    // The keeper already forgot the job; nothing to record.
                    Watch::finish(watch, None, &shared);
                    return;
                }
                Outcome::retry(format!("handler timed out after {}", humanize(timeout)))
            }
        };
        Watch::finish(watch, Some(&outcome), &shared);
        let _ = settle.send(Settle {
            topic: ti,
            id,
            token,
            attempt,
            outcome,
        });
    };
    // Spawned under the lock, so that the slot's outcome cannot be
    // recorded (and the job forgotten) before the job is listed here.
    // Aborting the task (the shutdown timeout) drops the run unrecorded.
    let mut inflight = shared.inflight.lock().unwrap();
    let handle = tokio::spawn(slot.in_current_span());
    let previous = inflight[ti].insert(
        id,
        (
            token,
            Running {
                lost,
                cancelled,
                abort: handle.abort_handle(),
                extended,
            },
        ),
    );
    drop(inflight);
    if let Some((_, old)) = previous {
        // This process still ran an earlier delivery of the same job, whose
        // lease was lost meanwhile: that run can no longer ack; stop it.
        old.lost.cancel();
    }
}

/// An attempt whose end the observer ([`Worker::on_attempt`]) is told.
struct Watch {
    observer: AttemptObserver,
    end: AttemptEnd,
    max_attempts: u32,
}

impl Watch {
    /// None without an observer: then nothing is cloned or timed.
    fn start(shared: &Shared, ti: usize, job: &Delivery) -> Option<Watch> {
        let observer = shared.observer.clone()?;
        let now = std::time::SystemTime::now();
        Some(Watch {
            observer,
            end: AttemptEnd {
                topic: shared.topics[ti].logical.clone(),
                id: job.id.clone(),
                attempt: job.attempt,
                token: job.token,
                traceparent: job.traceparent.clone(),
                tracestate: job.tracestate.clone(),
                started: now,
                ended: now,
                lateness_us: job.lateness_us(),
                outcome: "lost",
                error: None,
            },
            max_attempts: job.max_attempts,
        })
    }

    /// Tells the observer that an operator cancelled the job while it ran.
    fn cancelled(watch: Option<Watch>) {
        if let Some(Watch {
            observer, mut end, ..
        }) = watch
        {
            end.ended = std::time::SystemTime::now();
            end.outcome = "cancelled";
            observer(end);
        }
    }

    /// Tells the observer; `None`: the lease was lost.
    fn finish(watch: Option<Watch>, outcome: Option<&Outcome>, shared: &Shared) {
        let Some(Watch {
            observer,
            mut end,
            max_attempts,
        }) = watch
        else {
            return;
        };
        end.ended = std::time::SystemTime::now();
        let last = end.attempt >= max_attempts;
        (end.outcome, end.error) = match outcome {
            None => ("lost", None),
            Some(Outcome::Done) => ("done", None),
            Some(Outcome::Retry { error, .. }) => {
                (if last { "dead" } else { "retry" }, Some(error.clone()))
            }
            Some(Outcome::Permanent { error }) => ("dead", Some(error.clone())),
            Some(Outcome::Expired { error }) => ("expired", Some(error.clone())),
            Some(Outcome::HandBack) if shared.stopping.is_cancelled() => ("handed back", None),
            // fail_one turns it into a retry.
            Some(Outcome::HandBack) => (if last { "dead" } else { "retry" }, None),
        };
        observer(end);
    }
}

fn expiry_passed(job: &Delivery) -> Option<String> {
    job.expiry_error()
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".into()
    }
}

pub(crate) fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Records outcomes. No call waits behind another: every fail is its own
/// task, and each topic has its own lane of acks, one call in flight at a
/// time, which takes whatever has queued up for that topic meanwhile (so
/// acks still go out in batches). A passing Redis error (an outage) is
/// retried; meanwhile the keeper keeps the leases alive, so an outcome is
/// never lost to a short outage. A call that Redis keeps refusing (a wrong
/// key type, a missing permission, invalid input) holds up nothing but its
/// own jobs, and only for a few tries: then they are forgotten, their
/// leases run out, and a scheduler reclaims them (see `settle_or_give_up`).
/// Ends when every sender is gone and every call has finished.
async fn settle_loop(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Settle>) {
    // Per topic: acks waiting for the lane; the topics with a call in flight.
    let mut waiting: HashMap<usize, Vec<Lease>> = HashMap::new();
    let mut busy: HashSet<usize> = HashSet::new();
    let mut in_flight: HashMap<tokio::task::Id, usize> = HashMap::new();
    let mut acks: JoinSet<()> = JoinSet::new();
    let mut fails: JoinSet<()> = JoinSet::new();
    let mut open = true;
    while open || !acks.is_empty() || !fails.is_empty() {
        tokio::select! {
            s = rx.recv(), if open => match s {
                Some(first) => {
                    let mut next = Some(first);
                    let mut taken = 0;
                    while let Some(s) = next.take() {
                        match s.outcome {
                            Outcome::Done => waiting.entry(s.topic).or_default().push(Lease::with_attempt(s.id, s.token, s.attempt)),
                            _ => {
                                fails.spawn(fail_one(shared.clone(), s).in_current_span());
                            }
                        }
                        taken += 1;
                        if taken < MAX_BATCH {
                            next = rx.try_recv().ok();
                        }
                    }
                }
                None => open = false,
            },
            Some(done) = acks.join_next_with_id(), if !acks.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                if let Some(ti) = in_flight.remove(&id) {
                    busy.remove(&ti);
                }
            }
            Some(_) = fails.join_next(), if !fails.is_empty() => {}
        }
        // Start a call for every topic with acks waiting and none in flight.
        let ready: Vec<usize> = waiting
            .keys()
            .copied()
            .filter(|ti| !busy.contains(ti))
            .collect();
        for ti in ready {
            let leases = waiting.remove(&ti).expect("listed above");
            let call = acks.spawn(ack_many(shared.clone(), ti, leases).in_current_span());
            in_flight.insert(call.id(), ti);
            busy.insert(ti);
        }
    }
}

async fn ack_many(shared: Arc<Shared>, ti: usize, leases: Vec<Lease>) {
    let topic = &shared.topics[ti].name;
    let part = Partition::known(topic);
    let Some((flags, resent)) = settle_or_give_up(|| raw::ack(&shared.queue, &part, &leases)).await
    else {
        for Lease { id, token, .. } in leases {
            tracing::error!(topic = %topic, id = %id, "Redis keeps refusing the ack: leaving the job to its lease; it will be reclaimed and run again");
            forget(&shared, ti, &id, token);
        }
        return;
    };
    let mut inflight = shared.inflight.lock().unwrap();
    for (Lease { id, token, .. }, ok) in leases.into_iter().zip(flags) {
        if !ok {
            tracing::warn!(topic = %topic, id = %id, "{}", ack_refused(resent));
        }
        forget_held(&mut inflight[ti], &id, token);
    }
}

/// What an ack refused tells: after a resend (the first try's reply was
/// lost), only that the job is no longer leased under this token.
fn ack_refused(resent: bool) -> &'static str {
    if resent {
        "ack refused on a resend: an earlier try may have been recorded before its reply was lost; the ack's outcome is unknown; the job is not running here"
    } else {
        "ack refused: the lease was lost and the job re-delivered or cancelled"
    }
}

async fn fail_one(shared: Arc<Shared>, mut s: Settle) {
    if matches!(s.outcome, Outcome::HandBack) && !shared.stopping.is_cancelled() {
        // A hand-back costs no attempt: honoured only while the worker
        // stops, or a handler answering it could loop a job for ever.
        s.outcome = Outcome::retry("the handler handed the job back while the worker was running");
    }
    let topic = &shared.topics[s.topic].name;
    let (part, lease) = (Partition::known(topic), Lease::new(s.id.clone(), s.token));
    let (error, r) = match &s.outcome {
        // The one place every retry delay passes: capped here.
        Outcome::Retry { error, after } => {
            let kind = FailKind::Retry {
                after: after.map(|a| a.min(shared.config.max_retry_delay)),
            };
            let r =
                settle_or_give_up(|| raw::fail(&shared.queue, &part, &lease, error, kind)).await;
            (error.as_str(), r)
        }
        Outcome::Permanent { error } => {
            let kind = FailKind::Permanent;
            let r =
                settle_or_give_up(|| raw::fail(&shared.queue, &part, &lease, error, kind)).await;
            (error.as_str(), r)
        }
        Outcome::Expired { error } => {
            let r =
                settle_or_give_up(|| raw::fail_expired(&shared.queue, &part, &lease, error)).await;
            (error.as_str(), r)
        }
        Outcome::HandBack => {
            let r = settle_or_give_up(|| raw::hand_back(&shared.queue, &part, &lease)).await;
            ("", r)
        }
        Outcome::Done => unreachable!("done outcomes are acked"),
    };
    let Some((r, resent)) = r else {
        tracing::error!(topic = %topic, id = %s.id, error, "Redis keeps refusing the fail: leaving the job to its lease; it will be reclaimed and run again");
        forget(&shared, s.topic, &s.id, s.token);
        return;
    };
    match r {
        Failed::Retry => {
            tracing::info!(topic = %topic, id = %s.id, error, "job failed; will retry")
        }
        Failed::Dead if matches!(s.outcome, Outcome::Expired { .. }) => {
            tracing::warn!(topic = %topic, id = %s.id, error, "job expired before it started; moved to dead")
        }
        Failed::Dead => {
            tracing::warn!(topic = %topic, id = %s.id, error, "job failed; moved to dead")
        }
        Failed::Back => {
            tracing::info!(topic = %topic, id = %s.id, "job handed back unstarted: in ready again, its attempt not counted")
        }
        Failed::Stale if resent => {
            tracing::warn!(topic = %topic, id = %s.id, "fail refused on a resend: an earlier try may have been recorded before its reply was lost; its outcome is unknown; the job is not running here")
        }
        _ => {
            tracing::warn!(topic = %topic, id = %s.id, "fail refused: the lease was lost")
        }
    }
    forget(&shared, s.topic, &s.id, s.token);
}

/// Tries of a settle call that Redis refuses for a lasting reason before
/// the worker gives up on it (about 0.75 s of backoff in all).
const LASTING_REFUSALS: u32 = 5;

/// Runs a settle call until it succeeds: through any passing error (an
/// outage: the keeper cannot extend either, so nothing is held longer than
/// a lease past it), but only `LASTING_REFUSALS` times through a refusal
/// that lasts, or the keeper would extend the job's lease for the life of
/// the worker. `None`: given up; the caller forgets the job. With the
/// value, whether the call was resent after a passing error.
async fn settle_or_give_up<T, F, Fut>(mut call: F) -> Option<(T, bool)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = Duration::from_millis(50);
    let mut refused = 0;
    // Whether a try failed in a way that may have reached Redis (its reply
    // lost): then a refusal of a later try says less.
    let mut resent = false;
    loop {
        match call().await {
            Ok(v) => return Some((v, resent)),
            Err(e) => {
                if !e.is_passing() {
                    refused += 1;
                    if refused >= LASTING_REFUSALS {
                        tracing::error!(error = %e, "recording a job outcome was refused {refused} times; giving up");
                        return None;
                    }
                } else {
                    resent = true;
                }
                tracing::warn!(error = %e, "recording a job outcome failed; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

fn forget(shared: &Shared, ti: usize, id: &str, token: i64) {
    forget_held(&mut shared.inflight.lock().unwrap()[ti], id, token);
}

/// Forgets job `id` of one topic entry, if this process still holds it
/// under `token` (not a later delivery's).
fn forget_held(held: &mut HashMap<String, (i64, Running)>, id: &str, token: i64) {
    if held.get(id).is_some_and(|(t, _)| *t == token) {
        held.remove(id);
    }
}

/// Extends the leases of every job this process holds, every third of the
/// lease; stops the handler of a job whose lease was lost.
/// A lease the keeper extends, and where it marks the extension.
type HeldLease = (Lease, Arc<Extended>);

async fn keep_leases(shared: Arc<Shared>, stop: CancellationToken) {
    let every = shared.config.lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // Every lease listed now and extended below holds a lease past this.
        let round = std::time::Instant::now();
        let by_topic: Vec<(usize, Vec<HeldLease>)> = shared
            .inflight
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, held)| !held.is_empty())
            .map(|(ti, held)| {
                let leases = held.iter().map(|(id, (token, run))| {
                    (Lease::new(id.clone(), *token), run.extended.clone())
                });
                (ti, leases.collect())
            })
            .collect();
        for (ti, held) in by_topic {
            let topic = &shared.topics[ti].name;
            let part = Partition::known(topic);
            let (held, marks): (Vec<Lease>, Vec<Arc<Extended>>) = held.into_iter().unzip();
            match raw::extend(&shared.queue, &part, &held, shared.config.lease).await {
                Ok(flags) => {
                    for ((Lease { id, token, .. }, ok), mark) in
                        held.into_iter().zip(flags).zip(marks)
                    {
                        if ok {
                            mark.mark(round);
                            continue;
                        }
                        let mut inflight = shared.inflight.lock().unwrap();
                        let held = &mut inflight[ti];
                        // A run that has ended sent its outcome, and its ack
                        // may have deleted the job after this round listed
                        // it (a busy worker, every round): the ack or fail
                        // says what happened, and forgets it.
                        if held
                            .get(&id)
                            .is_some_and(|(t, run)| *t == token && !run.abort.is_finished())
                        {
                            if let Some((_, run)) = held.remove(&id) {
                                run.lost.cancel();
                            }
                            tracing::warn!(topic = %topic, id = %id, "lease lost (expired or cancelled); stopped its handler");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %topic, error = %e, "lease extension failed; will retry")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cancel;

    #[test]
    fn a_cancel_message_is_the_token_then_the_whole_id() {
        assert_eq!(
            parse_cancel(b"1764530000000123:order:10086"),
            Some((1764530000000123, "order:10086"))
        );
        assert_eq!(parse_cancel(b"7: spaced id "), Some((7, " spaced id ")));
        assert_eq!(parse_cancel(b"order:10086"), None);
        assert_eq!(parse_cancel(b"12"), None);
        assert_eq!(parse_cancel(b"\xff:x"), None);
    }
}
