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

mod attempt;
mod cancel;
mod capacity;
mod config;
mod fetch;
mod keeper;
mod settle;
mod shared;
mod slot;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::handler::{BoxedHandler, Handler, Json, Outcome};
use crate::keys::validate_topic;
use crate::queue::Queue;
use crate::raw::Delivery;
use crate::registry::Role;

pub use attempt::AttemptEnd;
pub use capacity::Capacity;
pub use config::{WorkerConfig, DEFAULT_CLAIM_BATCH};

use attempt::AttemptObserver;
use cancel::on_cancel;
use fetch::{fetch_loop, Plan};
use keeper::keep_leases;
use settle::settle_loop;
use shared::{Shared, TopicEntry};

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
        self.topics.push(TopicEntry::new(
            topic.into(),
            BoxedHandler::new(handler),
            timeout,
            None,
        ));
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
        let backstop = Some(Arc::new(backstop) as _);
        self.topics.push(TopicEntry::new(
            topic.into(),
            BoxedHandler::new(handler),
            Duration::ZERO,
            backstop,
        ));
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
