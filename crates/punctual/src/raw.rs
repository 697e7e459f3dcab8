//! The runtime's low-level operations: claim, ack, fail, extend, tick. Most
//! programs use [`crate::Worker`] and [`crate::Scheduler`], which call these;
//! they are public for runtimes of one's own, tests and benchmarks.
//!
//! Every call names one [`Partition`] (a topic, or one partition of a
//! partitioned topic) and holds jobs by their [`Lease`]: the job id and the
//! fencing token of its claim, which a stale holder cannot use.
//!
//! ```no_run
//! # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
//! use std::time::Duration;
//! use punctual::raw::{self, FailKind, TickLimits};
//!
//! for part in raw::partitions(&queue, "orders").await? {
//!     raw::tick(&queue, &part, &TickLimits::default()).await?;
//!     for job in raw::claim(&queue, &part, 10, Duration::from_secs(30)).await? {
//!         if job.payload.is_empty() {
//!             raw::fail(&queue, &part, &job.lease(), "empty payload", FailKind::Permanent).await?;
//!         } else {
//!             raw::ack(&queue, &part, &[job.lease()]).await?;
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```

use crate::error::Result;
use crate::queue::Queue;

pub use crate::lease::{Lease, Partition};
pub use crate::ops::ack::ack;
pub use crate::ops::claim::{claim, claim_with_wait, Claimed, Delivery, Wait};
pub use crate::ops::extend::extend;
pub use crate::ops::fail::{fail, fail_expired, hand_back, FailKind, Failed};
pub(crate) use crate::ops::tick::tick_with_grace;
pub use crate::ops::tick::{tick, Tick, TickLimits};

/// The partitions of `topic` as the layout in Redis has them (`[topic]`
/// when it is not partitioned).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for part in punctual::raw::partitions(&queue, "orders").await? {
///     println!("{part}");
/// }
/// # Ok(()) }
/// ```
pub async fn partitions(queue: &Queue, topic: &str) -> Result<Vec<Partition>> {
    Ok(queue
        .partition_names(topic)
        .await?
        .into_iter()
        .map(Partition::known)
        .collect())
}
