//! A topic's [`Pool`] of resident programs in one worker process: what
//! `roles.rs` calls (start, first start, backstop, run a job, shutdown).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::{Delivery, Outcome};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::manager::{Manager, PoolStats, Readiness, Registered, RESTART_MAX};
use super::program::{StopTimes, Takes};
use super::request::{Queued, Request, WITHDRAWN};
use crate::serve::config::ResidentConfig;
use crate::serve::metrics::MetricsSender;

/// How a pool's first start went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstStart {
    /// A program said `ready`, taking this.
    Ready(Takes),
    /// The first start failed (it is retried with backoff).
    Failed,
    /// The program speaks another protocol version: it is not restarted.
    Refused,
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
                    topic: topic.into(),
                    slot,
                    cfg: cfg.clone(),
                    rx: rx.clone(),
                    requeue: tx.downgrade(),
                    stop: stop.clone(),
                    ready: ready_tx.clone(),
                    times,
                    metrics: metrics.clone(),
                    registry: registry.clone(),
                    stats: stats.clone(),
                    capacity: capacity.clone(),
                    open: 0,
                    carry: Default::default(),
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
            stop: stop.clone(),
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
            lookahead_budget: Duration::from_millis(2),
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
