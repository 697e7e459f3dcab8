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

mod beat;
mod record;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::queue::Queue;
pub(crate) use record::Gauge;
pub use record::{
    hostname, ProcessInfo, Role, BEATS_TO_LIVE, DEFAULT_HEARTBEAT, MAX_PROCESS_ID_LEN,
};

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
