//! [`Capacity`], how many jobs of a topic its handler can start now, and
//! the [`Ticket`] of one job's use of it.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// How many jobs of a topic its handler can start now, for a handler that
/// starts jobs on resources of its own (a pool of programs, each taking a
/// few at once): a [`Worker`](crate::Worker) given it ([`Worker::capacity`](crate::Worker::capacity)) claims no
/// more jobs of the topic than are free, so no job waits leased while
/// nobody works on it. The handler opens capacity as its resources become
/// able to start jobs and closes it as they stop; the worker counts a job
/// as using one from its claim until its handler returns.
///
/// ```
/// use punctual::Capacity;
/// let cap = Capacity::new();
/// assert_eq!(cap.free(), 0); // nothing can start yet: nothing is claimed
/// cap.open(4); // a program that takes 4 jobs at once is ready
/// assert_eq!(cap.free(), 4);
/// cap.close(4); // it exited
/// assert_eq!(cap.free(), 0);
/// ```
#[derive(Debug, Default)]
pub struct Capacity {
    state: Mutex<CapacityState>,
    /// Jobs claimed for it that no handler started yet.
    waiting: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct CapacityState {
    open: usize,
    used: usize,
    /// The fetcher's wake-up: told when capacity frees.
    waker: Option<Arc<Notify>>,
}

impl Capacity {
    /// No capacity yet.
    pub fn new() -> Arc<Capacity> {
        Arc::new(Capacity::default())
    }

    /// `n` more jobs can be started at once (a program became ready).
    pub fn open(&self, n: usize) {
        let mut st = self.state.lock().unwrap();
        st.open += n;
        if let Some(w) = &st.waker {
            w.notify_one();
        }
    }

    /// `n` fewer (a program stopped taking jobs).
    pub fn close(&self, n: usize) {
        let mut st = self.state.lock().unwrap();
        st.open = st.open.saturating_sub(n);
    }

    /// A claimed job now waits inside the handler for a place to start
    /// (a resident pool's queue): until [`Capacity::started`], the
    /// worker's registry record counts it as leased but not running
    /// ([`crate::registry::ProcessInfo::waiting`]), and the worker claims
    /// more only once fewer jobs wait than capacity is free. Every `waits`
    /// must be followed by one `started`, also for a job that never starts
    /// (handed back, failed): an unpaired one holds claims back for good.
    pub fn waits(&self) {
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A job counted by [`Capacity::waits`] started, or left unstarted.
    pub fn started(&self) {
        let Ok(before) = self.waiting.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |n| n.checked_sub(1),
        ) else {
            return;
        };
        // The fetcher is woken only when this made room to claim (when
        // there was room already, it knows).
        let st = self.state.lock().unwrap();
        let free = st.open.saturating_sub(st.used) as u64;
        if before >= free && before - 1 < free {
            if let Some(w) = &st.waker {
                w.notify_one();
            }
        }
    }

    /// Jobs waiting to start ([`Capacity::waits`]).
    pub fn waiting(&self) -> u64 {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Open capacity not in use (the worker claims it once fewer jobs
    /// wait to start than this).
    pub fn free(&self) -> usize {
        let st = self.state.lock().unwrap();
        st.open.saturating_sub(st.used)
    }

    /// What the worker may claim now: the free capacity, once fewer jobs
    /// wait to start than it (0 before). Waiting for that makes claims
    /// bigger, each call's cost shared by more jobs, and keeps a job
    /// queued for every program that can take one.
    fn claimable(&self, st: &CapacityState) -> usize {
        let free = st.open.saturating_sub(st.used);
        if self.waiting() as usize >= free {
            return 0;
        }
        free
    }

    /// Takes up to `want` of the claimable capacity; returns how much.
    pub(super) fn take(&self, want: usize) -> usize {
        let mut st = self.state.lock().unwrap();
        let k = self.claimable(&st).min(want);
        st.used += k;
        k
    }

    /// A job that held one unit ended: the fetcher may claim again.
    pub(super) fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut st = self.state.lock().unwrap();
        st.used = st.used.saturating_sub(n);
        if self.claimable(&st) > 0 {
            if let Some(w) = &st.waker {
                w.notify_one();
            }
        }
    }

    /// The fetcher took more than its claim brought back: the rest is free
    /// again, without a wake-up (the fetcher knows, and a wake-up here would
    /// have it claim again at once, in a loop, while nothing is due).
    pub(super) fn unused(&self, n: usize) {
        let mut st = self.state.lock().unwrap();
        st.used = st.used.saturating_sub(n);
    }

    pub(super) fn wake(&self, notify: Arc<Notify>) {
        self.state.lock().unwrap().waker = Some(notify);
    }
}

/// One job's use of a topic's [`Capacity`], given back when dropped (when
/// its slot ends).
pub(super) struct Ticket(pub(super) Option<Arc<Capacity>>);

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.give_back(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Claims wait until fewer jobs wait to start than could be claimed,
    /// and the fetcher is woken only then.
    #[tokio::test]
    async fn claims_wait_until_fewer_jobs_wait_than_are_free() {
        let cap = Capacity::new();
        let notify = Arc::new(Notify::new());
        cap.wake(notify.clone());
        cap.open(4);
        notify.notified().await; // open wakes the fetcher
        assert_eq!(cap.take(8), 4);
        // One runs, three wait; then the running one ends.
        for _ in 0..4 {
            cap.waits();
        }
        cap.started();
        cap.give_back(1);
        // 1 free, 3 waiting: nothing to claim, and no wake-up.
        assert_eq!(cap.take(8), 0);
        let woken = tokio::time::timeout(Duration::from_millis(50), notify.notified()).await;
        assert!(woken.is_err(), "woken with nothing to claim");
        // The next starts and ends: 2 free, 2 waiting; still nothing.
        cap.started();
        cap.give_back(1);
        assert_eq!(cap.take(8), 0);
        // Another starts: 2 free, 1 waiting: the fetcher is woken to claim 2.
        cap.started();
        tokio::time::timeout(Duration::from_secs(5), notify.notified())
            .await
            .expect("woken once fewer wait than are free");
        assert_eq!(cap.take(8), 2);
    }
}
