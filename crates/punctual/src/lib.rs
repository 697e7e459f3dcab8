//! punctual: a delay queue on Redis. Run each job at its due time, at least
//! once, never early, and never lose one.
//!
//! - [`Queue`] enqueues, inspects and administers jobs.
//! - [`Worker`] runs handlers for claimed jobs, extending their leases; a
//!   [`Handler`] gets a [`CancellationToken`] per delivery.
//! - [`Scheduler`] promotes due jobs and reclaims expired leases.
//! - [`raw`] holds the runtime's low-level calls (claim, ack, fail, extend,
//!   tick) for runtimes of one's own.
//! - [`audit`] records who changed what (replay, purge, cancel, ...).
//! - [`nodes`] reaches every node behind a URL for per-node admin work
//!   (`INFO`, `SCAN`, `DEL`), and [`TopicKeys`] names a topic's keys.
//!
//! All state changes are Lua scripts that run atomically inside Redis and take
//! every time from Redis `TIME`; see `docs/PROTOCOL.md`.

pub mod audit;
mod conn;
mod error;
mod handler;
mod history;
mod job;
mod keys;
pub mod nodes;
mod once;
mod partition;
mod queue;
pub mod raw;
mod redact;
pub mod registry;
mod reply;
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
pub use partition::{partition_name, partition_of, MAX_PARTITIONS};
pub use queue::{
    Queue, QueueBuilder, SkippedTopic, Topics, DEFAULT_MAX_PAYLOAD, DEFAULT_PREFIX, MAX_BATCH,
};
pub use raw::Delivery;
pub use redact::{redact, split_seeds};
pub use scheduler::{Scheduler, SchedulerConfig};
pub use scripts::{script_names, script_source};
pub use tokio_util::sync::CancellationToken;
pub use unlisted::Unlisted;
pub use worker::{Stopped, Worker, WorkerConfig};
