//! A process's record as Redis keeps it: its [`Role`], the [`ProcessInfo`]
//! written every beat, the keys, and the limits on both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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

pub(super) fn validate_process_id(id: &str) -> Result<()> {
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
