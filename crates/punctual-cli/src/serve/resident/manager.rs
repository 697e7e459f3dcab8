//! A [`Manager`]: one slot of a pool, running one program at a time. Its
//! run loop starts the program (`program.rs`), restarts it with backoff or
//! recycles it, and feeds it jobs until it must end.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use punctual::Outcome;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::program::{handshake, retire, rss_bytes, spawn, status_text, Proc, StopTimes, Takes};
use super::protocol::{cancel_line, job_line, monotonic_us, parse_reply, Reply};
use super::request::{Queued, Request};
use crate::serve::config::ResidentConfig;
use crate::serve::metrics::MetricsSender;

/// How many times its `inflight` a ready program lets the worker claim for
/// it: the jobs it runs, and up to three times as many queued in the pool,
/// so it gets its next job without waiting for a claim's round trip. With a
/// factor of 1, no-op PHP programs ran 1,101 jobs/s; with 4, 3,001; when
/// the worker queued up to its `concurrency` (16), 4,317 (`punctual bench
/// --phase resident`, debug build, 2 workers x 2 programs, one run each on
/// a shared 2-core machine). A queued job is checked against its expiry
/// before it is written to fd 3, and handed back at shutdown.
pub(super) const LOOKAHEAD: usize = 4;

impl Takes {
    /// How many of its jobs a ready program lets the worker claim: those
    /// it runs and its look-ahead (`LOOKAHEAD` x `inflight`), and those
    /// written ahead to it.
    pub(crate) fn open(self) -> usize {
        self.inflight * LOOKAHEAD + self.lookahead
    }
}

/// First restart delay after a failure; doubles up to `RESTART_MAX`.
const RESTART_MIN: Duration = Duration::from_millis(500);
pub(super) const RESTART_MAX: Duration = Duration::from_secs(30);

/// How a pool's first start goes, as its managers report it to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Readiness {
    Starting,
    Ready(Takes),
    Failed,
    /// The first program spoke another protocol version.
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

/// How a program's service ended.
enum End {
    /// Retire it gracefully (max_jobs, max_memory); start the next at once.
    Recycle(&'static str),
    /// Shutdown: retire it, start no other.
    Stop,
    /// It was killed by us (timeout, abandoned job): replace at once.
    Killed(&'static str),
    /// It failed (exit, protocol violation): replace with backoff.
    Failed(&'static str),
}

pub(super) struct Manager {
    pub(super) topic: Arc<str>,
    pub(super) slot: usize,
    pub(super) cfg: Arc<ResidentConfig>,
    pub(super) rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Request>>>,
    /// The pool's queue, for jobs written ahead to a program that went
    /// before starting them (weak: the pool's own sender closes it).
    pub(super) requeue: mpsc::WeakUnboundedSender<Request>,
    pub(super) stop: CancellationToken,
    pub(super) ready: Arc<watch::Sender<Readiness>>,
    pub(super) times: StopTimes,
    pub(super) metrics: Option<Arc<MetricsSender>>,
    pub(super) registry: Option<Registered>,
    pub(super) stats: Arc<PoolStats>,
    pub(super) capacity: Arc<punctual::Capacity>,
    /// How much of `capacity` this manager's program opened (its inflight
    /// while it takes jobs; 0 once it takes no more).
    pub(super) open: usize,
    /// A job taken but not sent (the program had to go): goes to the next
    /// program first.
    pub(super) carry: Option<Request>,
    pub(super) retiring: Vec<JoinHandle<()>>,
}

struct InFlight {
    /// The job (for its expiry on a `skip`, and to carry it to the next
    /// program when it was written ahead to one that went).
    job: punctual::Delivery,
    seq: u64,
    reply: oneshot::Sender<Outcome>,
    cancel: CancellationToken,
    /// The delivery's `cancelled`: an operator cancelled the job.
    cancelled: CancellationToken,
    /// The `cancel` message was written to the program.
    told: bool,
    /// When it overruns its timeout; None while it waits, written ahead,
    /// behind the job the program runs.
    deadline: Option<Instant>,
    /// The job's timeout: its own (`Job::timeout`), else the topic's.
    timeout: Duration,
    /// When it started (the worker reads it for the job's lateness).
    started: Arc<std::sync::OnceLock<std::time::Instant>>,
    /// Its state, shared with the worker's side (`requeue` when written
    /// ahead to a program that went).
    state: Queued,
    /// The worker's `stop` for this run.
    stop: CancellationToken,
}

impl InFlight {
    fn start(&mut self) {
        let now = Instant::now();
        self.deadline = Some(now + self.timeout);
        let _ = self.started.set(now.into_std());
    }
}

/// The jobs written to a look-ahead program ahead of the one it runs, and
/// how many there may be (docs/RESIDENT.md, "Look-ahead").
struct Ahead {
    /// Jobs the program runs at once.
    cap: usize,
    /// What the program declared (0: none).
    max: usize,
    /// It is written ahead at most as many jobs as it runs in this time,
    /// by their average (`lookahead_budget`).
    budget: Duration,
    /// Written and not started, in the order written.
    queued: VecDeque<String>,
    /// Its recent jobs' average time, microseconds (1/8 weight to the
    /// newest); None before its first.
    avg_us: Option<f64>,
}

impl Ahead {
    /// How many jobs it may be written ahead now.
    fn room(&self) -> usize {
        match self.avg_us {
            Some(avg) if self.max > 0 => {
                ((self.budget.as_micros() as f64 / avg.max(1.0)) as usize).min(self.max)
            }
            _ => 0,
        }
    }

    fn ran(&mut self, took: Duration) {
        let us = took.as_micros() as f64;
        self.avg_us = Some(self.avg_us.map_or(us, |a| a + (us - a) / 8.0));
    }

    /// Starts the jobs written ahead that the program now runs: it runs
    /// them in order, each once it replied for the one before.
    fn promote(&mut self, inflight: &mut HashMap<String, InFlight>) {
        while inflight.len() - self.queued.len() < self.cap {
            let Some(id) = self.queued.pop_front() else {
                break;
            };
            if let Some(f) = inflight.get_mut(&id) {
                f.start();
            }
        }
    }

    /// A job left the program (replied for): no longer queued.
    fn left(&mut self, id: &str) {
        if !self.queued.is_empty() {
            self.queued.retain(|q| q != id);
        }
    }
}

/// Futures that fire with a job's id and its `seq` in flight.
type Watches = FuturesUnordered<futures::future::BoxFuture<'static, (String, u64)>>;

impl Manager {
    fn restarted(&self, reason: &'static str) {
        if let Some(m) = &self.metrics {
            m.resident_restart(&self.topic, reason);
        }
    }

    pub(super) async fn run(mut self) {
        let mut delay = RESTART_MIN;
        let mut wait = Duration::ZERO;
        let mut disabled: Option<String> = None;
        loop {
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.stop.cancelled() => break,
                }
            }
            if self.stop.is_cancelled() {
                break;
            }
            if let Some(why) = &disabled {
                // A program speaking another protocol is not restarted:
                // its jobs are retried, for a worker that can run them.
                self.refuse(why.clone()).await;
                break;
            }
            let mut p = match spawn(&self.topic, &self.cfg) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(topic = %self.topic, program = ?self.cfg.argv[0], error = %e, "cannot start the resident program; retrying in {delay:?}");
                    self.failed_start();
                    self.restarted("spawn");
                    wait = delay;
                    delay = (delay * 2).min(RESTART_MAX);
                    continue;
                }
            };
            self.stats.alive.fetch_add(1, Ordering::Relaxed);
            let takes = match handshake(&mut p, self.cfg.start_timeout, &self.stop).await {
                Ok(t) => t,
                Err(("stop", _, _)) => {
                    // Shutdown while it starts: it holds no job, so it is
                    // stopped like any other (EOF first), not killed.
                    retire(p, self.times).await;
                    self.stats.alive.fetch_sub(1, Ordering::Relaxed);
                    break;
                }
                Err((reason, why, restart)) => {
                    let pid = p.pid;
                    p.kill().await;
                    self.stats.alive.fetch_sub(1, Ordering::Relaxed);
                    self.restarted(reason);
                    if !restart {
                        self.ready.send_if_modified(|r| {
                            let first = *r == Readiness::Starting;
                            if first {
                                *r = Readiness::Refused;
                            }
                            first
                        });
                        tracing::error!(topic = %self.topic, pid, "resident program refused: {why}");
                        disabled = Some(format!("resident program refused: {why}"));
                        wait = Duration::ZERO;
                        continue;
                    }
                    self.failed_start();
                    tracing::warn!(topic = %self.topic, pid, "resident program {why}; restarting in {delay:?}");
                    wait = delay;
                    delay = (delay * 2).min(RESTART_MAX);
                    continue;
                }
            };
            self.ready.send_if_modified(|r| {
                let first = *r == Readiness::Starting;
                if first {
                    *r = Readiness::Ready(takes);
                }
                first
            });
            tracing::info!(topic = %self.topic, pid = p.pid, slot = self.slot, inflight = takes.inflight, lookahead = takes.lookahead, "resident program ready");
            let registration = self.register(p.pid);
            // Its jobs can be claimed now: what it takes at once, and a
            // bounded look-ahead queued for it (see LOOKAHEAD); those written
            // ahead to it once its jobs are known to be short (`serve`).
            self.open = takes.inflight * LOOKAHEAD;
            self.capacity.open(self.open);
            let end = self.serve(&mut p, takes, &mut delay).await;
            self.close_capacity();
            self.stats.alive.fetch_sub(1, Ordering::Relaxed);
            if let Some(r) = registration {
                r.stop().await;
            }
            match end {
                End::Recycle(reason) => {
                    tracing::info!(topic = %self.topic, pid = p.pid, reason, "recycling the resident program");
                    self.restarted(reason);
                    let times = self.times;
                    self.retiring.retain(|h| !h.is_finished());
                    self.retiring.push(tokio::spawn(retire(p, times)));
                    wait = Duration::ZERO;
                }
                End::Stop => {
                    retire(p, self.times).await;
                    break;
                }
                End::Killed(reason) => {
                    p.kill().await;
                    self.restarted(reason);
                    wait = Duration::ZERO;
                }
                End::Failed(reason) => {
                    p.kill().await;
                    self.restarted(reason);
                    tracing::warn!(topic = %self.topic, "restarting the resident program in {delay:?}");
                    wait = delay;
                    delay = (delay * 2).min(RESTART_MAX);
                }
            }
        }
        if let Some(req) = self.carry.take() {
            // Sent to no program: handed back unstarted.
            let _ = req.reply.send(Outcome::HandBack);
        }
        for h in self.retiring.drain(..) {
            let _ = h.await;
        }
    }

    /// How many jobs may be claimed for this program now.
    fn set_open(&mut self, n: usize) {
        if n > self.open {
            self.capacity.open(n - self.open);
        } else if n < self.open {
            self.capacity.close(self.open - n);
        }
        self.open = n;
    }

    /// This program takes no more jobs: the worker claims none for it.
    fn close_capacity(&mut self) {
        self.capacity.close(std::mem::take(&mut self.open));
    }

    /// Registers the program `pid` of this slot in the process registry
    /// (until the returned handle is stopped, when its service ends).
    fn register(&self, pid: u32) -> Option<punctual::registry::Registration> {
        let r = self.registry.as_ref()?;
        let info = punctual::registry::ProcessInfo::new(
            punctual::registry::Role::Resident,
            [self.topic.to_string()],
        )
        .with_id(format!(
            "{}/resident-{}-{}",
            r.worker, self.topic, self.slot
        ))
        .with_pid(pid);
        match r.queue.register_process(info, r.heartbeat) {
            Ok(reg) => Some(reg),
            Err(e) => {
                tracing::warn!(topic = %self.topic, pid, error = %e, "cannot register the resident program");
                None
            }
        }
    }

    fn failed_start(&self) {
        self.ready.send_if_modified(|r| {
            let first = *r == Readiness::Starting;
            if first {
                *r = Readiness::Failed;
            }
            first
        });
    }

    /// Answers every job with a retry until the pool stops.
    async fn refuse(&mut self, why: String) {
        if let Some(req) = self.carry.take() {
            let _ = req.reply.send(Outcome::retry(why.clone()));
        }
        let rx = self.rx.clone();
        loop {
            let req = tokio::select! {
                r = async { rx.lock().await.recv().await } => r,
                _ = self.stop.cancelled() => return,
            };
            match req {
                Some(req) => {
                    let _ = req.reply.send(Outcome::retry(why.clone()));
                }
                None => return,
            }
        }
    }

    /// Feeds jobs to a ready program until it must end.
    async fn serve(&mut self, p: &mut Proc, takes: Takes, delay: &mut Duration) -> End {
        let cap = takes.inflight;
        let mut ahead = Ahead {
            cap,
            max: takes.lookahead,
            budget: self.cfg.lookahead_budget,
            queued: VecDeque::new(),
            avg_us: None,
        };
        let mut inflight: HashMap<String, InFlight> = HashMap::new();
        let mut cancels = FuturesUnordered::new();
        let mut seq = 0u64;
        let mut sent = 0u64;
        let mut draining = false;
        let mut replied = false;
        // Over max_memory: takes no more jobs, recycled once it holds none.
        let mut over_memory = false;
        let max_jobs = self.cfg.max_jobs;
        let rx = self.rx.clone();
        let pid = p.pid;
        loop {
            // Checked after every reply, also while the program holds other
            // jobs (inflight > 1 under load may never hold none).
            if replied && !over_memory {
                replied = false;
                // /proc is read only when a limit is set (it costs ~6 us).
                let over = self.cfg.max_memory.and_then(|max| {
                    rss_bytes(pid)
                        .filter(|&rss| rss > max)
                        .map(|rss| (rss, max))
                });
                if let Some((rss, max)) = over {
                    tracing::info!(topic = %self.topic, pid, rss, max, "resident program over max_memory");
                    over_memory = true;
                }
            }
            if inflight.is_empty() {
                if draining {
                    return End::Stop;
                }
                if max_jobs > 0 && sent >= max_jobs {
                    return End::Recycle("max_jobs");
                }
                if over_memory {
                    return End::Recycle("max_memory");
                }
            }
            let taking = !draining && !over_memory && (max_jobs == 0 || sent < max_jobs);
            if !taking && self.open > 0 {
                // Done taking jobs: none is claimed for this program now.
                self.close_capacity();
            }
            let can_take = taking && inflight.len() < cap + ahead.room();
            if can_take {
                if let Some(req) = self.carry.take() {
                    if !req.reply.is_closed() {
                        if let Some(req) = self.may_start(req) {
                            self.send(
                                p,
                                req,
                                &mut inflight,
                                &mut ahead,
                                &mut cancels,
                                &mut seq,
                                &mut sent,
                            );
                        }
                    }
                    continue;
                }
            }
            let deadline = inflight.values().filter_map(|f| f.deadline).min();
            tokio::select! {
                biased;
                line = p.replies.recv() => match line {
                    Some(line) => match parse_reply(&line) {
                        Ok((_, Reply::Skip)) if ahead.max == 0 => {
                            return self.violation(p, inflight, "a skip reply, but it declared no lookahead".into());
                        }
                        Ok((id, reply)) => {
                            // Its lines first, under the ids they were written under.
                            p.drain_logs();
                            match inflight.remove(&id) {
                            Some(f) => {
                                f.cancel.cancel();
                                ahead.left(&id);
                                let outcome = self.outcome(reply, &f, &mut ahead);
                                let _ = f.reply.send(outcome);
                                *delay = RESTART_MIN;
                                replied = true;
                                self.replied();
                                ahead.promote(&mut inflight);
                                set_current(p, &inflight);
                                if self.open > 0 {
                                    // Claimed for it: what it runs and its look-ahead,
                                    // and as many as may be written ahead to it now.
                                    self.set_open(cap * LOOKAHEAD + ahead.room());
                                }
                            }
                            None => {
                                return self.violation(p, inflight, format!("a reply for job {id:?}, which it does not hold"));
                            }
                        }},
                        Err(why) => return self.violation(p, inflight, why),
                    },
                    None => {
                        // fd 4 closed: it exited (or is about to).
                        let st = tokio::time::timeout(Duration::from_secs(1), p.child.wait()).await;
                        let what = match st {
                            Ok(st) => status_text(st),
                            Err(_) => "closed fd 4 but kept running".into(),
                        };
                        return self.exited(p, inflight, what).await;
                    }
                },
                st = p.child.wait() => {
                    // Replies written just before the exit are still in the pipe.
                    let mut inflight = inflight;
                    let _ = tokio::time::timeout(Duration::from_millis(200), async {
                        while let Some(line) = p.replies.recv().await {
                            if let Ok((id, reply)) = parse_reply(&line) {
                                if let Some(f) = inflight.remove(&id) {
                                    f.cancel.cancel();
                                    ahead.left(&id);
                                    let outcome = self.outcome(reply, &f, &mut ahead);
                                    let _ = f.reply.send(outcome);
                                    self.replied();
                                    ahead.promote(&mut inflight);
                                }
                            }
                        }
                    }).await;
                    return self.exited(p, inflight, status_text(st)).await;
                }
                Some((id, s)) = cancels.next(), if !cancels.is_empty() => {
                    let told = inflight.get_mut(&id).filter(|f| f.seq == s && !f.cancel.is_cancelled() && f.cancelled.is_cancelled() && !f.told);
                    if let Some(f) = told {
                        // An operator cancelled it. The program may stop
                        // the job and reply; if it holds it past
                        // cancel_grace, the worker drops the run and its
                        // `cancel` token replaces the program (below).
                        f.told = true;
                        let id2 = id.clone();
                        cancels.push(f.cancel.clone().cancelled_owned().map(move |_| (id2, s)).boxed());
                        tracing::info!(topic = %self.topic, pid, job = %id, "job cancelled by an operator: told to its resident program");
                        if let Some(jobs) = p.jobs.as_mut() {
                            jobs.send(&cancel_line(&id));
                        }
                        continue;
                    }
                    if inflight.get(&id).is_some_and(|f: &InFlight| f.seq == s && f.cancel.is_cancelled()) {
                        if let Some(f) = inflight.get_mut(&id).filter(|f| f.deadline.is_none()) {
                            // Given up on while written ahead (cancelled by
                            // an operator, its lease lost): the program,
                            // told, reads the cancel before it would start
                            // the job and answers it unstarted; the one it
                            // runs keeps running.
                            if !f.told {
                                f.told = true;
                                tracing::info!(topic = %self.topic, pid, job = %id, "a job written ahead was given up on: told to its resident program, which will not start it");
                                if let Some(jobs) = p.jobs.as_mut() {
                                    jobs.send(&cancel_line(&id));
                                }
                            }
                            continue;
                        }
                        let f = inflight.remove(&id).expect("just found");
                        if f.cancelled.is_cancelled() {
                            tracing::warn!(topic = %self.topic, pid, job = %id, "a job cancelled by an operator did not end within cancel_grace: killing its resident program");
                            self.fail_all(inflight, &format!("the resident program (pid {pid}) was killed: job {id}, cancelled by an operator, did not end within cancel_grace"));
                            return End::Killed("cancelled");
                        }
                        tracing::warn!(topic = %self.topic, pid, job = %id, "the worker gave up on a job (lease lost, or abandoned at shutdown): killing its resident program");
                        self.fail_all(inflight, &format!("the resident program (pid {pid}) was killed: the worker gave up on job {id} it was running"));
                        return End::Killed("abandoned");
                    }
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    let now = Instant::now();
                    let late: Vec<String> = inflight.iter().filter(|(_, f)| f.deadline.is_some_and(|d| d <= now)).map(|(id, _)| id.clone()).collect();
                    let mut t = humantime::format_duration(self.cfg.timeout);
                    for id in &late {
                        if let Some(f) = inflight.remove(id) {
                            f.cancel.cancel();
                            t = humantime::format_duration(f.timeout);
                            let _ = f.reply.send(Outcome::retry(format!("handler timed out after {t}")));
                        }
                    }
                    tracing::warn!(topic = %self.topic, pid, jobs = ?late, "a job overran its timeout ({t}): killing its resident program");
                    self.fail_all(inflight, &format!("the resident program (pid {pid}) was killed: job {} overran its timeout", late.join(", ")));
                    return End::Killed("timeout");
                }
                // Lines the pipe had no room for: written as it drains,
                // before more are taken.
                _ = async { p.jobs.as_mut().expect("checked").flush().await }, if p.jobs.as_ref().is_some_and(|j| j.waiting()) => {}
                req = async { rx.lock().await.recv().await }, if can_take => match req {
                    Some(req) => {
                        if req.reply.is_closed() || !req.take() {
                            // Given up on or handed back while it waited:
                            // never sent.
                            continue;
                        }
                        let Some(req) = self.may_start(req) else {
                            continue;
                        };
                        if inflight.contains_key(&req.d.id) {
                            // A re-delivery of a job this program still runs:
                            // the worker gave up on the old run. The old run
                            // dies with its program; the new one goes to the next.
                            let id = req.d.id.clone();
                            self.carry = Some(req);
                            inflight.remove(&id);
                            self.fail_all(inflight, &format!("the resident program (pid {pid}) was killed: job {id} was re-delivered while it ran"));
                            return End::Killed("abandoned");
                        }
                        self.send(p, req, &mut inflight, &mut ahead, &mut cancels, &mut seq, &mut sent);
                    }
                    None => draining = true,
                },
                _ = self.stop.cancelled(), if !draining => draining = true,
            }
        }
    }

    /// Writes a job to the program: it starts now, or, written ahead,
    /// once the program replied for the jobs before it.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        p: &mut Proc,
        req: Request,
        inflight: &mut HashMap<String, InFlight>,
        ahead: &mut Ahead,
        cancels: &mut Watches,
        seq: &mut u64,
        sent: &mut u64,
    ) {
        let timeout = req.d.timeout.unwrap_or(self.cfg.timeout);
        let start_by = (ahead.max > 0)
            .then(|| req.d.start_by().map(monotonic_us))
            .flatten();
        let line = job_line(&req.d, timeout, start_by);
        let runs_now = inflight.len() - ahead.queued.len() < ahead.cap;
        *seq += 1;
        *sent += 1;
        let s = *seq;
        let id = req.d.id.clone();
        let id2 = id.clone();
        // Fires when the worker gives up on the run (or the reply came:
        // then `seq` no longer matches), or when an operator cancels it.
        let (given_up, cancelled) = (req.cancel.clone(), req.d.cancelled.clone());
        cancels.push(
            async move {
                tokio::select! {
                    _ = given_up.cancelled() => {}
                    _ = cancelled.cancelled() => {}
                }
                (id2, s)
            }
            .boxed(),
        );
        let mut f = InFlight {
            cancelled: req.d.cancelled.clone(),
            job: req.d,
            seq: s,
            reply: req.reply,
            cancel: req.cancel,
            told: false,
            deadline: None,
            timeout,
            started: req.started,
            state: req.state,
            stop: req.stop,
        };
        if runs_now {
            f.start();
        } else {
            ahead.queued.push_back(id.clone());
        }
        inflight.insert(id, f);
        // Listed before it is written: the program's lines about it may be
        // read as soon as it is.
        if runs_now {
            set_current(p, inflight);
        }
        if let Some(jobs) = p.jobs.as_mut() {
            jobs.send(&line);
        }
    }

    fn violation(&mut self, p: &Proc, inflight: HashMap<String, InFlight>, why: String) -> End {
        tracing::warn!(topic = %self.topic, pid = p.pid, "resident program broke the protocol: {why}; killing it");
        self.fail_all(
            inflight,
            &format!(
                "the resident program (pid {}) broke the protocol: {why}",
                p.pid
            ),
        );
        End::Failed("violation")
    }

    /// A program that ended by itself: the jobs it held fail with how it
    /// ended and the last lines of its stderr (a fatal error's text).
    async fn exited(
        &mut self,
        p: &mut Proc,
        inflight: HashMap<String, InFlight>,
        what: String,
    ) -> End {
        // What it wrote just before it died is still in the pipe: read to
        // its EOF (briefly: a child it left may hold the pipe open).
        if let Some(reader) = p.stderr_reader.as_mut() {
            let _ = tokio::time::timeout(Duration::from_millis(200), reader).await;
        }
        let tail: Vec<String> = p.stderr_tail.lock().unwrap().iter().cloned().collect();
        tracing::warn!(topic = %self.topic, pid = p.pid, jobs = inflight.len(), "resident program {what}");
        let mut why = format!("the resident program (pid {}) {what}", p.pid);
        if !tail.is_empty() {
            why.push_str("; the last lines of its stderr:\n");
            why.push_str(&tail.join("\n"));
        }
        self.fail_all(inflight, &why);
        End::Failed("exit")
    }

    /// Whether a job may start now: one whose expiry passed while it waited
    /// for a program goes to dead instead, as the claim would have sent it;
    /// one whose lease may have run out meanwhile (the worker was stopped,
    /// or could not reach Redis, for over half a lease) is handed back
    /// unstarted: it may be running elsewhere already.
    fn may_start(&self, req: Request) -> Option<Request> {
        if let Some(error) = req.d.expiry_error() {
            tracing::warn!(topic = %self.topic, job = %req.d.id, "not started: {error}");
            let _ = req.reply.send(Outcome::Expired { error });
            return None;
        }
        if req.d.cancelled.is_cancelled() {
            // Cancelled while it waited: its slot records nothing.
            tracing::info!(topic = %self.topic, job = %req.d.id, "not started: the job was cancelled");
            let _ = req.reply.send(Outcome::HandBack);
            return None;
        }
        if req.d.lease_in_doubt() {
            tracing::warn!(topic = %self.topic, job = %req.d.id, "not started: its lease was not extended for over half its length (this worker was stopped or cut off from Redis); handed back, since it may be running elsewhere");
            let _ = req.reply.send(Outcome::HandBack);
            return None;
        }
        Some(req)
    }

    /// What a reply makes of its job. A `skip` (a job written ahead whose
    /// `start_by_us` passed before the program reached it) ends the job as
    /// `may_start` would have.
    fn outcome(&self, reply: Reply, f: &InFlight, ahead: &mut Ahead) -> Outcome {
        match reply {
            Reply::Outcome(o) => {
                if let Some(at) = f.started.get() {
                    ahead.ran(at.elapsed());
                }
                o
            }
            Reply::Skip => {
                if let Some(error) = f.job.expiry_error() {
                    tracing::warn!(topic = %self.topic, job = %f.job.id, "not started by its resident program: {error}");
                    return Outcome::Expired { error };
                }
                tracing::warn!(topic = %self.topic, job = %f.job.id, "not started by its resident program: written ahead, it was not reached before its start_by (this worker was stopped or cut off from Redis, or the jobs before it ran long); handed back");
                Outcome::HandBack
            }
        }
    }

    /// The program is gone: the jobs it ran are retried; those written
    /// ahead to it, never started, go back to the pool's queue in the order
    /// they were written, for any of its programs (still leased, their
    /// attempts not spent again; withdrawn and handed back if the worker
    /// stops first).
    fn fail_all(&mut self, inflight: HashMap<String, InFlight>, why: &str) {
        let mut unstarted = Vec::new();
        for (_, f) in inflight {
            let given_up = f.cancel.is_cancelled() || f.cancelled.is_cancelled();
            if f.deadline.is_none() && !given_up && !f.reply.is_closed() {
                unstarted.push(f);
                continue;
            }
            f.cancel.cancel();
            let _ = f.reply.send(Outcome::retry(why));
        }
        unstarted.sort_by_key(|f| f.seq);
        let queue = self.requeue.upgrade();
        for f in unstarted {
            if f.stop.is_cancelled() {
                // The worker stops (or gave up on the run): back to Redis.
                let _ = f.reply.send(Outcome::HandBack);
                continue;
            }
            f.state.requeue();
            let req = Request {
                d: f.job,
                reply: f.reply,
                cancel: f.cancel,
                state: f.state,
                started: f.started,
                stop: f.stop,
            };
            let unsent = match &queue {
                Some(q) => q.send(req).err().map(|e| e.0),
                None => Some(req),
            };
            if let Some(req) = unsent {
                let _ = req.reply.send(Outcome::HandBack);
            }
        }
    }

    /// A program replied for a job.
    fn replied(&self) {
        self.stats.jobs.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.resident_job(&self.topic);
        }
    }
}

/// Lists the jobs the program runs (not those written ahead) for its log
/// lines.
fn set_current(p: &Proc, inflight: &HashMap<String, InFlight>) {
    if inflight.is_empty() {
        // What it wrote so far belongs to no job that can still fail.
        p.stderr_tail.lock().unwrap().clear();
    }
    let mut cur = p.current.lock().unwrap();
    cur.clear();
    let running = inflight.iter().filter(|(_, f)| f.deadline.is_some());
    for (i, (id, _)) in running.enumerate() {
        if i > 0 {
            cur.push(',');
        }
        cur.push_str(id);
    }
}
