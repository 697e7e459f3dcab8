//! The scheduler: per topic, promote due jobs and reclaim expired leases,
//! sleeping until the next due time or lease deadline, woken early when an
//! earlier job arrives. On a topic without groups, workers with free slots
//! claim due jobs from the pool themselves, so the scheduler promotes only
//! the jobs they left `promote_grace` overdue: a safety net. Any number may run at once: each tick is one atomic
//! script, so two schedulers never move a job twice. Once a minute each
//! scheduler also offers a snapshot of the counters for the history
//! (`history.rs`). Per topic it also runs the firer of the topic's recurring
//! schedules (`schedule.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::queue::{Queue, MAX_BATCH};
use crate::raw::{self, Partition, TickLimits};
use crate::registry::{Registry, Role};

/// Settings of a [`Scheduler`].
///
/// ```
/// use std::time::Duration;
/// use punctual::SchedulerConfig;
/// let config = SchedulerConfig::default().promote_batch(500).max_ready(10_000);
/// assert_eq!(config.promote_batch, 500);
/// assert_eq!(config.reclaim_batch, 200); // a default
/// assert_eq!(config.max_sleep, Duration::from_secs(30));
/// assert_eq!(config.promote_grace, Duration::from_millis(20));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// Most jobs promoted per tick (default 200, at most 1,000).
    pub promote_batch: usize,
    /// Most expired leases reclaimed per tick (default 200, at most 1,000).
    pub reclaim_batch: usize,
    /// Promotion pauses while ready holds this many jobs (default 100,000).
    pub max_ready: usize,
    /// Longest sleep between ticks when nothing is due (default 30 s): a
    /// safety net, since wake-ups cover new jobs.
    pub max_sleep: Duration,
    /// Sleep after a refused promotion (ready full) (default 50 ms).
    pub refused_backoff: Duration,
    /// On a topic without groups, workers with free slots claim due jobs
    /// straight from the pool; the scheduler promotes only jobs due more
    /// than this long ago, the ones no worker took (default 20 ms, at most
    /// 60 s). Topics with groups are promoted at their due time.
    pub promote_grace: Duration,
    /// How this scheduler appears in the process registry (default: it
    /// registers with a generated id and beats every 5 s).
    pub registry: Registry,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            promote_batch: 200,
            reclaim_batch: 200,
            max_ready: 100_000,
            max_sleep: Duration::from_secs(30),
            refused_backoff: Duration::from_millis(50),
            promote_grace: Duration::from_millis(20),
            registry: Registry::default(),
        }
    }
}

impl SchedulerConfig {
    /// Promote batch.
    ///
    /// ```
    /// let config = punctual::SchedulerConfig::default().promote_batch(1_000);
    /// assert_eq!(config.promote_batch, punctual::MAX_BATCH);
    /// ```
    pub fn promote_batch(mut self, n: usize) -> Self {
        self.promote_batch = n;
        self
    }
    /// Reclaim batch.
    ///
    /// ```
    /// let config = punctual::SchedulerConfig::default().reclaim_batch(50);
    /// assert_eq!(config.reclaim_batch, 50);
    /// ```
    pub fn reclaim_batch(mut self, n: usize) -> Self {
        self.reclaim_batch = n;
        self
    }
    /// Ready backlog limit.
    ///
    /// ```
    /// // Keep due jobs in the pool while 5,000 wait for a worker.
    /// let config = punctual::SchedulerConfig::default().max_ready(5_000);
    /// assert_eq!(config.max_ready, 5_000);
    /// ```
    pub fn max_ready(mut self, n: usize) -> Self {
        self.max_ready = n;
        self
    }
    /// Longest idle sleep.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = punctual::SchedulerConfig::default().max_sleep(Duration::from_secs(5));
    /// assert_eq!(config.max_sleep, Duration::from_secs(5));
    /// ```
    pub fn max_sleep(mut self, d: Duration) -> Self {
        self.max_sleep = d;
        self
    }
    /// Promotion grace.
    ///
    /// ```
    /// use std::time::Duration;
    /// // Promote due jobs the workers left 100 ms after their due time.
    /// let config = punctual::SchedulerConfig::default().promote_grace(Duration::from_millis(100));
    /// assert_eq!(config.promote_grace, Duration::from_millis(100));
    /// ```
    pub fn promote_grace(mut self, d: Duration) -> Self {
        self.promote_grace = d;
        self
    }
    /// Registry settings ([`Registry::off`] to stay out of it).
    ///
    /// ```
    /// use punctual::{registry::Registry, SchedulerConfig};
    /// let config = SchedulerConfig::default().registry(Registry::off());
    /// assert!(!config.registry.enabled);
    /// ```
    pub fn registry(mut self, r: Registry) -> Self {
        self.registry = r;
        self
    }
}

/// Promotes and reclaims for a set of topics, and once a minute offers a
/// snapshot of their counters to the per-minute history
/// ([`Queue::history`]).
///
/// ```no_run
/// # async fn demo() -> punctual::Result<()> {
/// let queue = punctual::Queue::connect("redis://127.0.0.1:6379").await?;
/// punctual::Scheduler::new(queue, punctual::SchedulerConfig::default())
///     .topic("orders")
///     .run(async { tokio::signal::ctrl_c().await.ok(); })
///     .await
/// # }
/// ```
#[derive(Debug)]
pub struct Scheduler {
    queue: Queue,
    config: SchedulerConfig,
    topics: Vec<String>,
}

impl Scheduler {
    /// A scheduler for no topics yet.
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// use punctual::{Queue, Scheduler, SchedulerConfig};
    /// let queue = Queue::connect("redis://127.0.0.1:6379").await?;
    /// let scheduler = Scheduler::new(queue, SchedulerConfig::default().promote_batch(500));
    /// # let _ = scheduler; Ok(()) }
    /// ```
    pub fn new(queue: Queue, config: SchedulerConfig) -> Self {
        Scheduler {
            queue,
            config,
            topics: Vec::new(),
        }
    }

    /// Adds a topic.
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue) {
    /// use punctual::{Scheduler, SchedulerConfig};
    /// let scheduler = Scheduler::new(queue, SchedulerConfig::default())
    ///     .topic("orders")
    ///     .topic("mails");
    /// # let _ = scheduler; }
    /// ```
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topics.push(topic.into());
        self
    }

    /// Runs until `shutdown` completes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::{Job, Scheduler, SchedulerConfig};
    /// queue.enqueue("orders", Job::new("42").delay(Duration::from_millis(300))).await?;
    /// assert_eq!(queue.stats("orders").await?.pool, 1);
    /// // Run until the job is promoted to ready (a service would wait for a signal).
    /// let promoted = async {
    ///     punctual_testkit::eventually(Duration::from_secs(10), "the job is ready", async || {
    ///         queue.stats("orders").await.unwrap().ready == 1
    ///     })
    ///     .await
    /// };
    /// Scheduler::new(queue.clone(), SchedulerConfig::default())
    ///     .topic("orders")
    ///     .run(promoted)
    ///     .await?;
    /// assert_eq!(queue.stats("orders").await?.pool, 0);
    /// # Ok(()) }
    /// ```
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        if self.topics.is_empty() {
            return Err(Error::invalid("a scheduler needs at least one topic"));
        }
        for t in &self.topics {
            validate_topic(t)?;
        }
        if self.config.promote_batch == 0 || self.config.promote_batch > MAX_BATCH {
            return Err(Error::invalid("the promote batch must be 1 to 1000"));
        }
        if self.config.reclaim_batch == 0 || self.config.reclaim_batch > MAX_BATCH {
            return Err(Error::invalid("the reclaim batch must be 1 to 1000"));
        }
        if self.config.promote_grace > Duration::from_secs(60) {
            return Err(Error::invalid("the promote grace must be at most 60 s"));
        }
        let mut logical = self.topics.clone();
        logical.sort();
        logical.dedup();
        let registration =
            self.config
                .registry
                .start(&self.queue, Role::Scheduler, &logical, None)?;
        let stop = CancellationToken::new();
        let mut channels = HashMap::new();
        let mut tasks = Vec::new();
        // One loop per partition of each topic.
        let mut physical = Vec::new();
        for t in &self.topics {
            physical.extend(self.queue.partition_names(t).await?);
        }
        // Once a minute, a snapshot of the counters for the history.
        tasks.push(tokio::spawn(
            crate::history::snapshot_loop(self.queue.clone(), physical.clone(), stop.clone())
                .in_current_span(),
        ));
        // One schedule firer per topic (it routes occurrences to the
        // partitions itself), woken by changes to the topic's schedules.
        for topic in &logical {
            let notify = Arc::new(Notify::new());
            channels.insert(
                crate::schedule::channel(self.queue.prefix(), topic),
                notify.clone(),
            );
            tasks.push(tokio::spawn(
                crate::schedule::fire_loop(self.queue.clone(), topic.clone(), notify, stop.clone())
                    .in_current_span(),
            ));
        }
        let mut channels: HashMap<String, crate::wake::OnMessage> = channels
            .into_iter()
            .map(|(ch, n)| (ch, crate::wake::notifier(n)))
            .collect();
        for topic in physical {
            let plan = Arc::new(Plan::default());
            let p = plan.clone();
            channels.insert(
                self.queue.keys(&topic).pool().to_string(),
                Arc::new(move |msg| p.heard(msg)),
            );
            tasks.push(tokio::spawn(
                run_topic(
                    self.queue.clone(),
                    self.config.clone(),
                    topic,
                    plan,
                    stop.clone(),
                )
                .in_current_span(),
            ));
        }
        let listener =
            crate::wake::listen(self.queue.pubsub_clients().to_vec(), channels, stop.clone());
        shutdown.await;
        stop.cancel();
        for t in tasks {
            let _ = t.await;
        }
        let _ = listener.await;
        if let Some(r) = registration {
            r.stop().await;
        }
        Ok(())
    }
}

/// When a topic's loop ticks next, and the last tick's clock: a pool
/// message (an earlier job, or a lease that ends before every other one)
/// wakes the loop only when its time is before the planned tick. (In a
/// steady flow most claims publish their lease deadline, far after it.)
#[derive(Default)]
struct Plan {
    state: std::sync::Mutex<PlanState>,
    notify: Notify,
}

#[derive(Default)]
struct PlanState {
    /// The last tick's Redis time (µs) and when its reply arrived.
    clock: Option<(i64, std::time::Instant)>,
    /// When the loop ticks next (None: it is ticking).
    wake: Option<std::time::Instant>,
}

impl Plan {
    fn heard(&self, msg: Option<&[u8]>) {
        {
            let st = self.state.lock().unwrap();
            if let (Some(ms), Some(clock), Some(wake)) =
                (crate::wake::message_ms(msg), st.clock, st.wake)
            {
                if crate::wake::local_instant(clock, ms).is_some_and(|t| t >= wake) {
                    return;
                }
            }
        }
        self.notify.notify_one();
    }
}

async fn run_topic(
    queue: Queue,
    config: SchedulerConfig,
    topic: String,
    plan: Arc<Plan>,
    stop: CancellationToken,
) {
    let part = Partition::known(&topic);
    let limits = TickLimits::from(&config);
    let mut backoff = Duration::from_millis(50);
    loop {
        if stop.is_cancelled() {
            return;
        }
        plan.state.lock().unwrap().wake = None;
        let mut clock = None;
        let wait = match raw::tick_with_grace(&queue, &part, &limits, config.promote_grace).await {
            Ok((t, c)) => {
                clock = c;
                backoff = Duration::from_millis(50);
                if t.reclaimed > 0 || t.dead > 0 {
                    tracing::info!(topic = %topic, reclaimed = t.reclaimed, dead = t.dead, "reclaimed expired leases");
                }
                if t.more {
                    tokio::task::yield_now().await;
                    continue;
                }
                let mut wait = config.max_sleep;
                for d in [t.next_due, t.next_lease].into_iter().flatten() {
                    wait = wait.min(d);
                }
                if t.refused {
                    tracing::debug!(topic = %topic, "ready is full (max_ready); promotion waits");
                    wait = wait.min(config.refused_backoff);
                }
                wait
            }
            Err(e) => {
                tracing::warn!(topic = %topic, error = %e, "scheduler tick failed; retrying in {backoff:?}");
                let b = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                b
            }
        };
        // To the µs the tick reported (a sleep of whole ms would round up).
        let until = tokio::time::Instant::now() + wait;
        {
            let mut st = plan.state.lock().unwrap();
            st.wake = Some(until.into_std());
            if clock.is_some() {
                st.clock = clock;
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = plan.notify.notified() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}
