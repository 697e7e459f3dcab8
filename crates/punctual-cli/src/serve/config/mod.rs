//! The `serve` configuration file (TOML), with environment and flag
//! overrides. Every key is documented in docs/operations/configure.md and in
//! punctual.example.toml.
//!
//! The rooms: the service-wide keys and their checks here, `topic.rs`
//! (`[topics.NAME]`), `schedule.rs` (`[schedules.NAME]`),
//! `humantime_serde.rs` (durations written "30s").

mod humantime_serde;
mod schedule;
#[cfg(test)]
mod tests;
mod topic;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub(crate) use schedule::ScheduleConfig;
pub(crate) use topic::{HttpConfig, ResidentConfig, TopicConfig};

/// The whole file, as written (every key optional but `topics`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Redis URL.
    #[serde(default = "default_redis")]
    pub redis: String,
    /// Key prefix.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Worker processes.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Jobs at once per worker process.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Scheduler processes.
    #[serde(default = "default_schedulers")]
    pub schedulers: usize,
    /// How long SIGTERM waits for running jobs before SIGKILL.
    #[serde(default = "default_shutdown", with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Lease length (extended every third of it while a job runs).
    #[serde(default = "default_lease", with = "humantime_serde")]
    pub lease: Duration,
    /// Jobs promoted per scheduler tick (1..1000).
    #[serde(default = "default_promote_batch")]
    pub promote_batch: usize,
    /// On a topic without groups, workers with free slots claim due jobs
    /// straight from the pool; the schedulers move to ready only the jobs
    /// due longer than this ago, the ones no worker took (0 to 60 s).
    #[serde(default = "default_promote_grace", with = "humantime_serde")]
    pub promote_grace: Duration,
    /// Promotion pauses while a topic's ready set holds this many jobs.
    #[serde(default = "default_max_ready")]
    pub max_ready: usize,
    /// Largest payload accepted, bytes.
    #[serde(default = "default_max_payload")]
    pub max_payload: usize,
    /// Safety-net interval for idle workers and schedulers.
    #[serde(default = "default_idle_check", with = "humantime_serde")]
    pub idle_check: Duration,
    /// Beat period of every process's record in the process registry (the
    /// record expires 3 beats after the last).
    #[serde(default = "default_heartbeat", with = "humantime_serde")]
    pub heartbeat: Duration,
    /// A topic is degraded (/healthz 503, doctor FAIL) when a job in its
    /// pool is past due by more than this: no scheduler, or one too slow.
    #[serde(default = "default_overdue_alert", with = "humantime_serde")]
    pub overdue_alert: Duration,
    /// A topic is degraded when its oldest ready job has waited longer than
    /// this: no worker, or too few.
    #[serde(default = "default_ready_alert", with = "humantime_serde")]
    pub ready_alert: Duration,
    /// Address for /healthz, /metrics, the HTTP API and the dashboard (off
    /// when absent).
    #[serde(default)]
    pub http: Option<String>,
    /// Bearer token for the HTTP API's calls that change something
    /// (PUNCTUAL_API_TOKEN wins over it). Without one the API only reads.
    /// Never passed to the child processes.
    #[serde(default, skip_serializing)]
    pub api_token: Option<String>,
    /// A file whose first line is the API token: keeps it out of the
    /// config file and out of every process's environment.
    #[serde(default, skip_serializing)]
    pub api_token_file: Option<String>,
    /// Refuse the API's reads too (jobs, payloads, errors, stats) without
    /// the token. /healthz, /metrics, /api/v1/info and the dashboard's page
    /// stay open.
    #[serde(default)]
    pub require_token_for_reads: bool,
    /// Host names (besides IP addresses and `localhost`) the HTTP server
    /// answers to; requests naming another host get 421. `["*"]`: any.
    #[serde(default)]
    pub api_allowed_hosts: Vec<String>,
    /// Time for a client to send a request's headers, counted from when the
    /// connection opens or the previous response was sent (so it also
    /// closes idle connections).
    #[serde(default = "default_http_header_timeout", with = "humantime_serde")]
    pub http_header_timeout: Duration,
    /// Time for a client to send a request's body.
    #[serde(default = "default_http_body_timeout", with = "humantime_serde")]
    pub http_body_timeout: Duration,
    /// Longest retry delay a handler may ask for (an HTTP Retry-After, a
    /// Rust handler's `Outcome::retry_after`); longer ones are cut to it.
    #[serde(default = "default_max_retry_delay", with = "humantime_serde")]
    pub max_retry_delay: Duration,
    /// After an operator cancels a running job, how long its handler has to
    /// stop (exec: from SIGTERM to SIGKILL of its group; resident: from the
    /// `cancel` message to the program's replacement).
    #[serde(default = "default_cancel_grace", with = "humantime_serde")]
    pub cancel_grace: Duration,
    /// Write the supervisor's pid here.
    #[serde(default)]
    pub pidfile: Option<String>,
    /// Log format: "text" or "json".
    #[serde(default = "default_log_format")]
    pub log_format: String,
    /// Longest restart backoff for a child that keeps dying.
    #[serde(default = "default_restart_max", with = "humantime_serde")]
    pub restart_backoff_max: Duration,
    /// The topics and their handlers.
    #[serde(default)]
    pub topics: BTreeMap<String, TopicConfig>,
    /// Recurring schedules, added (or replaced) in Redis by `serve` at
    /// start; removing one here does not remove it from Redis (`punctual
    /// schedule rm` does).
    #[serde(default)]
    pub schedules: BTreeMap<String, ScheduleConfig>,
    /// OpenTelemetry: one span per attempt, exported over OTLP/HTTP (off
    /// without an endpoint here or in OTEL_EXPORTER_OTLP_ENDPOINT).
    #[serde(default)]
    pub otel: OtelConfig,
}

/// `[otel]`: where the workers export a span per attempt (docs/operations/configure.md,
/// "Tracing").
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OtelConfig {
    /// The OTLP/HTTP collector's base URL (`http://127.0.0.1:4318`; spans
    /// go to `/v1/traces` under it). Absent: OTEL_EXPORTER_OTLP_ENDPOINT
    /// (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, taken as is), else off.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The spans' `service.name` (default: OTEL_SERVICE_NAME, else
    /// "punctual").
    #[serde(default)]
    pub service_name: Option<String>,
}

fn default_redis() -> String {
    "redis://127.0.0.1:6379".into()
}
fn default_prefix() -> String {
    punctual::DEFAULT_PREFIX.into()
}
fn default_workers() -> usize {
    2
}
fn default_concurrency() -> usize {
    16
}
fn default_schedulers() -> usize {
    1
}
fn default_shutdown() -> Duration {
    Duration::from_secs(30)
}
fn default_lease() -> Duration {
    Duration::from_secs(30)
}
fn default_promote_batch() -> usize {
    200
}
fn default_promote_grace() -> Duration {
    punctual::SchedulerConfig::default().promote_grace
}
fn default_max_ready() -> usize {
    100_000
}
fn default_max_payload() -> usize {
    punctual::DEFAULT_MAX_PAYLOAD
}
fn default_idle_check() -> Duration {
    Duration::from_secs(30)
}
fn default_heartbeat() -> Duration {
    punctual::registry::DEFAULT_HEARTBEAT
}
fn default_overdue_alert() -> Duration {
    crate::health::DEFAULT_OVERDUE_ALERT
}
fn default_ready_alert() -> Duration {
    crate::health::DEFAULT_READY_ALERT
}
fn default_http_header_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_http_body_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_max_retry_delay() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_cancel_grace() -> Duration {
    Duration::from_secs(5)
}
fn default_log_format() -> String {
    "text".into()
}
fn default_restart_max() -> Duration {
    Duration::from_secs(30)
}
/// Overrides from flags and environment (set ones win over the file).
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    pub redis: Option<String>,
    pub prefix: Option<String>,
    pub workers: Option<usize>,
    pub concurrency: Option<usize>,
    pub schedulers: Option<usize>,
    pub http: Option<String>,
    pub pidfile: Option<String>,
    pub log_format: Option<String>,
    pub shutdown_timeout: Option<Duration>,
    pub lease: Option<Duration>,
}

impl Config {
    /// The thresholds of the overdue signal.
    pub(crate) fn alerts(&self) -> crate::health::Alerts {
        crate::health::Alerts {
            overdue: self.overdue_alert,
            ready: self.ready_alert,
        }
    }

    /// Reads and validates a file; errors name the key and line. `rust`
    /// names the topics with a handler registered in Rust.
    pub(crate) fn load(path: &Path, o: &Overrides, rust: &[&str]) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        Config::parse(&text, &path.display().to_string(), o, rust)
    }

    /// Parses and validates config text (`origin` names it in errors).
    pub(crate) fn parse(text: &str, origin: &str, o: &Overrides, rust: &[&str]) -> Result<Config> {
        let mut c: Config = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{origin}: {}", e.to_string().trim_end()))?;
        c.apply(o);
        c.validate(rust)
            .with_context(|| format!("{origin}: invalid configuration"))?;
        Ok(c)
    }

    fn apply(&mut self, o: &Overrides) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = &o.$f { self.$f = v.clone(); } )* };
        }
        set!(
            redis,
            prefix,
            workers,
            concurrency,
            schedulers,
            log_format,
            shutdown_timeout,
            lease
        );
        if o.http.is_some() {
            self.http = o.http.clone();
        }
        if o.pidfile.is_some() {
            self.pidfile = o.pidfile.clone();
        }
    }

    /// Checks every value; the message names the key. `rust` names the
    /// topics whose handler is registered in Rust (see `Handlers`).
    pub(crate) fn validate(&self, rust: &[&str]) -> Result<()> {
        for t in rust {
            if !self.topics.contains_key(*t) {
                bail!("a Rust handler is registered for topic {t:?}, but the config has no [topics.{t}] table: add one (without exec, resident or http)");
            }
        }
        if self.topics.is_empty() {
            bail!("no topics: add at least one [topics.NAME] table with an exec, resident or http handler");
        }
        if self.workers == 0 && self.schedulers == 0 {
            bail!("workers and schedulers are both 0: nothing to run");
        }
        if self.concurrency == 0 || self.concurrency > 10_000 {
            bail!("concurrency = {}: must be 1 to 10000", self.concurrency);
        }
        if self.workers > 256 || self.schedulers > 64 {
            bail!("workers must be at most 256 and schedulers at most 64");
        }
        if let Some(e) = &self.otel.endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                bail!("[otel] endpoint = {e:?}: give the OTLP/HTTP collector's base URL, e.g. \"http://127.0.0.1:4318\" (spans go to /v1/traces under it)");
            }
        }
        if !(1..=1000).contains(&self.promote_batch) {
            bail!("promote_batch = {}: must be 1 to 1000", self.promote_batch);
        }
        if self.max_ready == 0 {
            bail!("max_ready must be at least 1");
        }
        if self.lease < Duration::from_millis(100) {
            bail!("lease = {:?}: must be at least 100ms", self.lease);
        }
        if self.restart_backoff_max < Duration::from_millis(500) {
            bail!("restart_backoff_max must be at least 500ms (the first restart waits 500ms)");
        }
        if self.shutdown_timeout < Duration::from_secs(1) {
            bail!("shutdown_timeout must be at least 1s: running jobs need time to finish");
        }
        if self.idle_check < Duration::from_millis(100) {
            bail!("idle_check must be at least 100ms");
        }
        if self.cancel_grace > Duration::from_secs(3600) {
            bail!("cancel_grace must be at most 1h");
        }
        if self.heartbeat < Duration::from_millis(100) {
            bail!("heartbeat must be at least 100ms");
        }
        if self.overdue_alert.is_zero() || self.ready_alert.is_zero() {
            bail!("overdue_alert and ready_alert must be more than 0s");
        }
        if self.promote_grace > Duration::from_secs(60) {
            bail!(
                "promote_grace = {}: must be at most 60s",
                humantime::format_duration(self.promote_grace)
            );
        }
        if self.overdue_alert <= self.promote_grace {
            bail!(
                "overdue_alert = {} must be more than promote_grace = {}: due jobs wait in the pool up to the grace when no worker has room",
                humantime::format_duration(self.overdue_alert),
                humantime::format_duration(self.promote_grace)
            );
        }
        if self.max_retry_delay < Duration::from_secs(1)
            || self.max_retry_delay > punctual::MAX_DELAY
        {
            bail!("max_retry_delay must be 1s to ten years");
        }
        if self.http_header_timeout < Duration::from_millis(100)
            || self.http_body_timeout < Duration::from_millis(100)
        {
            bail!("http_header_timeout and http_body_timeout must be at least 100ms");
        }
        if self.api_token.is_some() && self.api_token_file.is_some() {
            bail!("give api_token or api_token_file, not both");
        }
        for h in &self.api_allowed_hosts {
            if h.is_empty() || h.contains(['/', ' ', '@']) {
                bail!("api_allowed_hosts: {h:?} is not a host name (give e.g. \"queue.example.com\", or \"*\" for any)");
            }
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            bail!(
                "log_format = {:?}: must be \"text\" or \"json\"",
                self.log_format
            );
        }
        if let Some(addr) = &self.http {
            addr.parse::<std::net::SocketAddr>().map_err(|e| {
                anyhow::anyhow!("http = {addr:?}: not an address like 127.0.0.1:9464 ({e})")
            })?;
        }
        for (name, t) in &self.topics {
            self.validate_topic(name, t, rust)?;
        }
        for (name, sc) in &self.schedules {
            if !self.topics.contains_key(&sc.topic) {
                bail!(
                    "[schedules.{name}]: topic = {:?} is not one of the [topics.NAME] tables: add it, so that this service's schedulers fire it",
                    sc.topic
                );
            }
            sc.schedule(name)?;
        }
        Ok(())
    }
}
