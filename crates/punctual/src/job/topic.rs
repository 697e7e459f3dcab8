//! What readers get back about a whole topic: its sizes and counters, the
//! broken invariants `check` finds, and what deleting it did.

use serde::Serialize;

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
