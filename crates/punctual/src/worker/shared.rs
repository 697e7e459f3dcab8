//! What the parts of a running worker share: its topic entries and the
//! runs it holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::handler::BoxedHandler;
use crate::held::Extended;
use crate::queue::Queue;
use crate::raw::Delivery;

use super::attempt::AttemptObserver;
use super::capacity::Capacity;
use super::config::WorkerConfig;

pub(super) struct TopicEntry {
    /// The topic, or one partition of it (`orders#2`): what claims name.
    pub(super) name: String,
    /// The topic handlers see.
    pub(super) logical: String,
    pub(super) handler: BoxedHandler,
    pub(super) timeout: Duration,
    /// When the handler enforces the job's timeout itself: how long the
    /// worker lets a job run (instead of `timeout` or the job's own).
    pub(super) backstop: Option<Backstop>,
    /// How many jobs the handler can start now, when it says
    /// ([`Worker::capacity`](crate::Worker::capacity)): claims take no more.
    pub(super) gate: Option<Arc<Capacity>>,
}

impl TopicEntry {
    /// A topic's handler as registered (not partitioned, no capacity yet).
    pub(super) fn new(
        topic: String,
        handler: BoxedHandler,
        timeout: Duration,
        backstop: Option<Backstop>,
    ) -> TopicEntry {
        TopicEntry {
            name: topic.clone(),
            logical: topic,
            handler,
            timeout,
            backstop,
            gate: None,
        }
    }
}

/// See [`Worker::handler_with_backstop`](crate::Worker::handler_with_backstop).
pub(super) type Backstop = Arc<dyn Fn(&Delivery) -> Duration + Send + Sync>;

/// One run of a handler, as the keeper and the shutdown see it.
pub(super) struct Running {
    /// Cancelled when the lease is lost: the run's slot then fires the
    /// handler's token and drops the run after the grace.
    pub(super) lost: CancellationToken,
    /// The delivery's [`Delivery::cancelled`]: fired by the cancel
    /// listener when an operator cancelled the job.
    pub(super) cancelled: CancellationToken,
    /// Drops the run at once (the shutdown timeout).
    pub(super) abort: AbortHandle,
    /// When the keeper last extended its lease (the delivery's copy tells
    /// a handler that holds it before starting whether it still may).
    pub(super) extended: Arc<Extended>,
}

pub(super) struct Shared {
    pub(super) queue: Queue,
    pub(super) config: WorkerConfig,
    pub(super) topics: Vec<TopicEntry>,
    /// Jobs leased by this process, until their ack or fail is recorded:
    /// per topic entry (the index of `topics`), by id.
    pub(super) inflight: Mutex<Vec<HashMap<String, (i64, Running)>>>,
    /// Cancelled when shutdown starts; each run's token is a child of it.
    pub(super) stopping: CancellationToken,
    /// How late jobs started, until added to the history in Redis.
    pub(super) lateness: crate::history::LatenessBook,
    /// Told of every attempt's end ([`Worker::on_attempt`](crate::Worker::on_attempt)).
    pub(super) observer: Option<AttemptObserver>,
}

pub(super) fn forget(shared: &Shared, ti: usize, id: &str, token: i64) {
    forget_held(&mut shared.inflight.lock().unwrap()[ti], id, token);
}

/// Forgets job `id` of one topic entry, if this process still holds it
/// under `token` (not a later delivery's).
pub(super) fn forget_held(held: &mut HashMap<String, (i64, Running)>, id: &str, token: i64) {
    if held.get(id).is_some_and(|(t, _)| *t == token) {
        held.remove(id);
    }
}
