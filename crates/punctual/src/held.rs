//! How long ago a worker last knew it held a job's lease.
//!
//! A worker's keeper extends the leases it holds every `lease / 3`. A job
//! that waits inside a handler before it starts (a resident program's
//! queue) is covered by those extensions, but a worker stopped for a while
//! (SIGSTOP, swap, a long pause) extends nothing meanwhile: its leases may
//! have run out and the jobs been claimed elsewhere. The handler asks
//! [`Delivery::lease_in_doubt`] right before it starts such a job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::raw::Delivery;

/// The instant a process's monotonic clock is counted from here.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// One held job's lease length and when its keeper last extended it.
#[derive(Debug)]
pub(crate) struct Extended {
    lease: Duration,
    /// Microseconds after [`epoch`], plus 1; 0 until the first extension.
    at_us: AtomicU64,
}

impl Extended {
    pub(crate) fn new(lease: Duration) -> Self {
        epoch();
        Extended {
            lease,
            at_us: AtomicU64::new(0),
        }
    }

    /// The keeper extended the lease in a round listed at `round` (the
    /// extension ran after it, so the lease holds at least `lease` past it).
    pub(crate) fn mark(&self, round: Instant) {
        let us = round.saturating_duration_since(epoch()).as_micros() as u64;
        self.at_us.fetch_max(us + 1, Ordering::Relaxed);
    }

    fn last(&self) -> Option<Instant> {
        match self.at_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(epoch() + Duration::from_micros(us - 1)),
        }
    }
}

impl Delivery {
    /// Whether this job's lease may already be lost although nothing said
    /// so: its worker has not known it held for over half the lease, not
    /// since the claim was sent nor since its keeper last extended it (the
    /// worker was stopped, or Redis unreachable, for that long). A handler
    /// that holds jobs before starting them asks this right before each
    /// start, and hands the job back instead of starting it. False for a
    /// delivery outside a worker.
    pub fn lease_in_doubt(&self) -> bool {
        let Some(extended) = &self.extended else {
            return false;
        };
        let known = extended.last().map_or(self.sent, |at| at.max(self.sent));
        known.elapsed() > extended.lease / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_mark_wins_and_none_before_the_first() {
        let e = Extended::new(Duration::from_millis(100));
        assert_eq!(e.last(), None);
        let first = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let second = Instant::now();
        e.mark(second);
        e.mark(first);
        let at = e.last().unwrap();
        // Microsecond precision; an older mark never moves it back.
        assert!(at <= second && second - at < Duration::from_millis(1));
    }
}
