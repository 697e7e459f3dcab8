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
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use super::child::{
    CHILD_CONFIG_FD, CONFIG_FD_ENV, LOG_FORMAT_ENV, METRICS_ENV, PROCESS_ID_ENV, SECRET_ENV,
    SUPERVISOR_PID_ENV,
};
use super::config::Config;
use super::connect::connect;
use super::http::{ChildStatus, Children};

const RESTART_MIN: Duration = Duration::from_millis(500);
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Checks that every exec handler's program can be found, so a typo fails
/// at start instead of sending every job to dead.
pub(crate) fn check_programs(cfg: &Config) -> Result<()> {
    if cfg.workers == 0 {
        // A scheduler-only host runs no handler.
        return Ok(());
    }
    let runnable = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    for (name, t) in &cfg.topics {
        let (kind, argv) = match (&t.exec, &t.resident) {
            (Some(a), _) => ("exec", a),
            (None, Some(a)) => ("resident", a),
            _ => continue,
        };
        if let Some(dir) = &t.cwd {
            if !std::path::Path::new(dir).is_dir() {
                bail!("[topics.{name}]: cwd {dir:?} is not a directory");
            }
        }
        let prog = PathBuf::from(&argv[0]);
        let found = if prog.components().count() > 1 {
            let p = match &t.cwd {
                Some(dir) if prog.is_relative() => PathBuf::from(dir).join(&prog),
                _ => prog.clone(),
            };
            runnable(&p)
        } else {
            std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).any(|d| runnable(&d.join(&prog))))
                .unwrap_or(false)
        };
        if !found {
            bail!(
                "[topics.{name}]: {kind} program {:?} not found or not executable (give a path or a program on PATH; chmod +x a script)",
                argv[0]
            );
        }
    }
    Ok(())
}

/// Writes our pid to `path`, refusing when it names another live process
/// (a second `serve` with the same pidfile).
fn write_pidfile(path: &str) -> Result<()> {
    if let Ok(old) = std::fs::read_to_string(path) {
        if let Ok(pid) = old.trim().parse::<i32>() {
            let alive = kill(Pid::from_raw(pid), None).is_ok();
            if alive && pid as u32 != std::process::id() {
                bail!("pidfile {path} names process {pid}, which is running: is another punctual serve using it?");
            }
        }
    }
    std::fs::write(path, format!("{}\n", std::process::id()))
        .with_context(|| format!("cannot write pidfile {path}"))
}

/// Runs the service until a signal; returns the process exit code: 0 after
/// a clean drain, 1 when children had to be killed.
pub(crate) async fn supervise(cfg: Config) -> Result<i32> {
    // Handlers run as our user: keep them from reading this process's
    // memory and /proc files (environ, where PUNCTUAL_API_TOKEN may be).
    let _ = nix::sys::prctl::set_dumpable(false);
    // Fail fast on an unreachable Redis, and store the topic defaults where
    // the scripts read them. set_topic_defaults also lists each topic in
    // P:topics: one a producer left unlisted (stopped between its enqueue
    // and the SADD) shows again in topics, stats and the dashboard.
    let queue = connect(&cfg).await?;
    for name in cfg.topics.keys() {
        let t = &cfg.topics[name];
        let ladder = cfg.ladder(name)?;
        queue
            .set_partitions(name, t.partitions)
            .await
            .with_context(|| format!("cannot set the partitions of topic {name}"))?;
        queue
            .set_topic_defaults(name, Some(t.max_attempts), Some(&ladder))
            .await
            .with_context(|| format!("cannot store the settings of topic {name}"))?;
        if let Some(l) = cfg.limits(name)? {
            queue
                .set_limits(name, &l)
                .await
                .with_context(|| format!("cannot store the limits of topic {name}"))?;
        }
        if let Some(l) = cfg.group_limits(name)? {
            queue
                .set_group_limits(name, None, &l)
                .await
                .with_context(|| format!("cannot store the group limits of topic {name}"))?;
        }
    }
    super::schedules::upsert(&queue, &cfg).await?;
    if let Some(p) = &cfg.pidfile {
        write_pidfile(p)?;
    }

    // On tmpfs where there is one: workers write their reply counts here
    // at every reply (metrics.rs), which must never wait for a disk.
    let rundir = tempfile::Builder::new()
        .prefix("punctual-serve-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::Builder::new().prefix("punctual-serve-").tempdir())?;
    let metrics_path = rundir.path().join("metrics.sock");
    let handle = super::metrics::install_recorder()?;
    // The resident topics this host's workers run show (at zero) before
    // their first report.
    let resident = super::metrics::ResidentBoard::new(
        cfg.topics
            .iter()
            .filter(|(_, t)| cfg.workers > 0 && t.resident.is_some())
            .map(|(name, _)| name.as_str()),
    );
    let _receiver = super::metrics::receive(&metrics_path, resident.clone())?;

    // This supervisor's record in the process registry; its children's ids
    // are under its id.
    let registration = queue.register_process(
        punctual::registry::ProcessInfo::new(
            punctual::registry::Role::Supervisor,
            cfg.topics.keys().cloned(),
        ),
        cfg.heartbeat,
    )?;
    let sup_id = registration.id().to_string();

    let exe =
        std::env::current_exe().context("cannot find this program's path to re-execute it")?;
    let config_json: Arc<str> = serde_json::to_string(&cfg)?.into();
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
        Some(_) => Some(
            super::http::serve(
                &cfg,
                children.clone(),
                resident.clone(),
                handle,
                queue.clone(),
            )
            .await?,
        ),
        None => None,
    };

    let stop = CancellationToken::new();
    let kill_now = CancellationToken::new();
    let mut tasks = Vec::new();
    for (si, (role, index)) in slots.into_iter().enumerate() {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg(format!("__{role}"))
            .arg("--index")
            .arg(index.to_string())
            .env(CONFIG_FD_ENV, CHILD_CONFIG_FD.to_string())
            .env(SUPERVISOR_PID_ENV, std::process::id().to_string())
            .env(PROCESS_ID_ENV, format!("{sup_id}/{role}-{index}"))
            .env(LOG_FORMAT_ENV, &cfg.log_format);
        for var in SECRET_ENV {
            cmd.env_remove(var);
        }
        if role == "worker" {
            cmd.env(METRICS_ENV, &metrics_path);
        }
        tasks.push(tokio::spawn(run_slot(
            ChildCommand {
                base: cmd,
                config: config_json.clone(),
            },
            role,
            index,
            si,
            Registry {
                queue: queue.clone(),
                id: format!("{sup_id}/{role}-{index}"),
            },
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
    registration.stop().await;
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

/// How to start one child: its command line and environment, and the
/// config it reads from a pipe.
struct ChildCommand {
    base: std::process::Command,
    config: Arc<str>,
}

impl ChildCommand {
    /// Starts the child with a fresh config pipe at [`CHILD_CONFIG_FD`], and
    /// writes the config into it (in the background: it may be larger than
    /// the pipe's buffer).
    #[allow(unsafe_code)]
    fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        use std::io::Write;
        use std::os::fd::{AsRawFd, BorrowedFd};
        use std::os::unix::process::CommandExt;

        let (mut reader, writer) = std::io::pipe()?;
        if reader.as_raw_fd() == CHILD_CONFIG_FD {
            // dup2 onto itself would keep close-on-exec set: move it first.
            reader = reader.try_clone()?;
        }
        let raw = reader.as_raw_fd();
        let mut cmd = std::process::Command::new(self.base.get_program());
        cmd.args(self.base.get_args());
        for (k, v) in self.base.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        // SAFETY: between fork and exec only dup2(2) runs, which is
        // async-signal-safe; the returned descriptor is the child's fd 3,
        // left open (forgotten) for the program to read.
        unsafe {
            cmd.pre_exec(move || {
                let fd = nix::unistd::dup2_raw(BorrowedFd::borrow_raw(raw), CHILD_CONFIG_FD)?;
                std::mem::forget(fd);
                Ok(())
            });
        }
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let child = cmd.spawn();
        drop(reader);
        let child = child?;
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || {
            let mut writer = writer;
            // A child that dies before reading closes the pipe: nothing to do.
            let _ = writer.write_all(config.as_bytes());
        });
        Ok(child)
    }
}

/// A child's place in the process registry.
struct Registry {
    queue: punctual::Queue,
    /// The id the child registers under.
    id: String,
}

impl Registry {
    /// Removes the record of a reaped child (and its resident programs'):
    /// a killed child cannot, and would stay listed until its record
    /// expired.
    async fn reaped(&self) {
        if let Err(e) = self.queue.deregister_process(&self.id).await {
            tracing::warn!(id = %self.id, error = %e, "cannot remove a reaped child's registry record; it expires on its own");
        }
    }
}

/// Keeps one child running until `stop`; returns whether it then exited
/// cleanly within the shutdown timeout.
#[allow(clippy::too_many_arguments)]
async fn run_slot(
    cmd: ChildCommand,
    role: &'static str,
    index: usize,
    si: usize,
    registry: Registry,
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
                // A child that exits 0 was stopped (e.g. by the terminal's
                // SIGINT) and drained; any other exit is a crash.
                let ok = status.as_ref().is_ok_and(|s| s.success());
                let what = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                {
                    let mut c = children.lock().unwrap();
                    c[si].alive = false;
                    c[si].last_exit = Some(what.clone());
                }
                registry.reaped().await;
                if stop.is_cancelled() {
                    return ok;
                }
                if started.elapsed() >= STABLE_AFTER {
                    backoff = RESTART_MIN;
                }
                tracing::warn!(child = %name, pid, status = %what, "exited; restarting in {backoff:?}");
                tokio::select! { _ = stop.cancelled() => return ok, _ = tokio::time::sleep(backoff) => {} }
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
                registry.reaped().await;
                tracing::info!(child = %name, pid, clean, "stopped");
                return clean;
            }
        }
    }
}
