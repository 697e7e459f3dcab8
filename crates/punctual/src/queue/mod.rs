//! `Queue`: the connection to Redis and what every audience shares (the
//! builder, the partition layout, script calls). The operations live by
//! audience and concept: [`enqueue`] (producers), [`inspect`] (one job and
//! listings), [`topics`] (known topics, a topic's figures), [`check`] (the
//! invariant check), [`dead`] (the dead letters), [`admin`] (operators'
//! changes), [`groups`] and [`limits`]; [`connect`] opens the connection.
//! The runtime's claim/ack/fail/extend/tick are in [`crate::raw`].

mod admin;
mod check;
mod cold;
mod connect;
mod dead;
mod enqueue;
mod groups;
mod inspect;
mod limits;
mod topics;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Script, Value};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::{partitions_key, topics_key, validate_topic, TopicKeys};
use crate::partition::{partition_name, partition_of};
use crate::redact::redact;
use crate::scripts::SCRIPTS;

pub use groups::{GroupHold, GroupInfo, GroupLimits};
pub use topics::{SkippedTopic, Topics};

/// Largest integer the scripts take (2^53: Lua numbers are doubles).
pub(crate) const MAX_SAFE: usize = 1 << 53;

/// Default largest payload: 64 KiB.
///
/// ```no_run
/// # async fn demo() -> punctual::Result<()> {
/// // Allow four times the default.
/// let queue = punctual::Queue::builder("redis://127.0.0.1:6379")
///     .max_payload(4 * punctual::DEFAULT_MAX_PAYLOAD)
///     .connect()
///     .await?;
/// assert_eq!(queue.max_payload(), 256 * 1024);
/// # Ok(()) }
/// ```
pub const DEFAULT_MAX_PAYLOAD: usize = 64 * 1024;
/// Default key prefix.
///
/// ```
/// let keys = punctual::internal::TopicKeys::new(punctual::DEFAULT_PREFIX, "orders");
/// assert_eq!(keys.pool(), "punctual:{orders}:pool");
/// ```
pub const DEFAULT_PREFIX: &str = "punctual";
/// Most jobs one script call handles (the scripts refuse more); larger
/// batches are split. Enqueue splits them finer by default
/// ([`DEFAULT_ENQUEUE_CHUNK`]).
///
/// ```no_run
/// # async fn demo() -> punctual::Result<()> {
/// // 2,500 jobs go in three script calls (each atomic), pipelined.
/// let queue = punctual::Queue::builder("redis://127.0.0.1:6379")
///     .enqueue_chunk(punctual::MAX_BATCH)
///     .connect()
///     .await?;
/// let jobs: Vec<_> = (0..2_500).map(|i| punctual::Job::new(format!("job {i}"))).collect();
/// assert_eq!(jobs.len().div_ceil(punctual::MAX_BATCH), 3);
/// queue.enqueue_batch("orders", jobs).await?;
/// # Ok(()) }
/// ```
pub const MAX_BATCH: usize = 1000;

/// Default most jobs per enqueue script call ([`QueueBuilder::enqueue_chunk`]).
///
/// A script call holds Redis's one thread until it ends: a call of 1,000
/// alike jobs took about 3 ms on a 2-core machine (the enqueue phase's 2.6
/// to 3.2 µs of Redis per job), one of jobs with a due time each counts
/// twice the instructions, and every claim, ack and enqueue of every other
/// client waits behind it. A call of
/// 250 holds it about a quarter of that. It counts 3 to 5 % more
/// instructions per job than one of 1,000 (each call costs about 300,000
/// of its own; 12 to 16 % more in calls of 100), yet took 15 % less of
/// Redis's time per job in the bench's enqueue phase (likely because a
/// smaller call's tables and strings stay in the CPU's caches;
/// the history of docs/BENCHMARKS.md, round 9).
/// A batch's calls are pipelined.
///
/// ```
/// assert_eq!(punctual::DEFAULT_ENQUEUE_CHUNK, 250);
/// ```
pub const DEFAULT_ENQUEUE_CHUNK: usize = 250;

/// How long an enqueue waits, by default, for a Redis that is loading its
/// dataset ([`QueueBuilder::loading_wait`]).
///
/// ```
/// assert_eq!(punctual::DEFAULT_LOADING_WAIT.as_secs(), 30);
/// ```
pub const DEFAULT_LOADING_WAIT: Duration = Duration::from_secs(30);

/// Settings of a [`Queue`], built with [`Queue::builder`].
///
/// ```no_run
/// # async fn demo() -> punctual::Result<()> {
/// use std::time::Duration;
/// let queue = punctual::Queue::builder("redis://:secret@10.0.0.5:6379/0")
///     .prefix("shop")
///     .connect_timeout(Duration::from_secs(5))
///     .response_timeout(Duration::from_secs(3))
///     .connect()
///     .await?;
/// assert_eq!(queue.prefix(), "shop");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct QueueBuilder {
    url: String,
    prefix: String,
    max_payload: usize,
    enqueue_chunk: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    loading_wait: Duration,
}

impl QueueBuilder {
    /// Key prefix (default `punctual`): several applications can share one
    /// Redis under different prefixes.
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// let queue = punctual::Queue::builder("redis://127.0.0.1:6379").prefix("billing").connect().await?;
    /// assert_eq!(queue.prefix(), "billing");
    /// # Ok(()) }
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Largest payload accepted, in bytes (default 64 KiB).
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// let queue = punctual::Queue::builder("redis://127.0.0.1:6379").max_payload(1024).connect().await?;
    /// let err = queue.enqueue("orders", punctual::Job::new(vec![0u8; 2048])).await.unwrap_err();
    /// assert_eq!(err.kind(), punctual::ErrorKind::InvalidInput);
    /// # Ok(()) }
    /// ```
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Most jobs one enqueue script call carries, 1 to [`MAX_BATCH`]
    /// (default [`DEFAULT_ENQUEUE_CHUNK`], 250): a larger batch is split into
    /// pipelined calls of this many, each atomic. Larger calls count fewer
    /// instructions per job but hold Redis longer, so every other client's
    /// calls (the workers' claims among them) wait longer behind them: the
    /// lateness of due jobs under load. Values outside 1..=1,000 are refused
    /// by [`connect`](Self::connect).
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// // A bulk import that no worker shares this Redis with: fewer, larger calls.
    /// let queue = punctual::Queue::builder("redis://127.0.0.1:6379")
    ///     .enqueue_chunk(punctual::MAX_BATCH)
    ///     .connect()
    ///     .await?;
    /// assert_eq!(queue.enqueue_chunk(), 1000);
    /// # Ok(()) }
    /// ```
    pub fn enqueue_chunk(mut self, jobs: usize) -> Self {
        self.enqueue_chunk = jobs;
        self
    }

    /// How long to wait for a TCP connection (default 2 s).
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// use std::time::Duration;
    /// let queue = punctual::Queue::builder("redis://redis.internal:6379")
    ///     .connect_timeout(Duration::from_secs(10))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// How long to wait for a reply before the call fails (default 10 s).
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// use std::time::Duration;
    /// let queue = punctual::Queue::builder("redis://127.0.0.1:6379")
    ///     .response_timeout(Duration::from_millis(500))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn response_timeout(mut self, t: Duration) -> Self {
        self.response_timeout = t;
        self
    }

    /// How long an enqueue waits for a Redis that is loading its dataset
    /// (after a restart it answers `LOADING` until its AOF or RDB is read;
    /// default [`DEFAULT_LOADING_WAIT`], 30 s). The enqueue is sent again
    /// with backoff (100 ms doubling, at most 2 s apart), logging a warning;
    /// Redis runs no command while loading, so a resend cannot write a job
    /// twice. Past the wait the `LOADING` error is returned
    /// ([`Error::is_passing`](crate::Error::is_passing)). Zero: no wait.
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// use std::time::Duration;
    /// // A web request should not hang for long: fail fast, enqueue later.
    /// let queue = punctual::Queue::builder("redis://127.0.0.1:6379")
    ///     .loading_wait(Duration::from_secs(2))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn loading_wait(mut self, t: Duration) -> Self {
        self.loading_wait = t;
        self
    }
}

/// A handle on punctual's data in one Redis. Cheap to clone; clones share
/// one multiplexed connection that reconnects by itself.
///
/// ```no_run
/// # async fn demo() -> punctual::Result<()> {
/// use std::time::Duration;
/// let queue = punctual::Queue::connect("redis://127.0.0.1:6379").await?;
/// let job = punctual::Job::new("close order 10086").delay(Duration::from_secs(1800));
/// let enqueued = queue.enqueue("orders", job).await?;
/// println!("{} {:?}", enqueued.id, enqueued.status);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    pubsub: Vec<redis::Client>,
    cluster: bool,
    url: String,
    prefix: String,
    max_payload: usize,
    /// Most jobs per enqueue script call.
    enqueue_chunk: usize,
    /// How long an enqueue waits for a loading Redis.
    loading_wait: Duration,
    registered: Mutex<HashSet<String>>,
    /// Invalid names in the set of known topics, logged once each.
    skipped_logged: Mutex<HashSet<String>>,
    /// Partition counts read from Redis, with when they were read.
    partitions: Mutex<HashMap<String, (u32, std::time::Instant)>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("url", &redact(&self.inner.url))
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl Queue {
    /// Settings for a connection to `url` (`redis://`, `rediss://`, with
    /// `user:password@` when needed).
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// let queue = punctual::Queue::builder("rediss://app:secret@redis.internal:6380/0")
    ///     .prefix("shop")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> QueueBuilder {
        QueueBuilder {
            url: url.into(),
            prefix: DEFAULT_PREFIX.into(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            enqueue_chunk: DEFAULT_ENQUEUE_CHUNK,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(10),
            loading_wait: DEFAULT_LOADING_WAIT,
        }
    }

    /// Connects with default settings.
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// let queue = punctual::Queue::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(queue.prefix(), punctual::DEFAULT_PREFIX);
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: impl Into<String>) -> Result<Queue> {
        Queue::builder(url).connect().await
    }

    /// The key prefix.
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue) {
    /// let keys = punctual::internal::TopicKeys::new(queue.prefix(), "orders");
    /// println!("pool of orders: {}", keys.pool());
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The largest payload accepted, in bytes.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue, report: Vec<u8>) -> punctual::Result<()> {
    /// if report.len() <= queue.max_payload() {
    ///     queue.enqueue("reports", punctual::Job::new(report)).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn max_payload(&self) -> usize {
        self.inner.max_payload
    }

    /// The most jobs one enqueue script call carries
    /// ([`QueueBuilder::enqueue_chunk`]).
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) {
    /// // 600 jobs go in three calls by default (250, 250, 100).
    /// assert_eq!(600_usize.div_ceil(queue.enqueue_chunk()), 3);
    /// # }
    /// ```
    pub fn enqueue_chunk(&self) -> usize {
        self.inner.enqueue_chunk
    }

    /// The Redis URL with any password hidden.
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// let queue = punctual::Queue::connect("redis://app:s3cret@127.0.0.1:6379").await?;
    /// assert_eq!(queue.url_redacted(), "redis://app:***@127.0.0.1:6379");
    /// # Ok(()) }
    /// ```
    pub fn url_redacted(&self) -> String {
        redact(&self.inner.url)
    }

    /// Nodes to subscribe on for wake-ups, in order of preference.
    pub(crate) fn pubsub_clients(&self) -> &[redis::Client] {
        &self.inner.pubsub
    }

    /// Whether this is a Redis Cluster.
    ///
    /// ```no_run
    /// # fn demo(queue: punctual::Queue) {
    /// let mode = if queue.is_cluster() { "cluster" } else { "standalone" };
    /// println!("connected to {} ({mode})", queue.url_redacted());
    /// # }
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster
    }

    /// The connection (for `unlisted.rs`, which scans every master).
    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    pub(crate) fn keys(&self, topic: &str) -> TopicKeys {
        TopicKeys::new(&self.inner.prefix, topic)
    }

    /// Runs a script of one topic; `args` fills ARGV.
    pub(crate) async fn run(
        &self,
        script: &Script,
        topic: &str,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<Value> {
        self.run_keys(script, topic, false, args).await
    }

    /// [`Queue::run`], with `P:{T}:fired` as a tenth key when `fired`.
    pub(crate) async fn run_keys(
        &self,
        script: &Script,
        topic: &str,
        fired: bool,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<Value> {
        let keys = self.keys(topic);
        let mut inv = script.prepare_invoke();
        for k in &keys.keys {
            inv.key(k);
        }
        if fired {
            inv.key(self.fired_key(topic));
        }
        args(&mut inv);
        let mut conn = self.inner.conn.clone();
        inv.invoke_async(&mut conn).await.map_err(Error::from_redis)
    }

    /// Runs a plain command.
    pub(crate) async fn cmd<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.inner.conn.clone();
        cmd.query_async(&mut conn).await.map_err(Error::Redis)
    }

    /// Runs a pipeline (a `MULTI` when it is atomic).
    pub(crate) async fn pipe<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let mut conn = self.inner.conn.clone();
        pipe.query_async(&mut conn).await.map_err(Error::Redis)
    }

    /// Adds the topic to the set of known topics, once per process.
    pub(crate) async fn register_topic(&self, topic: &str) -> Result<()> {
        self.register(topic).await
    }

    /// Adds the topic to the set of known topics, once per process.
    async fn register(&self, topic: &str) -> Result<()> {
        if self.inner.registered.lock().unwrap().contains(topic) {
            return Ok(());
        }
        let key = topics_key(&self.inner.prefix);
        self.cmd::<i64>(redis::cmd("SADD").arg(&key).arg(topic))
            .await?;
        self.inner
            .registered
            .lock()
            .unwrap()
            .insert(topic.to_string());
        Ok(())
    }

    /// How many partitions `topic` has (1: not partitioned), as stored in
    /// Redis; cached for one second.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// queue.set_partitions("orders", 4).await?;
    /// assert_eq!(queue.partitions("orders").await?, 4);
    /// # Ok(()) }
    /// ```
    pub async fn partitions(&self, topic: &str) -> Result<u32> {
        validate_topic(topic)?;
        if let Some((k, at)) = self.inner.partitions.lock().unwrap().get(topic) {
            if at.elapsed() < Duration::from_secs(1) {
                return Ok(*k);
            }
        }
        let v: Option<u32> = self
            .cmd(
                redis::cmd("HGET")
                    .arg(partitions_key(&self.inner.prefix))
                    .arg(topic),
            )
            .await?;
        let k = v.unwrap_or(1).max(1);
        self.inner
            .partitions
            .lock()
            .unwrap()
            .insert(topic.to_string(), (k, std::time::Instant::now()));
        Ok(k)
    }

    /// The names of a topic's partitions (`[topic]` when not partitioned),
    /// as the keys and the history use them; [`crate::raw::partitions`]
    /// gives them as the low-level calls take them.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// queue.set_partitions("orders", 2).await?;
    /// assert_eq!(queue.partition_names("orders").await?, ["orders#0", "orders#1"]);
    /// # Ok(()) }
    /// ```
    pub async fn partition_names(&self, topic: &str) -> Result<Vec<String>> {
        let k = self.partitions(topic).await?;
        Ok((0..k).map(|i| partition_name(topic, i, k)).collect())
    }

    /// The partition holding `id`.
    pub(crate) async fn route(&self, topic: &str, id: &str) -> Result<String> {
        let k = self.partitions(topic).await?;
        Ok(partition_name(topic, partition_of(id, k), k))
    }

    /// Runs the layout script on one physical topic; returns the jobs it
    /// holds (with `check`, anything but 0 means nothing was written).
    async fn layout(&self, physical: &str, k: u32, check: bool) -> Result<u64> {
        let v = self
            .run(&SCRIPTS.layout, physical, |inv| {
                inv.arg(k).arg(if check { "check" } else { "set" });
            })
            .await?;
        redis::from_redis_value::<i64>(v)
            .map(|n| n.max(0) as u64)
            .map_err(|e| Error::protocol("layout", e.to_string()))
    }
}
