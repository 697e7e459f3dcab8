//! The command-line entry points of `serve` and of the processes it runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use super::child::{CONFIG_FD_ENV, METRICS_ENV};
use super::config::{Config, Overrides};
use crate::exit;
use crate::input::parse_duration;

/// `punctual serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Worker processes (overrides `workers` in the file).
    #[arg(long, value_name = "N", env = "PUNCTUAL_WORKERS")]
    pub workers: Option<usize>,

    /// Jobs at once per worker process (overrides `concurrency`).
    #[arg(long, value_name = "N", env = "PUNCTUAL_CONCURRENCY")]
    pub concurrency: Option<usize>,

    /// Scheduler processes (overrides `schedulers`).
    #[arg(long, value_name = "N", env = "PUNCTUAL_SCHEDULERS")]
    pub schedulers: Option<usize>,

    /// Serve /healthz, /metrics, the HTTP API (/api/v1) and the dashboard
    /// (/) on this address, e.g. 127.0.0.1:9464 (overrides `http`). API
    /// calls that change something need the token from PUNCTUAL_API_TOKEN,
    /// `api_token_file` or `api_token`; without one the API only reads
    /// (`require_token_for_reads` puts the reads behind it too).
    #[arg(long, value_name = "ADDR", env = "PUNCTUAL_HTTP")]
    pub http: Option<String>,

    /// Write the supervisor's pid to this file (overrides `pidfile`).
    #[arg(long, value_name = "FILE")]
    pub pidfile: Option<String>,

    /// Log format: text or json (overrides `log_format`).
    #[arg(long, value_name = "FORMAT", env = "PUNCTUAL_LOG_FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,

    /// How long SIGTERM waits for running jobs before SIGKILL (overrides
    /// `shutdown_timeout`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_timeout: Option<Duration>,

    /// Lease length (overrides `lease`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lease: Option<Duration>,
}

/// The hidden `__worker` / `__scheduler` commands.
#[derive(Debug, Args)]
pub(crate) struct ChildArgs {
    /// Which child of its kind this is (for logs).
    #[arg(long, default_value_t = 0)]
    pub index: usize,
}

/// Loads the config with flag and environment overrides. `redis` and
/// `prefix` are the global options when they were given explicitly.
pub(crate) fn load(
    path: Option<&Path>,
    args: &ServeArgs,
    redis: Option<String>,
    prefix: Option<String>,
    handlers: &super::rust::Handlers,
) -> Result<Config> {
    let o = Overrides {
        redis,
        prefix,
        workers: args.workers,
        concurrency: args.concurrency,
        schedulers: args.schedulers,
        http: args.http.clone(),
        pidfile: args.pidfile.clone(),
        log_format: args.log_format.clone(),
        shutdown_timeout: args.shutdown_timeout,
        lease: args.lease,
    };
    let Some(path) = path else {
        return Err(exit::invalid(
            "serve needs a config file: give --config FILE or set PUNCTUAL_CONFIG (start from punctual.example.toml)",
        ));
    };
    if !path.exists() {
        return Err(exit::invalid(format!(
            "config file {} not found (start from punctual.example.toml)",
            path.display()
        )));
    }
    let rust: Vec<&str> = handlers.topics().collect();
    let mut cfg = Config::load(path, &o, &rust).map_err(|e| exit::invalid(format!("{e:#}")))?;
    // The API token: the environment wins over the file; checked here so a
    // bad one fails at start.
    if let Some(token_file) = &cfg.api_token_file {
        let text = std::fs::read_to_string(token_file).map_err(|e| {
            exit::invalid(format!(
                "{}: api_token_file {token_file}: cannot read it: {e}",
                path.display()
            ))
        })?;
        cfg.api_token = Some(text.lines().next().unwrap_or("").trim().to_string());
    }
    match crate::api::auth::resolve(cfg.api_token.as_deref())
        .map_err(|e| exit::invalid(format!("{}: {e}", path.display())))?
    {
        Some(token) => cfg.api_token = Some(token.reveal()),
        None if cfg.require_token_for_reads => {
            return Err(exit::invalid(format!(
                "{}: require_token_for_reads needs a token: set api_token_file, api_token or PUNCTUAL_API_TOKEN",
                path.display()
            )))
        }
        None => {}
    }
    super::supervisor::check_programs(&cfg)
        .map_err(|e| exit::invalid(format!("{}: invalid configuration: {e:#}", path.display())))?;
    Ok(cfg)
}

/// Runs the supervisor.
pub(crate) async fn serve(cfg: Config) -> Result<()> {
    match super::supervisor::supervise(cfg).await? {
        0 => Ok(()),
        _ => Err(exit::problem(
            "some children were killed at the shutdown timeout; their jobs will be re-delivered",
        )),
    }
}

/// The config the supervisor writes into the pipe named by
/// `PUNCTUAL_SERVE_CONFIG_FD`; the pipe is closed after reading, so no
/// handler inherits it. Also makes this process non-dumpable: other
/// processes of the same user (handlers) cannot read its memory, where the
/// config's secrets now live.
#[allow(unsafe_code)]
fn child_config() -> Result<Config> {
    use std::io::Read;
    use std::os::fd::FromRawFd;

    let _ = nix::sys::prctl::set_dumpable(false);
    let fd: i32 = std::env::var(CONFIG_FD_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .with_context(|| {
            format!(
                "{CONFIG_FD_ENV} is not set: this command is run by `punctual serve`, not by hand"
            )
        })?;
    // SAFETY: the supervisor opened this descriptor for us alone; nothing
    // else in this process uses it, and the File closes it.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut json = String::new();
    pipe.read_to_string(&mut json)
        .context("cannot read the config from the supervisor")?;
    drop(pipe);
    serde_json::from_str(&json).context("the config passed by the supervisor is malformed")
}

/// A worker process.
pub(crate) async fn worker(args: ChildArgs, handlers: super::rust::Handlers) -> Result<()> {
    let cfg = child_config()?;
    let metrics = match std::env::var_os(METRICS_ENV) {
        Some(p) => Some(super::metrics::MetricsSender::start(
            PathBuf::from(p),
            args.index,
        )?),
        None => None,
    };
    let span = tracing::info_span!("worker", index = args.index, pid = std::process::id());
    tracing::Instrument::instrument(super::roles::run_worker(cfg, metrics, handlers), span).await
}

/// A scheduler process.
pub(crate) async fn scheduler(args: ChildArgs) -> Result<()> {
    let cfg = child_config()?;
    let span = tracing::info_span!("scheduler", index = args.index, pid = std::process::id());
    tracing::Instrument::instrument(super::roles::run_scheduler(cfg), span).await
}
