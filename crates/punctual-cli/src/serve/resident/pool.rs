//! A topic's [`Pool`] of resident programs in one worker process: the
//! queue its managers take jobs from ([`Request`], its [`Queued`] state),
//! how the first start went, and what `roles.rs` calls.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::{Delivery, Outcome};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::manager::{Manager, RESTART_MAX};
use crate::serve::config::ResidentConfig;
use crate::serve::metrics::MetricsSender;

/// How a program is stopped when it is retired (recycle, shutdown): fd 3
/// closed, then SIGTERM after `eof`, then SIGKILL after `term` more.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StopTimes {
    pub eof: Duration,
    pub term: Duration,
}

impl Default for StopTimes {
    fn default() -> Self {
        StopTimes {
            eof: Duration::from_secs(5),
            term: Duration::from_secs(1),
        }
    }
}

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
    state: Queued,
    /// When it was written to a program: its start.
    pub(super) started: Arc<std::sync::OnceLock<std::time::Instant>>,
}

const QUEUED: u8 = 0;

const SENT: u8 = 1;

const WITHDRAWN: u8 = 2;

impl Request {
    /// Takes the job for a program, unless it was withdrawn.
    pub(super) fn take(&self) -> bool {
        self.state.leave(SENT)
    }
}

/// A request's state, shared with the worker's side; while `QUEUED`, the
/// job counts as waiting to start in the pool's capacity (the worker's
/// registry record shows it as leased, not running).
struct Queued {
    state: Arc<AtomicU8>,
    capacity: Arc<punctual::Capacity>,
}

impl Queued {
    fn new(capacity: &Arc<punctual::Capacity>) -> Queued {
        capacity.waits();
        Queued {
            state: Arc::new(AtomicU8::new(QUEUED)),
            capacity: capacity.clone(),
        }
    }

    fn share(&self) -> Queued {
        Queued {
            state: self.state.clone(),
            capacity: self.capacity.clone(),
        }
    }

    /// Leaves `QUEUED` for `to`, unless it left already.
    fn leave(&self, to: u8) -> bool {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Readiness {
    Starting,
    Ready(usize),
    Failed,
    /// The first program spoke another protocol version.
    Refused,
}

/// How a pool's first start went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstStart {
    /// A program said `ready`, taking this many jobs at once.
    Ready(usize),
    /// The first start failed (it is retried with backoff).
    Failed,
    /// The program speaks another protocol version: it is not restarted.
    Refused,
}

/// Counters shared by a pool's managers (for /metrics).
#[derive(Debug, Default)]
pub(crate) struct PoolStats {
    pub alive: AtomicUsize,
    pub jobs: AtomicU64,
}

/// Where a pool's programs are registered in the process registry: under
/// their worker's id, as `<worker id>/resident-<topic>-<slot>`.
#[derive(Debug, Clone)]
pub(crate) struct Registered {
    pub queue: punctual::Queue,
    /// The worker's id.
    pub worker: String,
    pub heartbeat: Duration,
}

/// The resident programs of one topic in this worker process.
pub(crate) struct Pool {
    topic: String,
    cfg: Arc<ResidentConfig>,
    tx: mpsc::UnboundedSender<Request>,
    stop: CancellationToken,
    managers: Mutex<Vec<JoinHandle<()>>>,
    ready: watch::Receiver<Readiness>,
    pub stats: Arc<PoolStats>,
    /// Jobs the pool's ready programs can start now: the worker claims no
    /// more for this topic.
    pub capacity: Arc<punctual::Capacity>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("topic", &self.topic).finish()
    }
}

impl Pool {
    /// Starts `cfg.processes` programs for `topic`.
    pub(crate) fn start(
        topic: &str,
        cfg: ResidentConfig,
        times: StopTimes,
        metrics: Option<Arc<MetricsSender>>,
        registry: Option<Registered>,
    ) -> Arc<Pool> {
        let cfg = Arc::new(cfg);
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let stop = CancellationToken::new();
        let (ready_tx, ready) = watch::channel(Readiness::Starting);
        let ready_tx = Arc::new(ready_tx);
        let stats = Arc::new(PoolStats::default());
        let capacity = punctual::Capacity::new();
        let managers = (0..cfg.processes)
            .map(|slot| {
                let m = Manager {
                    topic: topic.to_string(),
                    slot,
                    cfg: cfg.clone(),
                    rx: rx.clone(),
                    stop: stop.clone(),
                    ready: ready_tx.clone(),
                    times,
                    metrics: metrics.clone(),
                    registry: registry.clone(),
                    stats: stats.clone(),
                    capacity: capacity.clone(),
                    open: 0,
                    carry: None,
                    retiring: Vec::new(),
                };
                tokio::spawn(m.run())
            })
            .collect();
        Arc::new(Pool {
            topic: topic.to_string(),
            cfg,
            tx,
            stop,
            managers: Mutex::new(managers),
            ready,
            stats,
            capacity,
        })
    }

    /// Programs in this pool.
    pub(crate) fn processes(&self) -> usize {
        self.cfg.processes
    }

    /// How the first start went: how many jobs one program takes at once,
    /// or why none does.
    pub(crate) async fn first_ready(&self) -> FirstStart {
        let mut rx = self.ready.clone();
        let Ok(r) = rx.wait_for(|r| *r != Readiness::Starting).await else {
            return FirstStart::Failed;
        };
        match *r {
            Readiness::Ready(n) => FirstStart::Ready(n),
            Readiness::Refused => FirstStart::Refused,
            _ => FirstStart::Failed,
        }
    }

    /// The worker's timeout for a job of this topic: only a backstop. The
    /// job's own `timeout` starts when it is written to a program, so time
    /// spent waiting for a free program does not count against it, and the
    /// backstop covers the longest such wait: with `concurrency` jobs
    /// claimed and `capacity` taken at once by the pool's programs, a job
    /// waits for at most `concurrency / capacity` rounds, each of which ends
    /// within a job's timeout plus a restart.
    /// A job with a timeout of its own (`Job::timeout`) longer than the
    /// topic's is given rounds of that length.
    pub(crate) fn backstop(
        &self,
        concurrency: usize,
        capacity: usize,
        job_timeout: Option<Duration>,
    ) -> Duration {
        backstop(&self.cfg, concurrency, capacity, job_timeout)
    }

    /// Runs one job on a program of the pool, and says when a program got
    /// it (None if none did). When `stop` fires (the worker is shutting
    /// down) before a program took the job, the job is handed back
    /// unstarted.
    pub(crate) async fn run(
        &self,
        d: Delivery,
        stop: CancellationToken,
    ) -> (Outcome, Option<std::time::Instant>) {
        let (reply, mut answer) = oneshot::channel();
        let cancel = CancellationToken::new();
        let guard = cancel.clone().drop_guard();
        let state = Queued::new(&self.capacity);
        let started = Arc::new(std::sync::OnceLock::new());
        let req = Request {
            d,
            reply,
            cancel,
            state: state.share(),
            started: started.clone(),
        };
        if self.tx.send(req).is_err() {
            return (Outcome::HandBack, None);
        }
        let answered = tokio::select! {
            a = &mut answer => Some(a),
            _ = stop.cancelled() => None,
        };
        let answered = match answered {
            Some(a) => a,
            None => {
                if state.leave(WITHDRAWN) {
                    guard.disarm();
                    return (Outcome::HandBack, None);
                }
                answer.await
            }
        };
        let outcome = answered.unwrap_or_else(|_| {
            Outcome::retry(format!(
                "the resident program of {} stopped before replying",
                self.topic
            ))
        });
        guard.disarm();
        (outcome, started.get().copied())
    }

    /// Retires every program (fd 3 closed, SIGTERM, SIGKILL: see
    /// `StopTimes`) and waits for them. Call after the worker stopped.
    pub(crate) async fn shutdown(&self) {
        self.stop.cancel();
        let managers = std::mem::take(&mut *self.managers.lock().unwrap());
        for m in managers {
            let _ = m.await;
        }
    }
}

/// See [`Pool::backstop`].
fn backstop(
    cfg: &ResidentConfig,
    concurrency: usize,
    capacity: usize,
    job_timeout: Option<Duration>,
) -> Duration {
    let rounds = concurrency.div_ceil(capacity.max(1)).max(1) as u32;
    let timeout = job_timeout.map_or(cfg.timeout, |t| t.max(cfg.timeout));
    (timeout + cfg.start_timeout + RESTART_MAX) * rounds + Duration::from_secs(5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backstop_covers_the_wait_for_a_free_program() {
        let cfg = ResidentConfig {
            argv: vec!["x".into()],
            env: Default::default(),
            cwd: None,
            processes: 1,
            max_jobs: 0,
            max_memory: None,
            start_timeout: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        };
        // 64 jobs claimed for one program taking one at a time: the last
        // waits behind 63 others, each ending within its timeout (a
        // restart included), so its backstop covers 64 rounds.
        let one_round = cfg.timeout + cfg.start_timeout + RESTART_MAX;
        assert!(backstop(&cfg, 64, 1, None) >= one_round * 64);
        assert!(backstop(&cfg, 64, 64, None) >= one_round);
        assert!(backstop(&cfg, 64, 64, None) < one_round * 2);
        // Capacity 0 (unknown) is taken as one.
        assert!(backstop(&cfg, 4, 0, None) >= one_round * 4);
        // A job's own longer timeout makes its rounds longer; a shorter one
        // does not shorten them (the jobs ahead may have the topic's).
        let long = Duration::from_secs(100);
        assert!(backstop(&cfg, 1, 1, Some(long)) >= long + cfg.start_timeout);
        assert_eq!(
            backstop(&cfg, 8, 1, Some(Duration::from_millis(1))),
            backstop(&cfg, 8, 1, None)
        );
    }
}
