//! punctual: a delay queue on Redis. Run each job at its due time, at least
//! once, never early, and never lose one.
//!
//! - [`Queue`] enqueues, inspects and administers jobs.
//! - [`Worker`] runs handlers for claimed jobs, extending their leases; a
//!   [`Handler`] gets a [`CancellationToken`] per delivery.
//! - [`Scheduler`] promotes due jobs and reclaims expired leases, and fires
//!   the topic's recurring [`schedule`]s.
//! - [`raw`] holds the runtime's low-level calls (claim, ack, fail, extend,
//!   tick) for runtimes of one's own.
//! - [`audit`] records who changed what (replay, purge, cancel, ...).
//! - [`nodes`] reaches every node behind a URL for per-node admin work
//!   (`INFO`, `SCAN`, `DEL`), and [`TopicKeys`] names a topic's keys.
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

pub mod audit;
mod conn;
mod error;
mod handler;
mod held;
mod history;
mod job;
mod keys;
mod lease;
mod limits;
pub mod nodes;
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

pub use error::{Error, ErrorKind, Result};
pub use handler::{cancellable, BoxedHandler, Cancellable, Handler, Outcome};
pub use history::{
    History, Lateness, MinuteFigures, HISTORY_TTL, LATENESS_BUCKETS_MS, MAX_HISTORY_MINUTES,
};
pub use job::{
    DeadSelector, EnqueueOptions, EnqueueStatus, Enqueued, Job, JobInfo, ListPage, Listed,
    ReplayPace, State, TopicDeleted, TopicStats, Violation, When, MAX_ATTEMPTS, MAX_DELAY,
};
pub use keys::{validate_id, validate_topic, TopicKeys, MAX_ID_LEN, MAX_TOPIC_LEN};
pub use limits::{Limited, Limits, Rate};
pub use options::{
    validate_group, validate_traceparent, validate_tracestate, MAX_GROUP_LEN, MAX_TRACESTATE_LEN,
};
pub use partition::{partition_name, partition_of, MAX_PARTITIONS};
pub use queue::{
    GroupHold, GroupInfo, GroupLimits, Queue, QueueBuilder, SkippedTopic, Topics,
    DEFAULT_ENQUEUE_CHUNK, DEFAULT_LOADING_WAIT, DEFAULT_MAX_PAYLOAD, DEFAULT_PREFIX, MAX_BATCH,
};
pub use raw::Delivery;
pub use redact::{redact, split_seeds};
pub use scheduler::{Scheduler, SchedulerConfig};
pub use scripts::{script_names, script_source};
pub use tokio_util::sync::CancellationToken;
pub use unlisted::Unlisted;
pub use worker::{AttemptEnd, Capacity, Stopped, Worker, WorkerConfig, DEFAULT_CLAIM_BATCH};
