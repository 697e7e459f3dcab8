//! The process registry: every supervisor, worker, scheduler and resident
//! handler process keeps a record in Redis that expires on its own.
//!
//! A record is the STRING `P:{procs}:p:<id>` (JSON, a [`ProcessInfo`]),
//! written with `SET .. PX` (3 beat periods) every beat, and listed in the
//! ZSET `P:{procs}:index` (id → time of the last beat that wrote the entry:
//! the first, every 12th, and one that found the record gone). All
//! keys share the hash tag `{procs}`, so one `MGET` reads them on a cluster
//! too. The record is the truth: an index entry whose record is gone is
//! ignored and removed by the reader. See docs/PROTOCOL.md, "Process
//! registry".
//!
//! A [`crate::Worker`] and a [`crate::Scheduler`] register themselves (see
//! [`Registry`]); a program of one's own can register too, and anyone can
//! list who is alive:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> punctual::Result<()> {
//! # let redis = punctual_testkit::RedisServer::start();
//! # let queue = punctual::Queue::connect(redis.url()).await?;
//! use std::time::Duration;
//! use punctual::registry::{ProcessInfo, Role};
//!
//! let me = ProcessInfo::new(Role::Worker, ["orders"]).with_id("billing-7/worker-0");
//! let registration = queue.register_process(me, Duration::from_secs(1))?;
//! # punctual_testkit::eventually(Duration::from_secs(5), "the first beat", async || {
//! #     !queue.processes().await.unwrap().is_empty()
//! # })
//! # .await;
//! let alive = queue.processes().await?;
//! assert_eq!(alive[0].id, "billing-7/worker-0");
//! assert!(alive[0].serves("orders"));
//! registration.stop().await; // removes the record
//! assert!(queue.processes().await?.is_empty());
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::queue::Queue;

/// Default beat period.
///
/// ```
/// use punctual::registry::{Registry, DEFAULT_HEARTBEAT};
/// assert_eq!(Registry::default().heartbeat, DEFAULT_HEARTBEAT);
/// ```
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);
/// A record lives this many beat periods without a beat.
///
/// ```
/// use punctual::registry::{BEATS_TO_LIVE, DEFAULT_HEARTBEAT};
/// // A process that stops beating drops out of the registry after:
/// assert_eq!(DEFAULT_HEARTBEAT * BEATS_TO_LIVE, std::time::Duration::from_secs(15));
/// ```
pub const BEATS_TO_LIVE: u32 = 3;
/// Index entries older than this are trimmed by every beat (their records
/// expired long before).
const INDEX_KEEP_MS: i64 = 3_600_000;
/// Every this many beats, a beat also rewrites the index entry (and trims
/// the index); the others only rewrite the record.
const INDEX_EVERY: u64 = 12;
/// Longest process id.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) {
/// use std::time::Duration;
/// use punctual::registry::{ProcessInfo, Role, MAX_PROCESS_ID_LEN};
/// let long = "w".repeat(MAX_PROCESS_ID_LEN + 1);
/// let info = ProcessInfo::new(Role::Worker, ["orders"]).with_id(long);
/// assert!(queue.register_process(info, Duration::from_secs(5)).is_err());
/// # }
/// ```
pub const MAX_PROCESS_ID_LEN: usize = 200;

/// What a registered process does.
///
/// ```
/// use punctual::registry::Role;
/// let role: Role = serde_json::from_str("\"scheduler\"").unwrap();
/// assert_eq!(role, Role::Scheduler);
/// assert_eq!(role.to_string(), "scheduler");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// `punctual serve`'s supervisor.
    Supervisor,
    /// Claims and runs jobs ([`crate::Worker`]).
    Worker,
    /// Promotes and reclaims ([`crate::Scheduler`]).
    Scheduler,
    /// A resident handler program of a worker.
    Resident,
}

impl Role {
    /// The lowercase name (`worker`, ...).
    ///
    /// ```
    /// use punctual::registry::Role;
    /// assert_eq!(Role::Resident.as_str(), "resident");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Supervisor => "supervisor",
            Role::Worker => "worker",
            Role::Scheduler => "scheduler",
            Role::Resident => "resident",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One process's record in the registry.
///
/// ```
/// use punctual::registry::{ProcessInfo, Role};
/// let p = ProcessInfo::new(Role::Worker, ["orders"]);
/// assert_eq!(p.pid, std::process::id());
/// assert_eq!(p.topics, ["orders"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// Unique id (`host-pid-random`, or what the supervisor chose:
    /// `<supervisor id>/worker-0`).
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id on that host.
    pub pid: u32,
    /// What it does.
    pub role: Role,
    /// The topics it serves (empty: a supervisor's are its children's).
    pub topics: Vec<String>,
    /// punctual's version.
    pub version: String,
    /// When it registered, epoch ms (Redis's clock).
    pub started_ms: i64,
    /// Its last beat, epoch ms (Redis's clock).
    pub beat_ms: i64,
    /// Its beat period, ms: the record expires 3 periods after a beat.
    pub beat_period_ms: u64,
    /// A worker's jobs leased but not started yet, by topic, at its last
    /// beat: jobs waiting inside a handler for a place to start (a resident
    /// pool's queue). They count in a topic's running jobs in Redis;
    /// [`crate::Queue::stats`] shows them apart. Topics with none are left
    /// out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub waiting: BTreeMap<String, u64>,
}

/// Reads a worker's [`ProcessInfo::waiting`] before each beat.
pub(crate) type Gauge = Arc<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>;

impl ProcessInfo {
    /// A record for this process: a generated id, this host and pid.
    ///
    /// ```
    /// use punctual::registry::{hostname, ProcessInfo, Role};
    /// let p = ProcessInfo::new(Role::Scheduler, ["orders", "mails"]);
    /// assert!(p.id.starts_with(&format!("{}-{}-", hostname(), std::process::id())));
    /// assert_eq!(p.role, Role::Scheduler);
    /// assert_eq!(p.version, env!("CARGO_PKG_VERSION"));
    /// ```
    pub fn new<S: Into<String>>(role: Role, topics: impl IntoIterator<Item = S>) -> Self {
        let host = hostname();
        let pid = std::process::id();
        ProcessInfo {
            id: format!("{host}-{pid}-{:06x}", rand::random::<u32>() & 0xff_ffff),
            host,
            pid,
            role,
            topics: topics.into_iter().map(Into::into).collect(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms: 0,
            beat_ms: 0,
            beat_period_ms: DEFAULT_HEARTBEAT.as_millis() as u64,
            waiting: BTreeMap::new(),
        }
    }

    /// The same record with another id.
    ///
    /// ```
    /// use punctual::registry::{ProcessInfo, Role};
    /// let p = ProcessInfo::new(Role::Worker, ["orders"]).with_id("billing-7/worker-0");
    /// assert_eq!(p.id, "billing-7/worker-0");
    /// ```
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The same record with another pid (a resident program the worker
    /// registers for).
    ///
    /// ```
    /// use punctual::registry::{ProcessInfo, Role};
    /// let mut child = std::process::Command::new("true").spawn().unwrap();
    /// let p = ProcessInfo::new(Role::Resident, ["orders"])
    ///     .with_id("billing-7/worker-0/resident-0")
    ///     .with_pid(child.id());
    /// assert_eq!(p.pid, child.id());
    /// # child.wait().unwrap();
    /// ```
    pub fn with_pid(mut self, pid: u32) -> Self {
        self.pid = pid;
        self
    }

    /// Whether it serves `topic`.
    ///
    /// ```
    /// use punctual::registry::{ProcessInfo, Role};
    /// let p = ProcessInfo::new(Role::Worker, ["orders", "mails"]);
    /// assert!(p.serves("mails"));
    /// assert!(!p.serves("invoices"));
    /// ```
    pub fn serves(&self, topic: &str) -> bool {
        self.topics.iter().any(|t| t == topic)
    }
}

/// How a [`crate::Worker`] or [`crate::Scheduler`] registers itself.
///
/// ```
/// use std::time::Duration;
/// let r = punctual::registry::Registry::default()
///     .id("billing-7/worker-0")
///     .heartbeat(Duration::from_secs(2));
/// assert!(r.enabled);
/// let off = punctual::registry::Registry::off();
/// assert!(!off.enabled);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Registry {
    /// Register at all (default true).
    pub enabled: bool,
    /// The process id to use (default: generated).
    pub id: Option<String>,
    /// The role to record (default: what the runtime is).
    pub role: Option<Role>,
    /// Beat period (default 5 s).
    pub heartbeat: Duration,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            enabled: true,
            id: None,
            role: None,
            heartbeat: DEFAULT_HEARTBEAT,
        }
    }
}

impl Registry {
    /// Do not register.
    ///
    /// ```
    /// use punctual::{registry::Registry, WorkerConfig};
    /// let config = WorkerConfig::default().registry(Registry::off());
    /// assert!(!config.registry.enabled);
    /// ```
    pub fn off() -> Self {
        Registry {
            enabled: false,
            ..Registry::default()
        }
    }
    /// Use this id.
    ///
    /// ```
    /// let r = punctual::registry::Registry::default().id("billing-7/scheduler");
    /// assert_eq!(r.id.as_deref(), Some("billing-7/scheduler"));
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    /// Record this role.
    ///
    /// ```
    /// use punctual::registry::{Registry, Role};
    /// // A supervisor that runs a worker in its own process.
    /// let r = Registry::default().role(Role::Supervisor);
    /// assert_eq!(r.role, Some(Role::Supervisor));
    /// ```
    pub fn role(mut self, role: Role) -> Self {
        self.role = Some(role);
        self
    }
    /// Beat this often.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = punctual::registry::Registry::default().heartbeat(Duration::from_secs(1));
    /// assert_eq!(r.heartbeat, Duration::from_secs(1));
    /// ```
    pub fn heartbeat(mut self, d: Duration) -> Self {
        self.heartbeat = d;
        self
    }

    /// Registers a process of `role` serving `topics`, if enabled.
    pub(crate) fn start(
        &self,
        queue: &Queue,
        role: Role,
        topics: &[String],
        waiting: Option<Gauge>,
    ) -> Result<Option<Registration>> {
        if !self.enabled {
            return Ok(None);
        }
        let mut info = ProcessInfo::new(self.role.unwrap_or(role), topics.iter().cloned());
        if let Some(id) = &self.id {
            info.id = id.clone();
        }
        queue
            .register_gauged(info, self.heartbeat, waiting)
            .map(Some)
    }
}

/// A live registration: a task beats every period until [`stop`]
/// (which removes the record) or drop (which leaves the record to expire).
///
/// [`stop`]: Registration::stop
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use std::time::Duration;
/// use punctual::registry::{ProcessInfo, Role};
/// let info = ProcessInfo::new(Role::Worker, ["orders"]);
/// let registration = queue.register_process(info, Duration::from_secs(5))?;
/// // ... serve the topic ...
/// registration.stop().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Registration {
    id: String,
    queue: Queue,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Registration {
    /// The process id.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// use punctual::registry::{ProcessInfo, Role};
    /// let info = ProcessInfo::new(Role::Worker, ["orders"]).with_id("billing-7/worker-0");
    /// let registration = queue.register_process(info, Duration::from_secs(5))?;
    /// assert_eq!(registration.id(), "billing-7/worker-0");
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Stops beating and removes the record (and every record under
    /// `<id>/`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::registry::{ProcessInfo, Role};
    /// let sup = ProcessInfo::new(Role::Supervisor, Vec::<String>::new()).with_id("billing-7");
    /// let child = ProcessInfo::new(Role::Worker, ["orders"]).with_id("billing-7/worker-0");
    /// let sup = queue.register_process(sup, Duration::from_secs(1))?;
    /// let child = queue.register_process(child, Duration::from_secs(1))?;
    /// # punctual_testkit::eventually(Duration::from_secs(5), "both beat", async || {
    /// #     queue.processes().await.unwrap().len() == 2
    /// # })
    /// # .await;
    /// drop(child); // a child that went away without a word: its record stays until it expires
    /// sup.stop().await; // removes "billing-7" and every record under "billing-7/"
    /// assert!(queue.processes().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn stop(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
        if let Err(e) = self.queue.deregister_process(&self.id).await {
            tracing::warn!(id = %self.id, error = %e, "cannot remove this process's registry record; it expires on its own");
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// This host's name (Linux: /proc; else `HOSTNAME`; else `unknown`).
///
/// ```
/// let host = punctual::registry::hostname();
/// assert!(!host.is_empty());
/// assert_eq!(host, host.trim());
/// ```
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn record_key(prefix: &str, id: &str) -> String {
    format!("{prefix}:{{procs}}:p:{id}")
}

pub(crate) fn index_key(prefix: &str) -> String {
    format!("{prefix}:{{procs}}:index")
}

fn validate_process_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_PROCESS_ID_LEN {
        return Err(Error::invalid(format!(
            "process id {id:?}: give 1 to {MAX_PROCESS_ID_LEN} bytes"
        )));
    }
    if id.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::invalid(format!(
            "process id {id:?}: no spaces or control characters"
        )));
    }
    Ok(())
}

impl Queue {
    /// Registers a process and beats for it every `period` until the
    /// returned handle is stopped (record removed) or dropped (record left
    /// to expire). A failed beat is logged and tried again next period.
    /// Needs a tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::registry::{ProcessInfo, Role};
    /// let info = ProcessInfo::new(Role::Worker, ["orders"]);
    /// let registration = queue.register_process(info, Duration::from_secs(2))?;
    /// # punctual_testkit::eventually(Duration::from_secs(5), "the first beat", async || {
    /// #     !queue.processes().await.unwrap().is_empty()
    /// # })
    /// # .await;
    /// let me = &queue.processes().await?[0];
    /// assert_eq!(me.id, registration.id());
    /// assert_eq!(me.beat_period_ms, 2_000);
    /// assert!(me.beat_ms >= me.started_ms);
    /// registration.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn register_process(&self, info: ProcessInfo, period: Duration) -> Result<Registration> {
        self.register_gauged(info, period, None)
    }

    /// [`Queue::register_process`], with `waiting` read before each beat.
    fn register_gauged(
        &self,
        mut info: ProcessInfo,
        period: Duration,
        waiting: Option<Gauge>,
    ) -> Result<Registration> {
        validate_process_id(&info.id)?;
        if period < Duration::from_millis(100) {
            return Err(Error::invalid("the heartbeat must be at least 100ms"));
        }
        info.beat_period_ms = period.as_millis() as u64;
        let stop = CancellationToken::new();
        let queue = self.clone();
        let id = info.id.clone();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut warned = false;
            let mut clock = None;
            let mut beats: u64 = 0;
            loop {
                if let Some(gauge) = &waiting {
                    info.waiting = gauge();
                }
                match queue.beat(&mut info, &mut clock, beats).await {
                    Ok(()) => {
                        warned = false;
                        beats += 1;
                    }
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!(id = %info.id, error = %e, "registry beat failed; trying again every beat");
                    }
                    Err(_) => {}
                }
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(period) => {}
                }
            }
        });
        Ok(Registration {
            id,
            queue: self.clone(),
            stop,
            task,
        })
    }

    /// Redis's clock, epoch ms (what the registry's times are measured
    /// with).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// let now = queue.redis_now_ms().await?;
    /// assert!(now > 1_700_000_000_000); // epoch ms, after November 2023
    /// # Ok(()) }
    /// ```
    pub async fn redis_now_ms(&self) -> Result<i64> {
        let (secs, micros): (i64, i64) = self.cmd(&redis::cmd("TIME")).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Writes beat number `n` of `info`. Times are Redis's clock: read
    /// once (`TIME`, kept in `clock` with the local instant) and advanced
    /// by the local monotonic clock, so a beat is one command, `SET .. XX`,
    /// which keeps an idle process's load on Redis at 1 command per beat.
    /// The first beat, every [`INDEX_EVERY`]th, and one whose record had
    /// expired (the process was stopped, or Redis lost it) also write the
    /// index entry and trim the index.
    async fn beat(
        &self,
        info: &mut ProcessInfo,
        clock: &mut Option<(i64, std::time::Instant)>,
        n: u64,
    ) -> Result<()> {
        let (base, at) = match *clock {
            Some(c) => c,
            None => {
                let c = (self.redis_now_ms().await?, std::time::Instant::now());
                *clock = Some(c);
                c
            }
        };
        let now = base + at.elapsed().as_millis() as i64;
        if info.started_ms == 0 {
            info.started_ms = now;
        }
        info.beat_ms = now;
        let json = serde_json::to_string(info).expect("a process record serializes");
        let ttl = info.beat_period_ms * BEATS_TO_LIVE as u64;
        let key = record_key(self.prefix(), &info.id);
        if n > 0 && !n.is_multiple_of(INDEX_EVERY) {
            let kept: Option<String> = self
                .cmd(
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&json)
                        .arg("PX")
                        .arg(ttl)
                        .arg("XX"),
                )
                .await?;
            if kept.is_some() {
                return Ok(());
            }
        }
        let index = index_key(self.prefix());
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(&key)
            .arg(json)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("ZADD")
            .arg(&index)
            .arg(now)
            .arg(&info.id)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(&index)
            .arg("-inf")
            .arg(now - INDEX_KEEP_MS)
            .ignore();
        let mut conn = self.conn();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(Error::Redis)
    }

    /// Every live process in the registry, by role, then id. Index entries
    /// whose record expired are removed.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let now = queue.redis_now_ms().await?;
    /// for p in queue.processes().await? {
    ///     println!(
    ///         "{} {} on {} (pid {}), topics {:?}, last beat {} ms ago",
    ///         p.role, p.id, p.host, p.pid, p.topics, now - p.beat_ms
    ///     );
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        let index = index_key(self.prefix());
        let ids: Vec<String> = self
            .cmd(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))
            .await?;
        let mut out = Vec::new();
        let mut stale = Vec::new();
        for chunk in ids.chunks(500) {
            let keys: Vec<String> = chunk
                .iter()
                .map(|id| record_key(self.prefix(), id))
                .collect();
            let vals: Vec<Option<String>> = self.cmd(redis::cmd("MGET").arg(&keys)).await?;
            for (id, v) in chunk.iter().zip(vals) {
                match v.and_then(|s| serde_json::from_str::<ProcessInfo>(&s).ok()) {
                    Some(p) => out.push(p),
                    None => stale.push(id.clone()),
                }
            }
        }
        if !stale.is_empty() {
            self.cmd::<i64>(redis::cmd("ZREM").arg(&index).arg(&stale))
                .await?;
        }
        out.sort_by(|a, b| (a.role, &a.id).cmp(&(b.role, &b.id)));
        Ok(out)
    }

    /// Removes the record of process `id` and of every process under
    /// `<id>/` (a supervisor's reaped child and its resident programs).
    /// Returns how many records were removed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::registry::{ProcessInfo, Role};
    /// let info = ProcessInfo::new(Role::Worker, ["orders"]).with_id("billing-7/worker-0");
    /// let registration = queue.register_process(info, Duration::from_secs(1))?;
    /// # punctual_testkit::eventually(Duration::from_secs(5), "the first beat", async || {
    /// #     !queue.processes().await.unwrap().is_empty()
    /// # })
    /// # .await;
    /// drop(registration); // stops beating; the record would live 3 s more
    /// assert_eq!(queue.deregister_process("billing-7").await?, 1); // gone now
    /// assert!(queue.processes().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn deregister_process(&self, id: &str) -> Result<usize> {
        validate_process_id(id)?;
        let index = index_key(self.prefix());
        let ids: Vec<String> = self
            .cmd(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))
            .await?;
        let under = format!("{id}/");
        let mut gone: Vec<String> = ids.into_iter().filter(|i| i.starts_with(&under)).collect();
        gone.push(id.to_string());
        let keys: Vec<String> = gone.iter().map(|i| record_key(self.prefix(), i)).collect();
        let n: usize = self.cmd(redis::cmd("DEL").arg(&keys)).await?;
        self.cmd::<i64>(redis::cmd("ZREM").arg(&index).arg(&gone))
            .await?;
        Ok(n)
    }
}
