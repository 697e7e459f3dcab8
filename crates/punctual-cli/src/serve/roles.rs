//! The child processes of `serve`: a worker runs handlers, a scheduler
//! promotes and reclaims. Both stop on SIGTERM or SIGINT, or when their
//! supervisor disappears.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use punctual::registry::{ProcessInfo, Registry, Role};
use punctual::{cancellable, Handler, Outcome, Scheduler, SchedulerConfig, Worker, WorkerConfig};
use tokio::signal::unix::{signal, SignalKind};

use super::config::Config;
use super::connect::connect;
use super::handlers::{Exec, Http};
use super::metrics::{JobRecord, MetricsSender};
use super::resident::{FirstStart, Pool, StopTimes, Takes};

/// How a child registers: under the id its supervisor chose (in
/// [`super::child::PROCESS_ID_ENV`]; else a generated one), beating
/// every `heartbeat`.
fn registry(cfg: &Config) -> Registry {
    let id = std::env::var(super::child::PROCESS_ID_ENV)
        .ok()
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| ProcessInfo::new(Role::Worker, [""; 0]).id);
    Registry::default().heartbeat(cfg.heartbeat).id(id)
}

/// Resolves on SIGTERM, SIGINT, or when this process's parent is not its
/// supervisor (it died and this process was re-parented). The supervisor's
/// pid comes from the environment, so a supervisor that died before this
/// process got here is noticed too.
pub(crate) async fn stop_signal() {
    let supervisor = std::env::var(super::child::SUPERVISOR_PID_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
        .map(nix::unistd::Pid::from_raw)
        .unwrap_or_else(nix::unistd::getppid);
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let orphaned = async {
        loop {
            if nix::unistd::getppid() != supervisor {
                tracing::warn!("supervisor is gone; stopping");
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
        _ = orphaned => {}
    }
}

/// A worker process: every configured topic, its handler wrapped to report
/// lateness and duration to the supervisor.
pub(crate) async fn run_worker(
    mut cfg: Config,
    metrics: Option<MetricsSender>,
    rust: super::rust::Handlers,
) -> Result<()> {
    let queue = connect(&cfg).await?;
    let metrics = metrics.map(Arc::new);
    // Signals are watched from here on: a SIGTERM while resident programs
    // boot stops them cleanly.
    let stop = stop_signal();
    tokio::pin!(stop);
    let registry = registry(&cfg);
    let registered = registry.enabled.then(|| super::resident::Registered {
        queue: queue.clone(),
        worker: registry.id.clone().unwrap_or_default(),
        heartbeat: cfg.heartbeat,
    });
    let pools = start_pools(&cfg, metrics.clone(), registered);
    // Wait for each pool's first handshake (or failure), to learn how many
    // jobs a program takes at once: the worker runs at least enough jobs at
    // once to keep every resident program busy.
    let firsts = futures::future::join_all(pools.iter().map(|(name, pool)| {
        let start = cfg
            .resident(name)
            .map(|r| r.start_timeout)
            .unwrap_or_default();
        async move {
            let first = tokio::time::timeout(start, pool.first_ready()).await;
            let t = match first {
                Ok(FirstStart::Ready(t)) => t,
                Ok(FirstStart::Refused) => return Err(name.clone()),
                Ok(FirstStart::Failed) | Err(_) => Takes {
                    inflight: 1,
                    lookahead: 0,
                },
            };
            let n = pool.processes();
            Ok((name.clone(), (t.inflight * n, t.open() * n)))
        }
    }));
    let takes: BTreeMap<String, (usize, usize)> = tokio::select! {
        n = firsts => match n.into_iter().collect::<Result<_, String>>() {
            Ok(c) => c,
            Err(topic) => {
                // A program that speaks another protocol would only burn
                // the attempts of every job claimed for it: claim nothing,
                // exit, and let the supervisor's backoff and log say so.
                stop_pools(&pools).await;
                anyhow::bail!(
                    "[topics.{topic}]: the resident program speaks another protocol version than punctual's ({}); update it or punctual (docs/RESIDENT.md)",
                    super::resident::PROTOCOL
                );
            }
        },
        _ = &mut stop => {
            stop_pools(&pools).await;
            return Ok(());
        }
    };
    // What the programs run and their look-ahead: slots for fewer would
    // leave no room to queue a next job for a program that takes several.
    let need: usize = takes.values().map(|&(_, open)| open).sum();
    let capacity: BTreeMap<String, usize> = takes
        .into_iter()
        .map(|(name, (at_once, _))| (name, at_once))
        .collect();
    if need > cfg.concurrency {
        tracing::info!(
            concurrency = need,
            configured = cfg.concurrency,
            "raising the worker's concurrency to keep every resident program busy"
        );
        cfg.concurrency = need;
    }
    // The worker gives up on running jobs a little before the supervisor's
    // SIGKILL, so it can kill their process groups itself.
    let grace = cfg
        .shutdown_timeout
        .saturating_sub(Duration::from_millis(500));
    let wc = WorkerConfig::default()
        .concurrency(cfg.concurrency)
        .lease(cfg.lease)
        .idle_check(cfg.idle_check)
        .shutdown_timeout(grace)
        .max_retry_delay(cfg.max_retry_delay)
        .cancelled_grace(cfg.cancel_grace)
        // Acks of jobs ending close together share a Redis call (the
        // resident and http paths end jobs one by one).
        .ack_linger(Duration::from_millis(2))
        .registry(registry);
    let mut worker = Worker::new(queue, wc);
    // OpenTelemetry ([otel]): a span per attempt, and handlers given that
    // span as their parent. Off, none of it runs.
    let otel = super::otel::Otel::start(&cfg.otel)?;
    if let Some(o) = otel.clone() {
        worker = worker.on_attempt(move |end| o.record(end));
    }
    let traced = otel.is_some();
    let ctx = move |mut d: punctual::Delivery| {
        if traced {
            super::otel::Otel::handler_context(&mut d);
        }
        d
    };
    for (name, t) in &cfg.topics {
        let metrics = metrics.clone();
        if let Some(pool) = pools.get(name) {
            let pool = pool.clone();
            let (concurrency, cap) = (cfg.concurrency, capacity[name]);
            let backstop = {
                let pool = pool.clone();
                move |d: &punctual::Delivery| pool.backstop(concurrency, cap, d.timeout)
            };
            // The pool enforces each job's timeout (its own, else the
            // topic's) from when a program gets it; at shutdown, a job no
            // program took yet is handed back.
            let gate = pool.capacity.clone();
            let run = move |d: punctual::Delivery, stop| {
                let (pool, metrics, d) = (pool.clone(), metrics.clone(), ctx(d));
                async move {
                    // Measured from when a program got the job, not from
                    // when it joined the pool's queue.
                    let queued = Instant::now();
                    let mut unanswered = Unanswered::new(&d, metrics.as_deref(), queued);
                    let (outcome, started) = pool.run(d.clone(), stop).await;
                    unanswered.answered();
                    record(&d, metrics.as_deref(), started.unwrap_or(queued), &outcome);
                    outcome
                }
            };
            // Claims take no more than the ready programs can start.
            worker = worker
                .handler_with_backstop(name.clone(), backstop, cancellable(run))
                .capacity(name, gate);
        } else if let Some(argv) = &t.exec {
            let exec = Arc::new(Exec {
                argv: argv.clone(),
                env: t.env.clone(),
                cwd: t.cwd.clone(),
            });
            worker = worker.handle_with_timeout(name.clone(), t.timeout, move |d| {
                let (exec, metrics, d) = (exec.clone(), metrics.clone(), ctx(d));
                async move { measured(&d, metrics.as_deref(), exec.run(&d)).await }
            });
        } else if let Some(handler) = rust.map.get(name).cloned() {
            let run = move |d: punctual::Delivery, cancel| {
                let (handler, metrics, d) = (handler.clone(), metrics.clone(), ctx(d));
                async move {
                    let run = handler.call(d.clone(), cancel);
                    measured(&d, metrics.as_deref(), run).await
                }
            };
            worker = worker.handler_with_timeout(name.clone(), t.timeout, cancellable(run));
        } else if let Some(h) = &t.http {
            let http = Arc::new(Http::new(h.clone(), t.timeout)?);
            // The worker's timeout is a backstop behind the request timeout
            // (the job's own, else the topic's).
            let backstop = {
                let http = http.clone();
                move |d: &punctual::Delivery| http.timeout_of(d) + Duration::from_secs(1)
            };
            let run = move |d: punctual::Delivery| {
                let (http, metrics, d) = (http.clone(), metrics.clone(), ctx(d));
                async move { measured(&d, metrics.as_deref(), http.run(&d)).await }
            };
            worker = worker.handler_with_backstop(name.clone(), backstop, run);
        }
    }
    tracing::info!(
        topics = cfg.topics.len(),
        concurrency = cfg.concurrency,
        "worker started"
    );
    let stopped = worker.run(&mut stop).await;
    // Every job is settled or abandoned: now the programs get EOF on fd 3.
    stop_pools(&pools).await;
    if let Some(o) = &otel {
        o.shutdown();
    }
    let stopped = stopped?;
    if stopped.abandoned > 0 {
        anyhow::bail!(
            "stopped with {} job(s) unfinished at the shutdown timeout; they will be re-delivered",
            stopped.abandoned
        );
    }
    tracing::info!("worker stopped");
    Ok(())
}

type Pools = BTreeMap<String, Arc<Pool>>;

/// One pool of resident programs per resident topic, with a task reporting
/// their counts to the supervisor every second.
fn start_pools(
    cfg: &Config,
    metrics: Option<Arc<MetricsSender>>,
    registered: Option<super::resident::Registered>,
) -> Pools {
    let times = StopTimes::default();
    let pools: Pools = cfg
        .topics
        .keys()
        .filter_map(|name| {
            let r = cfg.resident(name)?;
            Some((
                name.clone(),
                Pool::start(name, r, times, metrics.clone(), registered.clone()),
            ))
        })
        .collect();
    if let (Some(m), false) = (metrics, pools.is_empty()) {
        let pools = pools.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                for (name, pool) in &pools {
                    m.resident_counts(name, pool.stats.alive.load(Ordering::Relaxed));
                }
            }
        });
    }
    pools
}

async fn stop_pools(pools: &Pools) {
    futures::future::join_all(pools.values().map(|p| p.shutdown())).await;
}

async fn measured(
    d: &punctual::Delivery,
    metrics: Option<&MetricsSender>,
    run: impl std::future::Future<Output = Outcome>,
) -> Outcome {
    let start = Instant::now();
    let mut unanswered = Unanswered::new(d, metrics, start);
    let outcome = run.await;
    unanswered.answered();
    record(d, metrics, start, &outcome);
    outcome
}

/// Logs and counts one run of a job that started at `start`. A job an
/// operator cancelled while it ran counts as `cancelled`, whatever its
/// handler answered (the worker records no answer).
fn record(
    d: &punctual::Delivery,
    metrics: Option<&MetricsSender>,
    start: Instant,
    outcome: &Outcome,
) {
    let kind = match outcome {
        _ if d.cancelled.is_cancelled() => "cancelled",
        Outcome::Done => "done",
        Outcome::Retry { .. } => "retry",
        Outcome::Permanent { .. } => "permanent",
        Outcome::Expired { .. } => "expired",
        Outcome::HandBack => "handed_back",
        _ => "other",
    };
    record_kind(d, metrics, start, kind);
}

fn record_kind(
    d: &punctual::Delivery,
    metrics: Option<&MetricsSender>,
    start: Instant,
    kind: &'static str,
) {
    let lateness = Duration::from_micros(d.lateness_us_at(start).max(0) as u64);
    let duration = start.elapsed();
    tracing::debug!(topic = %d.topic, id = %d.id, attempt = d.attempt, lateness_ms = lateness.as_secs_f64() * 1e3, duration_ms = duration.as_secs_f64() * 1e3, outcome = kind, "job ran");
    if let Some(m) = metrics {
        m.send(JobRecord {
            topic: d.topic.clone(),
            lateness,
            duration,
            outcome: kind,
        });
    }
}

/// A run not answered yet: if it is dropped unanswered after an operator
/// cancelled its job (its handler did not stop within `cancel_grace`), it
/// is counted as `cancelled` then.
struct Unanswered<'a> {
    d: &'a punctual::Delivery,
    metrics: Option<&'a MetricsSender>,
    start: Instant,
    armed: bool,
}

impl<'a> Unanswered<'a> {
    fn new(d: &'a punctual::Delivery, metrics: Option<&'a MetricsSender>, start: Instant) -> Self {
        Unanswered {
            d,
            metrics,
            start,
            armed: true,
        }
    }

    fn answered(&mut self) {
        self.armed = false;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed && self.d.cancelled.is_cancelled() {
            record_kind(self.d, self.metrics, self.start, "cancelled");
        }
    }
}

/// A scheduler process for every configured topic.
pub(crate) async fn run_scheduler(cfg: Config) -> Result<()> {
    let queue = connect(&cfg).await?;
    let sc = SchedulerConfig::default()
        .promote_batch(cfg.promote_batch)
        .promote_grace(cfg.promote_grace)
        .max_ready(cfg.max_ready)
        .max_sleep(cfg.idle_check)
        .registry(registry(&cfg));
    let mut s = Scheduler::new(queue, sc);
    for name in cfg.topics.keys() {
        s = s.topic(name.clone());
    }
    tracing::info!(topics = cfg.topics.len(), "scheduler started");
    s.run(stop_signal()).await?;
    tracing::info!("scheduler stopped");
    Ok(())
}
