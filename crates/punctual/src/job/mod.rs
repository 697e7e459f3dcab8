//! What producers send and what readers get back: a job and when it is due
//! (`builder.rs`, `when.rs`), where it is and how it reads (`state.rs`), a
//! topic's figures (`topic.rs`), and dead-letter selection and pacing
//! (`dead.rs`).

mod builder;
mod dead;
mod state;
mod topic;
mod when;

pub(crate) use crate::enqueued::{EnqueueStatus, Enqueued};
pub(crate) use builder::check_max_attempts;
pub use builder::{EnqueueOptions, Job, MAX_ATTEMPTS};
pub use dead::{DeadSelector, ReplayPace};
pub use state::{JobInfo, ListPage, Listed, State};
pub use topic::{TopicDeleted, TopicStats, Violation};
pub(crate) use when::ceil_ms;
pub use when::{When, MAX_DELAY};
