//! What enqueue answers for each job: its id and what became of it. A leaf
//! the error type names too (a batch that failed part way reports what it
//! wrote).

use serde::Serialize;

/// What enqueue did with one job.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::{EnqueueStatus, Job};
/// let out = queue.enqueue("orders", Job::new("x").id("order:1")).await?;
/// match out.status {
///     EnqueueStatus::Created | EnqueueStatus::Replaced => println!("{} queued", out.id),
///     EnqueueStatus::Duplicate => println!("{} was queued already", out.id),
///     EnqueueStatus::Dead => println!("{} is dead: replay it", out.id),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EnqueueStatus {
    /// Added.
    Created,
    /// A job with this id was live already; nothing changed.
    Duplicate,
    /// A live job with this id was replaced.
    Replaced,
    /// A job with this id is in the dead-letter set; nothing changed, so
    /// this job will not run: replay the dead one
    /// ([`crate::Queue::dead_replay`]) or enqueue with replace.
    Dead,
    /// This occurrence of a schedule was fired before (it is in
    /// `P:{T}:fired`, which keeps the last 7 days), or this id was enqueued
    /// with [`EnqueueOptions::mark`](crate::EnqueueOptions::mark) before; nothing changed. Only the
    /// firer of [`crate::schedule`] and marked enqueues use the fired key, so
    /// only it sees this status.
    #[serde(rename = "fired_before")]
    FiredBefore,
}

impl EnqueueStatus {
    /// The lowercase name, as JSON and the CLI print it.
    ///
    /// ```
    /// assert_eq!(punctual::EnqueueStatus::Duplicate.as_str(), "duplicate");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            EnqueueStatus::Created => "created",
            EnqueueStatus::Duplicate => "duplicate",
            EnqueueStatus::Replaced => "replaced",
            EnqueueStatus::Dead => "dead",
            EnqueueStatus::FiredBefore => "fired_before",
        }
    }
}

impl std::fmt::Display for EnqueueStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of enqueueing one job.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let enqueued = queue.enqueue("orders", punctual::Job::new("x")).await?;
/// println!("{} {}", enqueued.id, enqueued.status);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enqueued {
    /// The job's id, given or generated.
    pub id: String,
    /// What happened.
    pub status: EnqueueStatus,
}

impl Enqueued {
    /// Whether the id was live already and nothing changed (a plain
    /// duplicate, or an id in the dead-letter set: [`Enqueued::is_dead`]).
    ///
    /// ```
    /// use punctual::{EnqueueStatus, Enqueued};
    /// let e = Enqueued { id: "order:1".into(), status: EnqueueStatus::Dead };
    /// assert!(e.is_duplicate());
    /// let e = Enqueued { id: "order:1".into(), status: EnqueueStatus::Replaced };
    /// assert!(!e.is_duplicate());
    /// ```
    pub fn is_duplicate(&self) -> bool {
        matches!(
            self.status,
            EnqueueStatus::Duplicate | EnqueueStatus::Dead | EnqueueStatus::FiredBefore
        )
    }

    /// Whether the id is in the dead-letter set, so nothing was enqueued and
    /// the job will not run unless it is replayed.
    ///
    /// ```
    /// use punctual::{EnqueueStatus, Enqueued};
    /// let e = Enqueued { id: "order:1".into(), status: EnqueueStatus::Dead };
    /// assert!(e.is_dead());
    /// let e = Enqueued { id: "order:1".into(), status: EnqueueStatus::Duplicate };
    /// assert!(!e.is_dead());
    /// ```
    pub fn is_dead(&self) -> bool {
        self.status == EnqueueStatus::Dead
    }
}
