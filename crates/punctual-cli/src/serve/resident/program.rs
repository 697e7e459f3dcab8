//! One running resident program ([`Proc`]): how a manager starts it (pipes
//! on fd 3 and 4, environment, its own process group) and waits for its
//! `ready`, and how it is retired or killed.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::logs::LogPipe;
use super::pipes::{JobsPipe, ReplyLines};
use super::protocol::{MAX_INFLIGHT, MAX_LOOKAHEAD, PROTOCOL};
use crate::serve::child::{high_fd, wire_fds};
use crate::serve::config::ResidentConfig;

/// Longest reply line read from fd 4 (longer is a protocol violation).
const MAX_REPLY_LINE: usize = 1 << 20;

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

/// One running program.
pub(super) struct Proc {
    pub(super) child: tokio::process::Child,
    pub(super) pid: u32,
    /// Lines for fd 3 (None once closed).
    pub(super) jobs: Option<JobsPipe>,
    /// Lines read from fd 4 (closed at its EOF).
    pub(super) replies: ReplyLines,
    /// Ids of the jobs in flight, for the log lines of stdout and stderr.
    pub(super) current: Arc<Mutex<String>>,
    /// The last lines of its stderr (see `STDERR_TAIL_LINES`).
    pub(super) stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The task reading its stderr: ends at EOF.
    pub(super) stderr_reader: Option<JoinHandle<()>>,
    /// Its stdout and stderr.
    logs: Vec<Arc<LogPipe>>,
}

impl Proc {
    fn pgid(&self) -> Pid {
        Pid::from_raw(self.pid as i32)
    }

    /// Before a reply's job leaves the jobs in flight: logs the lines its
    /// stdout and stderr hold, under the ids they were written under.
    pub(super) fn drain_logs(&self) {
        for log in &self.logs {
            log.drain();
        }
    }

    /// SIGKILLs its process group and reaps it.
    pub(super) async fn kill(mut self) {
        let _ = killpg(self.pgid(), Signal::SIGKILL);
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Starts the resident program of `topic`.
pub(super) fn spawn(topic: &str, cfg: &ResidentConfig) -> std::io::Result<Proc> {
    let (jobs_r, jobs_w) = std::io::pipe()?;
    let (replies_r, replies_w) = std::io::pipe()?;
    let child_jobs = high_fd(OwnedFd::from(jobs_r))?;
    let child_replies = high_fd(OwnedFd::from(replies_w))?;
    let argv = &cfg.argv;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(&cfg.env)
        .env("PUNCTUAL_PROTOCOL", PROTOCOL.to_string())
        .env("PUNCTUAL_JOBS_FD", "3")
        .env("PUNCTUAL_REPLIES_FD", "4")
        .env("PUNCTUAL_TOPIC", topic)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a kill takes everything it started,
        // and a terminal's Ctrl-C does not reach it.
        .process_group(0)
        .kill_on_drop(true);
    for var in crate::serve::child::INTERNAL_ENV {
        cmd.env_remove(var);
    }
    if let Some(dir) = &cfg.cwd {
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
        let topic = topic.to_string();
        let cur = current.clone();
        let (log, _) = LogPipe::start(out.into_owned_fd()?, topic, pid, "stdout", cur, None)?;
        logs.push(log);
    }
    let mut stderr_reader = None;
    if let Some(err) = child.stderr.take() {
        let (topic, cur, tail) = (topic.to_string(), current.clone(), stderr_tail.clone());
        let (log, task) =
            LogPipe::start(err.into_owned_fd()?, topic, pid, "stderr", cur, Some(tail))?;
        logs.push(log);
        stderr_reader = Some(task);
    }
    // fd 3 and fd 4, written and read by the manager itself (pipes.rs):
    // a program slow to read keeps lines waiting there, not the manager.
    let jobs = JobsPipe::new(pipe::Sender::from_owned_fd(OwnedFd::from(jobs_w))?);
    let replies = ReplyLines::new(
        pipe::Receiver::from_owned_fd(OwnedFd::from(replies_r))?,
        MAX_REPLY_LINE,
    );
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
/// What a program takes, by its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Takes {
    /// Jobs it runs at once.
    pub inflight: usize,
    /// Jobs it may be written ahead of the one it runs (docs/RESIDENT.md,
    /// "Look-ahead"): 0 unless it runs one at a time.
    pub lookahead: usize,
}

pub(super) async fn handshake(
    p: &mut Proc,
    start_timeout: Duration,
    stop: &CancellationToken,
) -> Result<Takes, (&'static str, String, bool)> {
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
            let inflight = match v.get("inflight") {
                None => 1,
                Some(n) => match n.as_u64() {
                    Some(n @ 1..=MAX_INFLIGHT) => n as usize,
                    _ => return Err(("violation", format!("inflight = {n}: must be 1 to {MAX_INFLIGHT}"), true)),
                },
            };
            let lookahead = match v.get("lookahead") {
                None => 0,
                Some(n) => match n.as_u64() {
                    Some(n @ 0..=MAX_LOOKAHEAD) => n as usize,
                    _ => return Err(("violation", format!("lookahead = {n}: must be 0 to {MAX_LOOKAHEAD}"), true)),
                },
            };
            if lookahead > 0 && inflight > 1 {
                tracing::warn!(pid = p.pid, inflight, lookahead, "a program that runs several jobs at once is written no job ahead: its lookahead is ignored");
                return Ok(Takes { inflight, lookahead: 0 });
            }
            Ok(Takes { inflight, lookahead })
        }
        st = p.child.wait() => Err(("exit", format!("exited before saying ready ({})", status_text(st)), true)),
        _ = tokio::time::sleep(start_timeout) => Err(("start_timeout", format!("did not say ready within start_timeout ({})", humantime::format_duration(start_timeout)), true)),
        _ = stop.cancelled() => Err(("stop", "stopping".into(), false)),
    }
}

pub(super) fn status_text(st: std::io::Result<std::process::ExitStatus>) -> String {
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
pub(super) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Stops a program gracefully: fd 3 closed (EOF), `eof` to exit, then
/// SIGTERM to its group, `term` more, then SIGKILL. Whatever it left in its
/// process group is killed afterwards.
pub(super) async fn retire(mut p: Proc, times: StopTimes) {
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
