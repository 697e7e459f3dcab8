//! The project's own tooling, for the `punctual` binary (its admin
//! commands, HTTP API and `serve`), `punctual bench` and punctual's tests:
//! the audit trail, per-node admin work, key and partition names, the
//! scripts' sources, URL redaction, the history's limits.
//!
//! **No stability promise.** Anything here may change or go in any
//! release, without a deprecation. A program that uses punctual needs none
//! of it: the crate's root is the API.

pub mod audit;
pub mod nodes;

pub use crate::history::{HISTORY_TTL, LATENESS_BUCKETS_MS, MAX_HISTORY_MINUTES};
pub use crate::keys::TopicKeys;
pub use crate::partition::{partition_name, partition_of};
pub use crate::redact::{redact, split_seeds};
pub use crate::scripts::{script_names, script_source};
pub use crate::unlisted::Unlisted;
