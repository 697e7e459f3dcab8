//! A job on its way from the worker to a program: a [`Request`] on the
//! pool's queue, and its [`Queued`] state, shared with the worker's side.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use punctual::{Delivery, Outcome};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// One job waiting for (or held by) a program.
pub(super) struct Request {
    pub(super) d: Delivery,
    pub(super) reply: oneshot::Sender<Outcome>,
    /// Cancelled when the handler future is dropped before the reply
    /// (timeout backstop, lease lost, shutdown abandon).
    pub(super) cancel: CancellationToken,
    /// `QUEUED`, then `SENT` when a manager writes it to a program, or
    /// `WITHDRAWN` when the worker took it back first (shutdown) or it was
    /// dropped unsent.
    pub(super) state: Queued,
    /// When a program started it.
    pub(super) started: Arc<std::sync::OnceLock<std::time::Instant>>,
    /// The worker's `stop` for this run (shutdown, a timeout, a lost
    /// lease): a job not started by then is handed back, not queued again.
    pub(super) stop: CancellationToken,
}

const QUEUED: u8 = 0;

const SENT: u8 = 1;

pub(super) const WITHDRAWN: u8 = 2;

impl Request {
    /// Takes the job for a program, unless it was withdrawn.
    pub(super) fn take(&self) -> bool {
        self.state.leave(SENT)
    }
}

/// A request's state, shared with the worker's side; while `QUEUED`, the
/// job counts as waiting to start in the pool's capacity (the worker's
/// registry record shows it as leased, not running).
pub(super) struct Queued {
    state: Arc<AtomicU8>,
    capacity: Arc<punctual::Capacity>,
}

impl Queued {
    pub(super) fn new(capacity: &Arc<punctual::Capacity>) -> Queued {
        capacity.waits();
        Queued {
            state: Arc::new(AtomicU8::new(QUEUED)),
            capacity: capacity.clone(),
        }
    }

    /// Back to `QUEUED` from `SENT`: a job written ahead to a program that
    /// went before it started the job waits for another, and the worker
    /// may withdraw it again (shutdown).
    pub(super) fn requeue(&self) {
        if self
            .state
            .compare_exchange(SENT, QUEUED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.capacity.waits();
        }
    }

    pub(super) fn share(&self) -> Queued {
        Queued {
            state: self.state.clone(),
            capacity: self.capacity.clone(),
        }
    }

    /// Leaves `QUEUED` for `to`, unless it left already.
    pub(super) fn leave(&self, to: u8) -> bool {
        let left = self
            .state
            .compare_exchange(QUEUED, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if left {
            self.capacity.started();
        }
        left
    }
}

impl Drop for Queued {
    /// A request dropped unsent is withdrawn (one side's drop is enough).
    fn drop(&mut self) {
        self.leave(WITHDRAWN);
    }
}
