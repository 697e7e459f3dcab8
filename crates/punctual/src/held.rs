//! How long ago a worker last knew it held a job's lease.
//!
//! A worker's keeper extends the leases it holds every `lease / 3`. A job
//! that waits inside a handler before it starts (a resident program's
//! queue) is covered by those extensions, but a worker stopped for a while
//! (SIGSTOP, swap, a long pause) extends nothing meanwhile: its leases may
//! have run out and the jobs been claimed elsewhere. The handler asks
//! `Delivery::lease_in_doubt` right before it starts such a job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

impl Extended {
    /// Whether a lease taken by a claim sent at `sent` may already be lost
    /// although nothing said so: not known held for over half the lease,
    /// not since `sent` nor since the keeper last extended it.
    pub(crate) fn in_doubt(&self, sent: Instant) -> bool {
        Instant::now() > self.doubt_from(sent)
    }

    /// When a lease taken by a claim sent at `sent` comes in doubt, as
    /// things stand: half the lease past when it was last known held.
    pub(crate) fn doubt_from(&self, sent: Instant) -> Instant {
        let known = self.last().map_or(sent, |at| at.max(sent));
        known + self.lease / 2
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
