//! The supervisor: spawns worker and scheduler processes (this binary,
//! re-executed), restarts one that dies with backoff (500 ms doubling, capped,
//! reset after a stable minute), and on SIGTERM/SIGINT stops restarting,
//! forwards SIGTERM, waits up to the shutdown timeout, then SIGKILLs.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use super::config::Config;
use super::roles::connect;

/// What /healthz reports per child.
#[derive(Debug, Clone, Serialize)]
pub struct ChildStatus {
    pub role: &'static str,
    pub index: usize,
    pub pid: Option<u32>,
    pub alive: bool,
    pub restarts: u64,
    pub last_exit: Option<String>,
}

pub type Children = Arc<Mutex<Vec<ChildStatus>>>;

/// Environment variable carrying the effective config (JSON) to children.
pub const CONFIG_ENV: &str = "PUNCTUAL_SERVE_CONFIG";
/// Environment variable naming the metrics socket for workers.
pub const METRICS_ENV: &str = "PUNCTUAL_METRICS_SOCKET";
/// Environment variable with the log format for children.
pub const LOG_FORMAT_ENV: &str = "PUNCTUAL_LOG_FORMAT";

const RESTART_MIN: Duration = Duration::from_millis(500);
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Checks that every exec handler's program can be found, so a typo fails
/// at start instead of sending every job to dead.
pub fn check_programs(cfg: &Config) -> Result<()> {
    for (name, t) in &cfg.topics {
        let Some(argv) = &t.exec else { continue };
        let prog = PathBuf::from(&argv[0]);
        let found = if prog.components().count() > 1 {
            let p = match &t.cwd {
                Some(dir) if prog.is_relative() => PathBuf::from(dir).join(&prog),
                _ => prog.clone(),
            };
            p.is_file()
        } else {
            std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).any(|d| d.join(&prog).is_file()))
                .unwrap_or(false)
        };
        if !found {
            bail!(
                "[topics.{name}]: exec program {:?} not found (give a path or a program on PATH)",
                argv[0]
            );
        }
    }
    Ok(())
}

/// Runs the service until a signal; returns the process exit code: 0 after
/// a clean drain, 1 when children had to be killed.
pub async fn supervise(cfg: Config) -> Result<i32> {
    // Fail fast on an unreachable Redis, and store the topic defaults where
    // the scripts read them.
    let queue = connect(&cfg).await?;
    for name in cfg.topics.keys() {
        let t = &cfg.topics[name];
        let ladder = cfg.ladder(name)?;
        queue
            .set_topic_defaults(name, Some(t.max_attempts), Some(&ladder))
            .await
            .with_context(|| format!("cannot store the settings of topic {name}"))?;
    }
    if let Some(p) = &cfg.pidfile {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("cannot write pidfile {p}"))?;
    }

    let rundir = tempfile::Builder::new()
        .prefix("punctual-serve-")
        .tempdir()?;
    let metrics_path = rundir.path().join("metrics.sock");
    let handle = super::metrics::install_recorder()?;
    let _receiver = super::metrics::receive(&metrics_path)?;

    let exe =
        std::env::current_exe().context("cannot find this program's path to re-execute it")?;
    let config_json = serde_json::to_string(&cfg)?;
    let mut slots = Vec::new();
    for i in 0..cfg.schedulers {
        slots.push(("scheduler", i));
    }
    for i in 0..cfg.workers {
        slots.push(("worker", i));
    }
    let children: Children = Arc::new(Mutex::new(
        slots
            .iter()
            .map(|(role, index)| ChildStatus {
                role,
                index: *index,
                pid: None,
                alive: false,
                restarts: 0,
                last_exit: None,
            })
            .collect(),
    ));

    let http = match &cfg.http {
        Some(addr) => Some(
            super::http::serve(
                addr,
                children.clone(),
                handle,
                queue.clone(),
                cfg.topics.keys().cloned().collect(),
                cfg.api_token.as_deref(),
            )
            .await?,
        ),
        None => None,
    };

    let stop = CancellationToken::new();
    let kill_now = CancellationToken::new();
    let mut tasks = Vec::new();
    for (si, (role, index)) in slots.into_iter().enumerate() {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg(format!("__{role}"))
            .arg("--index")
            .arg(index.to_string())
            .env(CONFIG_ENV, &config_json)
            .env(LOG_FORMAT_ENV, &cfg.log_format)
            .kill_on_drop(true);
        if role == "worker" {
            cmd.env(METRICS_ENV, &metrics_path);
        }
        tasks.push(tokio::spawn(run_slot(
            cmd,
            role,
            index,
            si,
            children.clone(),
            stop.clone(),
            kill_now.clone(),
            cfg.shutdown_timeout,
            cfg.restart_backoff_max,
        )));
    }
    tracing::info!(
        workers = cfg.workers,
        schedulers = cfg.schedulers,
        topics = cfg.topics.len(),
        "punctual serve started"
    );

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining (up to {:?})", cfg.shutdown_timeout),
        _ = int.recv() => tracing::info!("SIGINT: draining (up to {:?}); press Ctrl-C again to kill now", cfg.shutdown_timeout),
    }
    stop.cancel();
    let waiting = futures::future::join_all(tasks);
    tokio::pin!(waiting);
    let clean = tokio::select! {
        r = &mut waiting => r,
        _ = async { tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} } } => {
            tracing::warn!("second signal: killing children now");
            kill_now.cancel();
            waiting.await
        }
    };
    let clean = clean.into_iter().all(|r| r.unwrap_or(false));
    if let Some(h) = http {
        h.abort();
    }
    if let Some(p) = &cfg.pidfile {
        let _ = std::fs::remove_file(p);
    }
    if clean {
        tracing::info!("punctual serve stopped cleanly");
        Ok(0)
    } else {
        tracing::warn!("punctual serve stopped; some children had to be killed (their jobs will be re-delivered)");
        Ok(1)
    }
}

/// Keeps one child running until `stop`; returns whether it then exited
/// cleanly within the shutdown timeout.
#[allow(clippy::too_many_arguments)]
async fn run_slot(
    mut cmd: tokio::process::Command,
    role: &'static str,
    index: usize,
    si: usize,
    children: Children,
    stop: CancellationToken,
    kill_now: CancellationToken,
    shutdown_timeout: Duration,
    backoff_max: Duration,
) -> bool {
    let name = format!("{role}-{index}");
    let mut backoff = RESTART_MIN;
    loop {
        if stop.is_cancelled() {
            return true;
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(child = %name, error = %e, "cannot start; retrying in {backoff:?}");
                tokio::select! { _ = stop.cancelled() => return true, _ = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(backoff_max);
                continue;
            }
        };
        let pid = child.id();
        {
            let mut c = children.lock().unwrap();
            c[si].pid = pid;
            c[si].alive = true;
        }
        tracing::info!(child = %name, pid, "started");
        let started = Instant::now();
        tokio::select! {
            status = child.wait() => {
                let what = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                {
                    let mut c = children.lock().unwrap();
                    c[si].alive = false;
                    c[si].last_exit = Some(what.clone());
                }
                if stop.is_cancelled() {
                    return true;
                }
                if started.elapsed() >= STABLE_AFTER {
                    backoff = RESTART_MIN;
                }
                tracing::warn!(child = %name, pid, status = %what, "exited; restarting in {backoff:?}");
                tokio::select! { _ = stop.cancelled() => return true, _ = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(backoff_max);
                children.lock().unwrap()[si].restarts += 1;
            }
            _ = stop.cancelled() => {
                if let Some(pid) = pid {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
                }
                let clean = tokio::select! {
                    status = child.wait() => status.map(|s| s.success()).unwrap_or(false),
                    _ = tokio::time::sleep(shutdown_timeout) => {
                        tracing::warn!(child = %name, pid, "still running after the shutdown timeout; SIGKILL");
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        false
                    }
                    _ = kill_now.cancelled() => {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        false
                    }
                };
                children.lock().unwrap()[si].alive = false;
                tracing::info!(child = %name, pid, clean, "stopped");
                return clean;
            }
        }
    }
}
