//! punctual: a delay queue on Redis. Run each job at its due time, at least
//! once, never early, and never lose one.
//!
//! The API, by task:
//!
//! - **Produce**: [`Queue`] (made by [`Queue::connect`] or
//!   [`Queue::builder`], a [`QueueBuilder`]) enqueues a [`Job`] due
//!   [`When`], alone or in batches of up to [`MAX_BATCH`], and reports each
//!   as [`Enqueued`] with its [`EnqueueStatus`]; [`EnqueueOptions`] holds a
//!   job's options; [`Queue::cancel`] and [`Queue::reschedule`] change one.
//! - **Consume**: a [`Worker`] ([`WorkerConfig`], [`Capacity`]) runs a
//!   [`Handler`] for each claimed job, a [`Delivery`], extending its lease;
//!   the handler returns an [`Outcome`] and gets a [`CancellationToken`]
//!   ([`cancellable`], [`Cancellable`], [`BoxedHandler`]); [`AttemptEnd`]
//!   tells how each attempt ended; [`Stopped`] is what a stopped worker
//!   left.
//! - **Schedule**: a [`Scheduler`] ([`SchedulerConfig`]) promotes due jobs,
//!   reclaims expired leases and fires the topic's recurring
//!   [`schedule`]s.
//! - **Inspect and administer** (methods of [`Queue`]): [`JobInfo`] and
//!   [`State`] of one job, [`TopicStats`], [`ListPage`] of [`Listed`] jobs,
//!   [`Topics`] ([`SkippedTopic`]), dead jobs ([`DeadSelector`],
//!   [`ReplayPace`]), [`Violation`]s found by a check, [`TopicDeleted`],
//!   per-minute [`History`] ([`MinuteFigures`], [`Lateness`]).
//! - **Limit**: [`Limits`] ([`Rate`], [`Limited`]) of a topic; groups of
//!   jobs ([`GroupInfo`], [`GroupLimits`], [`GroupHold`]); partitions (at
//!   most [`MAX_PARTITIONS`]).
//! - **Check input** before sending it: [`validate_topic`], [`validate_id`],
//!   [`validate_group`], [`validate_traceparent`], [`validate_tracestate`],
//!   and the limits [`MAX_TOPIC_LEN`], [`MAX_ID_LEN`], [`MAX_GROUP_LEN`],
//!   [`MAX_TRACESTATE_LEN`], [`MAX_ATTEMPTS`], [`MAX_DELAY`]; the defaults
//!   [`DEFAULT_PREFIX`], [`DEFAULT_MAX_PAYLOAD`], [`DEFAULT_ENQUEUE_CHUNK`],
//!   [`DEFAULT_LOADING_WAIT`], [`DEFAULT_CLAIM_BATCH`].
//! - **Errors**: [`Error`] ([`ErrorKind`]) and [`Result`].
//! - **Runtimes of one's own**: [`raw`] holds the low-level calls (claim,
//!   ack, fail, extend, tick); [`registry`] the records that workers,
//!   schedulers and other processes keep while they run.
//!
//! [`internal`] is the project's own tooling (for the `punctual` binary,
//! the bench and the tests), with no stability promise.
//!
//! All state changes are Lua scripts that run atomically inside Redis and take
//! every time from Redis `TIME`; see `docs/PROTOCOL.md`.
//!
//! A producer, a scheduler and a worker in one program (they may as well
//! run in separate processes, sharing only the Redis):
//!
//! ```no_run
//! use std::time::Duration;
//! use punctual::{CancellationToken, Job, Outcome, Queue, Scheduler, Worker};
//!
//! #[tokio::main]
//! async fn main() -> punctual::Result<()> {
//!     let queue = Queue::connect("redis://127.0.0.1:6379").await?;
//!
//!     // Close order 10086 in 30 minutes unless it is paid by then.
//!     let job = Job::new(r#"{"order":10086}"#)
//!         .id("close:10086")
//!         .delay(Duration::from_secs(30 * 60));
//!     queue.enqueue("orders", job).await?;
//!     // ... paid: queue.cancel("orders", "close:10086").await?;
//!
//!     let stop = CancellationToken::new();
//!     let scheduler = Scheduler::new(queue.clone(), Default::default()).topic("orders");
//!     let worker = Worker::new(queue.clone(), Default::default()).handle("orders", |job| async move {
//!         println!("closing {}", String::from_utf8_lossy(&job.payload));
//!         Outcome::Done
//!     });
//!     let s = tokio::spawn(scheduler.run(stop.clone().cancelled_owned()));
//!     let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
//!     tokio::signal::ctrl_c().await.ok();
//!     stop.cancel();
//!     s.await.expect("scheduler task")?;
//!     w.await.expect("worker task")?;
//!     Ok(())
//! }
//! ```

mod conn;
mod enqueued;
mod error;
mod handler;
mod held;
mod history;
pub mod internal;
mod job;
mod keys;
mod lease;
mod limits;
mod once;
mod ops;
mod options;
#[cfg(feature = "opentelemetry")]
mod otel;
mod partition;
mod queue;
pub mod raw;
mod redact;
pub mod registry;
mod reply;
pub mod schedule;
mod scheduler;
mod scripts;
mod topology;
mod unlisted;
mod wake;
mod worker;

pub use enqueued::{EnqueueStatus, Enqueued};
pub use error::{Error, ErrorKind, Result};
pub use handler::{cancellable, BoxedHandler, Cancellable, Handler, Outcome};
pub use history::{History, Lateness, MinuteFigures};
pub use job::{
    DeadSelector, EnqueueOptions, Job, JobInfo, ListPage, Listed, ReplayPace, State, TopicDeleted,
    TopicStats, Violation, When, MAX_ATTEMPTS, MAX_DELAY,
};
pub use keys::{validate_id, validate_topic, MAX_ID_LEN, MAX_TOPIC_LEN};
pub use limits::{Limited, Limits, Rate};
pub use options::{
    validate_group, validate_traceparent, validate_tracestate, MAX_GROUP_LEN, MAX_TRACESTATE_LEN,
};
pub use partition::MAX_PARTITIONS;
pub use queue::{
    GroupHold, GroupInfo, GroupLimits, Queue, QueueBuilder, SkippedTopic, Topics,
    DEFAULT_ENQUEUE_CHUNK, DEFAULT_LOADING_WAIT, DEFAULT_MAX_PAYLOAD, DEFAULT_PREFIX, MAX_BATCH,
};
pub use raw::Delivery;
pub use scheduler::{Scheduler, SchedulerConfig};
pub use tokio_util::sync::CancellationToken;
pub use worker::{AttemptEnd, Capacity, Stopped, Worker, WorkerConfig, DEFAULT_CLAIM_BATCH};
