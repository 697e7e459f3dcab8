//! Recurring schedules: a cron expression in a time zone, or a fixed
//! interval, that enqueues an ordinary job at each occurrence.
//!
//! A [`Schedule`] is stored in Redis (`P:{T}:schedules`, name → JSON; see
//! docs/PROTOCOL.md "Schedules"), so any host can fire it. Every
//! [`crate::Scheduler`] of the topic runs a *firer*: under a short lock it
//! enqueues each occurrence up to [`AHEAD`] in advance as a job with id
//! `<name>@<occurrence ms>`, due at the occurrence (so never early), and
//! raises the schedule's watermark. The enqueue script's fired guard
//! (`P:{T}:fired`, 7 days) makes each occurrence fire at most once even when
//! firers race, stall or lose the watermark.
//!
//! Its parts: `model` (a [`Schedule`] and its checks), `occurrences` (when
//! it occurs, in its time zone), `plan` (what one firer pass does with
//! it, without Redis), `store` (the keys, the lock and the calls on
//! [`Queue`](crate::Queue) that change and list schedules) and `firer`
//! (the loop each scheduler runs).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> punctual::Result<()> {
//! # let redis = punctual_testkit::RedisServer::start();
//! # let queue = punctual::Queue::connect(redis.url()).await?;
//! use punctual::schedule::{CatchUp, Schedule};
//! let nightly = Schedule::cron("nightly", "0 3 * * *")
//!     .tz("Europe/Berlin")
//!     .payload(r#"{"kind":"report"}"#)
//!     .catch_up(CatchUp::Latest);
//! queue.schedule_put("orders", nightly).await?;
//! let listed = queue.schedules("orders").await?;
//! assert_eq!(listed[0].schedule.name, "nightly");
//! assert!(listed[0].next_ms.is_some());
//! # Ok(()) }
//! ```

mod firer;
mod model;
mod occurrences;
mod plan;
mod store;

use std::time::Duration;

pub(crate) use firer::fire_loop;
pub use model::{validate_name, CatchUp, Schedule, ScheduleInfo};
pub(crate) use store::channel;
pub use store::occurrence_id;

/// How far ahead of an occurrence the firer enqueues it (60 s): the job then
/// waits in the pool like any delayed job, so it starts as precisely as one.
///
/// ```
/// assert_eq!(punctual::schedule::AHEAD.as_secs(), 60);
/// ```
pub const AHEAD: Duration = Duration::from_secs(60);

/// Most missed occurrences one firer pass enqueues for catch-up `all` or
/// `spread` (the next pass continues).
///
/// ```
/// assert_eq!(punctual::schedule::MAX_CATCH_UP, 1_000);
/// ```
pub const MAX_CATCH_UP: usize = 1000;

/// An occurrence less than this far in the past when the firer looks at it
/// (1 s) is not *missed*: it is enqueued (due at once) whatever the catch-up
/// policy, so a firer that wakes a little late, or a schedule created a
/// moment before its first occurrence, loses nothing.
///
/// ```
/// assert_eq!(punctual::schedule::LATE_GRACE.as_millis(), 1_000);
/// ```
pub const LATE_GRACE: Duration = Duration::from_secs(1);

/// How long the enqueue script keeps an occurrence's id in `P:{T}:fired`
/// (7 days): within it, an occurrence never fires twice.
///
/// ```
/// assert_eq!(punctual::schedule::FIRED_KEEP.as_secs(), 7 * 24 * 3600);
/// ```
pub const FIRED_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

/// Longest schedule name, in bytes.
///
/// ```
/// use punctual::schedule::{Schedule, MAX_NAME_LEN};
/// assert!(Schedule::every("n".repeat(MAX_NAME_LEN), std::time::Duration::from_secs(5)).validate().is_ok());
/// ```
pub const MAX_NAME_LEN: usize = 100;
