//! Resident handlers: long-running programs that take jobs over fd 3 and
//! reply over fd 4, one JSON object per line (the protocol is
//! docs/RESIDENT.md).
//!
//! Each worker process runs one [`Pool`] per resident topic: `processes`
//! managers, each owning one program at a time. The worker's handler
//! closure puts a job on the pool's queue and awaits its outcome; an idle
//! manager (fewer jobs in flight than the program declared) takes it,
//! writes it to fd 3 and routes the reply naming its id back to that
//! handler. Replies only ever reach the handler of the delivery they were
//! sent for, and the worker acks with that delivery's fenced lease token,
//! so a late reply can never ack a re-delivery.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use punctual::{Delivery, Outcome};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::child::{high_fd, wire_fds};
use super::config::ResidentConfig;
use super::metrics::MetricsSender;

/// The protocol version this side speaks.
pub(crate) const PROTOCOL: u64 = 1;
/// Most jobs one program may take at once.
const MAX_INFLIGHT: u64 = 1000;
/// How many times its `inflight` a ready program lets the worker claim for
/// it: the jobs it runs, and up to three times as many queued in the pool,
/// so it gets its next job without waiting for a claim's round trip. With a
/// factor of 1, no-op PHP programs ran 1,101 jobs/s; with 4, 3,001; when
/// the worker queued up to its `concurrency` (16), 4,317 (`punctual bench
/// --phase resident`, debug build, 2 workers x 2 programs, one run each on
/// a shared 2-core machine). A queued job is checked against its expiry
/// before it is written to fd 3, and handed back at shutdown.
const LOOKAHEAD: usize = 4;
/// First restart delay after a failure; doubles up to `RESTART_MAX`.
const RESTART_MIN: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);
/// Longest reply line read from fd 4 (longer is a protocol violation).
const MAX_REPLY_LINE: u64 = 1 << 20;
/// Longest stdout/stderr line logged as one (longer is split).
const MAX_LOG_LINE: u64 = 16 << 10;
/// How much of a reply's `error` is kept.
const ERROR_MAX: usize = 2048;
/// Of a program's stderr, the last lines kept for the error of the jobs it
/// held when it died: at most this many lines ...
const STDERR_TAIL_LINES: usize = 20;
/// ... and bytes.
const STDERR_TAIL_BYTES: usize = 2048;

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
struct Request {
    d: Delivery,
    reply: oneshot::Sender<Outcome>,
    /// Cancelled when the handler future is dropped before the reply
    /// (timeout backstop, lease lost, shutdown abandon).
    cancel: CancellationToken,
    /// `QUEUED`, then `SENT` when a manager writes it to a program, or
    /// `WITHDRAWN` when the worker took it back first (shutdown) or it was
    /// dropped unsent.
    state: Queued,
    /// When it was written to a program: its start.
    started: Arc<std::sync::OnceLock<std::time::Instant>>,
}

const QUEUED: u8 = 0;
const SENT: u8 = 1;
const WITHDRAWN: u8 = 2;

impl Request {
    /// Takes the job for a program, unless it was withdrawn.
    fn take(&self) -> bool {
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
enum Readiness {
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

/// One running program.
struct Proc {
    child: tokio::process::Child,
    pid: u32,
    /// Lines for fd 3 (None once closed).
    jobs: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// Lines read from fd 4 (closed at its EOF).
    replies: mpsc::Receiver<Vec<u8>>,
    /// Ids of the jobs in flight, for the log lines of stdout and stderr.
    current: Arc<Mutex<String>>,
    /// The last lines of its stderr (see `STDERR_TAIL_LINES`).
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The task reading its stderr: ends at EOF.
    stderr_reader: Option<JoinHandle<()>>,
    /// Its stdout and stderr.
    logs: Vec<Arc<LogPipe>>,
}

impl Proc {
    fn pgid(&self) -> Pid {
        Pid::from_raw(self.pid as i32)
    }

    /// Before a reply's job leaves the jobs in flight: logs the lines its
    /// stdout and stderr hold, under the ids they were written under.
    fn drain_logs(&self) {
        for log in &self.logs {
            log.drain();
        }
    }

    /// SIGKILLs its process group and reaps it.
    async fn kill(mut self) {
        let _ = killpg(self.pgid(), Signal::SIGKILL);
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
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

struct Manager {
    topic: String,
    slot: usize,
    cfg: Arc<ResidentConfig>,
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Request>>>,
    stop: CancellationToken,
    ready: Arc<watch::Sender<Readiness>>,
    times: StopTimes,
    metrics: Option<Arc<MetricsSender>>,
    registry: Option<Registered>,
    stats: Arc<PoolStats>,
    capacity: Arc<punctual::Capacity>,
    /// How much of `capacity` this manager's program opened (its inflight
    /// while it takes jobs; 0 once it takes no more).
    open: usize,
    /// A job taken but not sent: goes to the next program first.
    carry: Option<Request>,
    retiring: Vec<JoinHandle<()>>,
}

struct InFlight {
    seq: u64,
    reply: oneshot::Sender<Outcome>,
    cancel: CancellationToken,
    /// The delivery's `cancelled`: an operator cancelled the job.
    cancelled: CancellationToken,
    /// The `cancel` message was written to the program.
    told: bool,
    deadline: Instant,
    /// The job's timeout: its own (`Job::timeout`), else the topic's.
    timeout: Duration,
}

#[derive(Serialize)]
struct JobMsg<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    topic: &'a str,
    attempt: u32,
    max_attempts: u32,
    due_ms: i64,
    created_ms: i64,
    timeout_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<&'a str>,
}

/// Futures that fire with a job's id and its `seq` in flight.
type Watches = FuturesUnordered<futures::future::BoxFuture<'static, (String, u64)>>;

#[derive(Serialize)]
struct CancelMsg<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
}

/// The line written to fd 3 when an operator cancels a job the program
/// holds.
fn cancel_line(id: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&CancelMsg { kind: "cancel", id }).expect("plain JSON");
    line.push(b'\n');
    line
}

/// A job as the line written to fd 3.
fn job_line(d: &Delivery, timeout: Duration) -> Vec<u8> {
    let (payload, payload_b64) = match std::str::from_utf8(&d.payload) {
        Ok(s) => (Some(s), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(&d.payload)),
        ),
    };
    let msg = JobMsg {
        kind: "job",
        id: &d.id,
        topic: &d.topic,
        attempt: d.attempt,
        max_attempts: d.max_attempts,
        due_ms: d.due_ms,
        created_ms: d.created_ms,
        timeout_ms: timeout.as_millis() as u64,
        payload,
        payload_b64,
        traceparent: d.traceparent.as_deref(),
        tracestate: d.tracestate.as_deref(),
    };
    let mut line = serde_json::to_vec(&msg).expect("a job serializes");
    line.push(b'\n');
    line
}

/// A reply line: (id, outcome), or why it breaks the protocol.
pub(crate) fn parse_reply(line: &[u8]) -> Result<(String, Outcome), String> {
    let (id, outcome) = parse_reply_any(line)?;
    Ok((id.ok_or("a reply must name the job's id")?, outcome))
}

/// A reply line where the id is optional (an exec handler's fd 3).
pub(crate) fn parse_reply_any(line: &[u8]) -> Result<(Option<String>, Outcome), String> {
    let v: serde_json::Value = serde_json::from_slice(line).map_err(|_| {
        format!(
            "not a JSON object: {:?}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        )
    })?;
    let obj = v.as_object().ok_or("a reply must be a JSON object")?;
    let kind = obj.get("type").and_then(|t| t.as_str()).unwrap_or("");
    let id = obj.get("id").and_then(|t| t.as_str()).map(String::from);
    let error = obj
        .get("error")
        .and_then(|e| e.as_str())
        .map(|e| truncate(e, ERROR_MAX));
    let outcome = match kind {
        "done" => Outcome::Done,
        "retry" => {
            let error = error.unwrap_or_else(|| "the handler asked for a retry".into());
            match obj.get("delay_ms").and_then(|d| d.as_u64()) {
                Some(ms) => Outcome::retry_after(error, Duration::from_millis(ms)),
                None => Outcome::retry(error),
            }
        }
        "dead" => {
            Outcome::permanent(error.unwrap_or_else(|| "the handler declared it dead".into()))
        }
        other => return Err(format!("unknown reply type {other:?}")),
    };
    Ok((id, outcome))
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// A program's stdout or stderr, logged line by line, each line with the
/// ids of the jobs the program held when it wrote it.
///
/// Its reader task and the manager read the pipe under one lock, and a
/// read's lines are logged before the lock is let go. So when the manager,
/// holding a reply, has drained the pipe ([`LogPipe::drain`]), every line
/// the program wrote before that reply has been logged under the ids it was
/// written under, even one the reader task had just read; only then does the
/// reply's job leave `current`.
struct LogPipe {
    pipe: pipe::Receiver,
    topic: String,
    pid: u32,
    stream: &'static str,
    current: Arc<Mutex<String>>,
    /// stderr only: the lines kept for a crash's error.
    tail: Option<Arc<Mutex<VecDeque<String>>>>,
    read: Mutex<LogRead>,
}

/// What a [`LogPipe`] has read and not yet logged.
#[derive(Default)]
struct LogRead {
    pending: Vec<u8>,
    chunk: Vec<u8>,
    eof: bool,
}

impl LogPipe {
    /// Starts the task that logs `src` as it is written; it ends at EOF.
    fn start(
        src: OwnedFd,
        topic: String,
        pid: u32,
        stream: &'static str,
        current: Arc<Mutex<String>>,
        tail: Option<Arc<Mutex<VecDeque<String>>>>,
    ) -> std::io::Result<(Arc<LogPipe>, JoinHandle<()>)> {
        let log = Arc::new(LogPipe {
            pipe: pipe::Receiver::from_owned_fd(src)?,
            topic,
            pid,
            stream,
            current,
            tail,
            read: Mutex::new(LogRead {
                chunk: vec![0u8; 64 << 10],
                ..LogRead::default()
            }),
        });
        let reader = log.clone();
        let task = tokio::spawn(async move {
            loop {
                if reader.pipe.readable().await.is_err() || reader.drain() {
                    return;
                }
            }
        });
        Ok((log, task))
    }

    /// Reads what the pipe holds now, without waiting, and logs every whole
    /// line of it (at EOF the rest too). True at EOF.
    fn drain(&self) -> bool {
        let mut read = self.read.lock().unwrap();
        let LogRead {
            pending,
            chunk,
            eof,
        } = &mut *read;
        while !*eof {
            match self.pipe.try_read(chunk) {
                Ok(0) => *eof = true,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => *eof = true,
            }
        }
        self.emit(pending, *eof);
        *eof
    }

    /// Logs every whole line of `pending` (and a line grown past
    /// MAX_LOG_LINE as one); `all`: the rest too.
    fn emit(&self, pending: &mut Vec<u8>, all: bool) {
        let max = MAX_LOG_LINE as usize;
        let mut start = 0;
        loop {
            let rest = &pending[start..];
            let end = match rest.iter().position(|&b| b == b'\n') {
                Some(i) if i < max => i + 1,
                _ if rest.len() >= max => max,
                _ if all && !rest.is_empty() => rest.len(),
                _ => break,
            };
            let line = String::from_utf8_lossy(&rest[..end]);
            let line = line.trim_end();
            let job = self.current.lock().unwrap().clone();
            tracing::info!(target: "punctual::resident", topic = %self.topic, pid = self.pid, job = %job, stream = self.stream, "{line}");
            // Only lines written while it held a job can explain a crash of
            // that job (boot notices and a finished job's warnings cannot).
            if let (Some(tail), false) = (&self.tail, job.is_empty()) {
                keep_tail(&mut tail.lock().unwrap(), line);
            }
            start += end;
        }
        pending.drain(..start);
    }
}

/// Adds `line` to a program's stderr tail, dropping its oldest lines past
/// `STDERR_TAIL_LINES` or `STDERR_TAIL_BYTES`.
fn keep_tail(tail: &mut VecDeque<String>, line: &str) {
    if line.is_empty() {
        return;
    }
    tail.push_back(truncate(line, STDERR_TAIL_BYTES));
    let mut bytes: usize = tail.iter().map(|l| l.len() + 1).sum();
    while tail.len() > STDERR_TAIL_LINES || (bytes > STDERR_TAIL_BYTES && tail.len() > 1) {
        if let Some(old) = tail.pop_front() {
            bytes -= old.len() + 1;
        }
    }
}

impl Manager {
    fn restarted(&self, reason: &'static str) {
        if let Some(m) = &self.metrics {
            m.resident_restart(&self.topic, reason);
        }
    }

    fn spawn(&self) -> std::io::Result<Proc> {
        let (jobs_r, jobs_w) = std::io::pipe()?;
        let (replies_r, replies_w) = std::io::pipe()?;
        let child_jobs = high_fd(OwnedFd::from(jobs_r))?;
        let child_replies = high_fd(OwnedFd::from(replies_w))?;
        let argv = &self.cfg.argv;
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .envs(&self.cfg.env)
            .env("PUNCTUAL_PROTOCOL", PROTOCOL.to_string())
            .env("PUNCTUAL_JOBS_FD", "3")
            .env("PUNCTUAL_REPLIES_FD", "4")
            .env("PUNCTUAL_TOPIC", &self.topic)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a kill takes everything it started,
            // and a terminal's Ctrl-C does not reach it.
            .process_group(0)
            .kill_on_drop(true);
        for var in super::child::INTERNAL_ENV {
            cmd.env_remove(var);
        }
        if let Some(dir) = &self.cfg.cwd {
            cmd.current_dir(dir);
        }
        wire_fds(
            &mut cmd,
            vec![(child_jobs.as_raw_fd(), 3), (child_replies.as_raw_fd(), 4)],
        );
        let mut child = cmd.spawn()?;
        // Our copies of the program's ends: closed, so EOF means it is gone.
        drop((child_jobs, child_replies));
        let pid = child.id().unwrap_or(0);
        let current = Arc::new(Mutex::new(String::new()));
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let mut logs = Vec::new();
        if let Some(out) = child.stdout.take() {
            let topic = self.topic.clone();
            let cur = current.clone();
            let (log, _) = LogPipe::start(out.into_owned_fd()?, topic, pid, "stdout", cur, None)?;
            logs.push(log);
        }
        let mut stderr_reader = None;
        if let Some(err) = child.stderr.take() {
            let (topic, cur, tail) = (self.topic.clone(), current.clone(), stderr_tail.clone());
            let (log, task) =
                LogPipe::start(err.into_owned_fd()?, topic, pid, "stderr", cur, Some(tail))?;
            logs.push(log);
            stderr_reader = Some(task);
        }
        // fd 3: a writer task, so a program slow to read never blocks us.
        let mut w = pipe::Sender::from_owned_fd(OwnedFd::from(jobs_w))?;
        let (jobs, mut job_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(line) = job_rx.recv().await {
                buf.clear();
                buf.extend_from_slice(&line);
                while let Ok(more) = job_rx.try_recv() {
                    buf.extend_from_slice(&more);
                }
                if w.write_all(&buf).await.is_err() {
                    return;
                }
            }
            // Dropping `w` closes fd 3: EOF for the program.
        });
        // fd 4: a reader task handing over whole lines.
        let r = pipe::Receiver::from_owned_fd(OwnedFd::from(replies_r))?;
        let (lines, replies) = mpsc::channel::<Vec<u8>>(256);
        tokio::spawn(async move {
            let mut r = BufReader::new(r);
            loop {
                let mut buf = Vec::new();
                match (&mut r)
                    .take(MAX_REPLY_LINE)
                    .read_until(b'\n', &mut buf)
                    .await
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if lines.send(buf).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(Proc {
            child,
            pid,
            jobs: Some(jobs),
            replies,
            current,
            stderr_tail,
            stderr_reader,
            logs,
        })
    }

    /// Waits for `{"type":"ready","protocol":1}`: Ok(inflight), or Err with
    /// the reason and whether to restart at all.
    async fn handshake(&self, p: &mut Proc) -> Result<usize, (&'static str, String, bool)> {
        tokio::select! {
            line = p.replies.recv() => {
                let Some(line) = line else {
                    return Err(("exit", "closed fd 4 before saying ready".into(), true));
                };
                let v: serde_json::Value = serde_json::from_slice(&line).map_err(|_| {
                    ("violation", format!("its first line on fd 4 is not JSON: {:?}", String::from_utf8_lossy(&line).trim_end()), true)
                })?;
                if v.get("type").and_then(|t| t.as_str()) != Some("ready") {
                    return Err(("violation", format!("its first line on fd 4 is not a ready message: {}", v), true));
                }
                match v.get("protocol").and_then(|p| p.as_u64()) {
                    Some(PROTOCOL) => {}
                    other => return Err(("protocol", format!("it speaks protocol {other:?}; this punctual speaks {PROTOCOL}: it is not restarted until the worker restarts"), false)),
                }
                match v.get("inflight") {
                    None => Ok(1),
                    Some(n) => match n.as_u64() {
                        Some(n @ 1..=MAX_INFLIGHT) => Ok(n as usize),
                        _ => Err(("violation", format!("inflight = {n}: must be 1 to {MAX_INFLIGHT}"), true)),
                    },
                }
            }
            st = p.child.wait() => Err(("exit", format!("exited before saying ready ({})", status_text(st)), true)),
            _ = tokio::time::sleep(self.cfg.start_timeout) => Err(("start_timeout", format!("did not say ready within start_timeout ({})", humantime::format_duration(self.cfg.start_timeout)), true)),
            _ = self.stop.cancelled() => Err(("stop", "stopping".into(), false)),
        }
    }

    async fn run(mut self) {
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
            let mut p = match self.spawn() {
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
            let cap = match self.handshake(&mut p).await {
                Ok(n) => n,
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
                    *r = Readiness::Ready(cap);
                }
                first
            });
            tracing::info!(topic = %self.topic, pid = p.pid, slot = self.slot, inflight = cap, "resident program ready");
            let registration = self.register(p.pid);
            // Its jobs can be claimed now: what it takes at once, and a
            // bounded look-ahead queued for it (see LOOKAHEAD).
            self.open = cap * LOOKAHEAD;
            self.capacity.open(self.open);
            let end = self.serve(&mut p, cap, &mut delay).await;
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
            [self.topic.clone()],
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
    async fn serve(&mut self, p: &mut Proc, cap: usize, delay: &mut Duration) -> End {
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
            let can_take = taking && inflight.len() < cap;
            if can_take {
                if let Some(req) = self.carry.take() {
                    if !req.reply.is_closed() {
                        if let Some(req) = self.may_start(req) {
                            self.send(p, req, &mut inflight, &mut cancels, &mut seq, &mut sent);
                        }
                    }
                    continue;
                }
            }
            let deadline = inflight.values().map(|f| f.deadline).min();
            tokio::select! {
                biased;
                line = p.replies.recv() => match line {
                    Some(line) => match parse_reply(&line) {
                        Ok((id, outcome)) => {
                            // Its lines first, under the ids they were written under.
                            p.drain_logs();
                            match inflight.remove(&id) {
                            Some(f) => {
                                f.cancel.cancel();
                                let _ = f.reply.send(outcome);
                                *delay = RESTART_MIN;
                                replied = true;
                                self.replied();
                                set_current(p, &inflight);
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
                            if let Ok((id, outcome)) = parse_reply(&line) {
                                if let Some(f) = inflight.remove(&id) {
                                    f.cancel.cancel();
                                    let _ = f.reply.send(outcome);
                                    self.replied();
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
                        if let Some(jobs) = &p.jobs {
                            let _ = jobs.send(cancel_line(&id));
                        }
                        continue;
                    }
                    if inflight.get(&id).is_some_and(|f: &InFlight| f.seq == s && f.cancel.is_cancelled()) {
                        let f = inflight.remove(&id).expect("just found");
                        if f.cancelled.is_cancelled() {
                            tracing::warn!(topic = %self.topic, pid, job = %id, "a job cancelled by an operator did not end within cancel_grace: killing its resident program");
                            fail_all(inflight, &format!("the resident program (pid {pid}) was killed: job {id}, cancelled by an operator, did not end within cancel_grace"));
                            return End::Killed("cancelled");
                        }
                        tracing::warn!(topic = %self.topic, pid, job = %id, "the worker gave up on a job (lease lost, or abandoned at shutdown): killing its resident program");
                        fail_all(inflight, &format!("the resident program (pid {pid}) was killed: the worker gave up on job {id} it was running"));
                        return End::Killed("abandoned");
                    }
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    let now = Instant::now();
                    let late: Vec<String> = inflight.iter().filter(|(_, f)| f.deadline <= now).map(|(id, _)| id.clone()).collect();
                    let mut t = humantime::format_duration(self.cfg.timeout);
                    for id in &late {
                        if let Some(f) = inflight.remove(id) {
                            f.cancel.cancel();
                            t = humantime::format_duration(f.timeout);
                            let _ = f.reply.send(Outcome::retry(format!("handler timed out after {t}")));
                        }
                    }
                    tracing::warn!(topic = %self.topic, pid, jobs = ?late, "a job overran its timeout ({t}): killing its resident program");
                    fail_all(inflight, &format!("the resident program (pid {pid}) was killed: job {} overran its timeout", late.join(", ")));
                    return End::Killed("timeout");
                }
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
                            fail_all(inflight, &format!("the resident program (pid {pid}) was killed: job {id} was re-delivered while it ran"));
                            return End::Killed("abandoned");
                        }
                        self.send(p, req, &mut inflight, &mut cancels, &mut seq, &mut sent);
                    }
                    None => draining = true,
                },
                _ = self.stop.cancelled(), if !draining => draining = true,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        p: &mut Proc,
        req: Request,
        inflight: &mut HashMap<String, InFlight>,
        cancels: &mut Watches,
        seq: &mut u64,
        sent: &mut u64,
    ) {
        let timeout = req.d.timeout.unwrap_or(self.cfg.timeout);
        let line = job_line(&req.d, timeout);
        let _ = req.started.set(std::time::Instant::now());
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
        inflight.insert(
            id,
            InFlight {
                seq: s,
                reply: req.reply,
                cancel: req.cancel,
                cancelled: req.d.cancelled.clone(),
                told: false,
                deadline: Instant::now() + timeout,
                timeout,
            },
        );
        // Listed before it is written: the program's lines about it may be
        // read as soon as it is.
        set_current(p, inflight);
        if let Some(jobs) = &p.jobs {
            let _ = jobs.send(line);
        }
    }

    fn violation(&self, p: &Proc, inflight: HashMap<String, InFlight>, why: String) -> End {
        tracing::warn!(topic = %self.topic, pid = p.pid, "resident program broke the protocol: {why}; killing it");
        fail_all(
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
    async fn exited(&self, p: &mut Proc, inflight: HashMap<String, InFlight>, what: String) -> End {
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
        fail_all(inflight, &why);
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
        if req.d.lease_in_doubt() {
            tracing::warn!(topic = %self.topic, job = %req.d.id, "not started: its lease was not extended for over half its length (this worker was stopped or cut off from Redis); handed back, since it may be running elsewhere");
            let _ = req.reply.send(Outcome::HandBack);
            return None;
        }
        Some(req)
    }

    /// A program replied for a job.
    fn replied(&self) {
        self.stats.jobs.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.resident_job(&self.topic);
        }
    }
}

fn set_current(p: &Proc, inflight: &HashMap<String, InFlight>) {
    if inflight.is_empty() {
        // What it wrote so far belongs to no job that can still fail.
        p.stderr_tail.lock().unwrap().clear();
    }
    let mut cur = p.current.lock().unwrap();
    cur.clear();
    for (i, id) in inflight.keys().enumerate() {
        if i > 0 {
            cur.push(',');
        }
        cur.push_str(id);
    }
}

fn fail_all(inflight: HashMap<String, InFlight>, why: &str) {
    for (_, f) in inflight {
        f.cancel.cancel();
        let _ = f.reply.send(Outcome::retry(why));
    }
}

fn status_text(st: std::io::Result<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match st {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            _ => "ended".into(),
        },
        Err(e) => format!("could not be waited for: {e}"),
    }
}

/// VmRSS of a process, bytes.
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Stops a program gracefully: fd 3 closed (EOF), `eof` to exit, then
/// SIGTERM to its group, `term` more, then SIGKILL. Whatever it left in its
/// process group is killed afterwards.
async fn retire(mut p: Proc, times: StopTimes) {
    drop(p.jobs.take());
    let pgid = p.pgid();
    let exited = match tokio::time::timeout(times.eof, p.child.wait()).await {
        Ok(Ok(st)) => {
            use std::os::unix::process::ExitStatusExt;
            match st.code() {
                Some(code) => tracing::info!(pid = p.pid, status = code, "resident program exited"),
                None => {
                    tracing::info!(pid = p.pid, signal = st.signal(), "resident program exited")
                }
            }
            true
        }
        Ok(Err(_)) => true,
        Err(_) => false,
    };
    if !exited {
        tracing::warn!(
            pid = p.pid,
            "resident program did not exit after EOF on fd 3; sending SIGTERM"
        );
        let _ = killpg(pgid, Signal::SIGTERM);
        if tokio::time::timeout(times.term, p.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                pid = p.pid,
                "resident program ignored SIGTERM; sending SIGKILL"
            );
        }
    }
    p.kill().await;
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

    #[test]
    fn replies_parse_and_violations_say_why() {
        let (id, o) =
            parse_reply(br#"{"type":"retry","id":"a","error":"x","delay_ms":600000,"extra":1}"#)
                .unwrap();
        assert_eq!(
            (id.as_str(), o),
            ("a", Outcome::retry_after("x", Duration::from_secs(600)))
        );
        let (_, o) = parse_reply(br#"{"type":"dead","id":"a"}"#).unwrap();
        assert!(matches!(o, Outcome::Permanent { .. }));
        assert_eq!(
            parse_reply(br#"{"type":"done","id":"a"}"#).unwrap().1,
            Outcome::Done
        );
        assert!(parse_reply(b"not json")
            .unwrap_err()
            .contains("not a JSON object"));
        assert!(parse_reply(b"[1]").unwrap_err().contains("object"));
        assert!(parse_reply(br#"{"type":"done"}"#)
            .unwrap_err()
            .contains("id"));
        assert!(parse_reply(br#"{"type":"ok","id":"a"}"#)
            .unwrap_err()
            .contains("unknown reply type"));
        assert!(
            parse_reply_any(br#"{"type":"done"}"#).is_ok(),
            "exec replies need no id"
        );
        let long = format!(
            r#"{{"type":"retry","id":"a","error":"{}"}}"#,
            "\u{e9}".repeat(3000)
        );
        match parse_reply(long.as_bytes()).unwrap().1 {
            Outcome::Retry { error, .. } => assert!(error.len() <= ERROR_MAX && !error.is_empty()),
            o => panic!("{o:?}"),
        }
    }
}
