//! The `serve` configuration file (TOML), with environment and flag
//! overrides. Every key is documented in docs/operations/configure.md and in
//! punctual.example.toml.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Default backoff ladder: 0s, 5s, 30s, 2m, 10m, 30m.
pub(crate) const DEFAULT_BACKOFF: [u64; 6] = [0, 5, 30, 120, 600, 1800];

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

/// One recurring schedule (`[schedules.NAME]`); see docs/operations/configure.md.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleConfig {
    /// The topic its jobs go to (one of `[topics]`).
    pub topic: String,
    /// A cron expression (5 fields, or 6 with seconds first).
    #[serde(default)]
    pub cron: Option<String>,
    /// A fixed interval instead ("30s", "5m").
    #[serde(default, with = "humantime_serde::option")]
    pub every: Option<Duration>,
    /// The cron expression's IANA time zone (default UTC).
    #[serde(default = "default_tz")]
    pub tz: String,
    /// Each occurrence's payload.
    #[serde(default)]
    pub payload: String,
    /// all, latest, skip or spread (default all).
    #[serde(default = "default_catch_up")]
    pub catch_up: String,
    /// The window of catch-up spread ("10m").
    #[serde(default, with = "humantime_serde::option")]
    pub spread: Option<Duration>,
    /// Job options: the enqueue M field (max attempts, `;`-separated
    /// options).
    #[serde(default)]
    pub options: String,
}

impl ScheduleConfig {
    /// The schedule it describes, checked.
    pub(crate) fn schedule(&self, name: &str) -> Result<punctual::schedule::Schedule> {
        crate::forms::build_schedule(
            name,
            self.cron.as_deref(),
            self.every,
            &self.tz,
            &self.payload,
            &self.catch_up,
            self.spread,
            &self.options,
        )
        .map_err(|e| anyhow::anyhow!("[schedules.{name}]: {e:#}"))
    }
}

fn default_tz() -> String {
    "UTC".into()
}

fn default_catch_up() -> String {
    "all".into()
}

/// One topic.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TopicConfig {
    /// Run a program per job: argv, no shell.
    #[serde(default)]
    pub exec: Option<Vec<String>>,
    /// POST each job to a URL.
    #[serde(default)]
    pub http: Option<HttpConfig>,
    /// Run long-lived programs that take jobs over fds 3 and 4 (argv, no
    /// shell): docs/RESIDENT.md.
    #[serde(default)]
    pub resident: Option<Vec<String>>,
    /// Resident programs of this topic in each worker process (default 1).
    #[serde(default)]
    pub processes: Option<usize>,
    /// Recycle a resident program after this many jobs (0: never; default
    /// 10000).
    #[serde(default)]
    pub max_jobs: Option<u64>,
    /// Recycle a resident program when its RSS exceeds this ("512MiB").
    #[serde(default)]
    pub max_memory: Option<String>,
    /// How long a resident program may take to say "ready" (default 60s).
    #[serde(default, with = "humantime_serde::option")]
    pub start_timeout: Option<Duration>,
    /// Handler timeout.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Deliveries before dead, for jobs that do not set their own.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Delays before retries ("0s", "5s", ...), the last step repeating.
    #[serde(default = "default_backoff")]
    pub backoff: Vec<String>,
    /// Extra environment for `exec` handlers.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory for `exec` handlers.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Split the topic over this many partitions (hash tags, so cluster
    /// shards). Stored in Redis at start; refused while the topic holds jobs.
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// Most claims per period over every worker ("200/s", "30/m", "5/h").
    /// The limits are stored in Redis at start when any of `rate`, `burst`,
    /// `max_running` is given (replacing the topic's limits); a table
    /// without them leaves the limits set with `punctual topic limits`.
    #[serde(default)]
    pub rate: Option<String>,
    /// Token bucket size for `rate` (default a tenth of a second's worth).
    #[serde(default)]
    pub burst: Option<u32>,
    /// Most jobs running at once over every worker.
    #[serde(default)]
    pub max_running: Option<u32>,
    /// Most claims per period of each group of jobs (`--group`), over every
    /// worker: the default of every group. Like `rate`, stored at start when
    /// any of `group_rate`, `group_burst`, `group_max_running` is given
    /// (replacing the default group limits; a group's own limits, set with
    /// `punctual groups T limit G`, stay).
    #[serde(default)]
    pub group_rate: Option<String>,
    /// Token bucket size of each group's `group_rate`.
    #[serde(default)]
    pub group_burst: Option<u32>,
    /// Most jobs of each group running at once over every worker.
    #[serde(default)]
    pub group_max_running: Option<u32>,
}

/// A resident topic's effective settings (see docs/RESIDENT.md).
#[derive(Debug, Clone)]
pub(crate) struct ResidentConfig {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// Programs per worker process.
    pub processes: usize,
    /// Jobs before a program is recycled (0: never).
    pub max_jobs: u64,
    /// RSS in bytes above which a program is recycled.
    pub max_memory: Option<u64>,
    pub start_timeout: Duration,
    /// Per job, from when it is sent to the program.
    pub timeout: Duration,
}

/// Default `max_jobs` of a resident topic.
pub(crate) const DEFAULT_MAX_JOBS: u64 = 10_000;
/// Default `start_timeout` of a resident topic.
pub(crate) const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// A size like `512MiB`, `1GB`, `800M` or `1048576` (bytes).
pub(crate) fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("not a size like 512MiB or 1GB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => bail!("unknown unit {other:?} (use B, KB, KiB, MB, MiB, GB or GiB)"),
    };
    let bytes = n * mult;
    if !(1.0..1e15).contains(&bytes) {
        bail!("must be at least 1 byte");
    }
    Ok(bytes as u64)
}

/// The `http` handler of a topic.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpConfig {
    /// Where to POST.
    pub url: String,
    /// Request timeout (default: the topic's timeout).
    #[serde(default, with = "humantime_serde::option")]
    pub timeout: Option<Duration>,
    /// Content-Type of the body (default application/json).
    #[serde(default = "default_content_type")]
    pub content_type: String,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
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
fn default_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_attempts() -> u32 {
    6
}
fn default_backoff() -> Vec<String> {
    DEFAULT_BACKOFF
        .iter()
        .map(|s| humantime::format_duration(Duration::from_secs(*s)).to_string())
        .collect()
}
fn default_partitions() -> u32 {
    1
}
fn default_content_type() -> String {
    "application/json".into()
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
            punctual::validate_topic(name).map_err(|e| anyhow::anyhow!("[topics.{name}]: {e}"))?;
            let resident_keys = [
                ("processes", t.processes.is_some()),
                ("max_jobs", t.max_jobs.is_some()),
                ("max_memory", t.max_memory.is_some()),
                ("start_timeout", t.start_timeout.is_some()),
            ];
            if let Some(argv) = &t.resident {
                if t.exec.is_some() || t.http.is_some() {
                    bail!("[topics.{name}]: give one of exec, http and resident, not several");
                }
                if rust.contains(&name.as_str()) {
                    bail!("[topics.{name}]: has a Rust handler, so it may not name resident too");
                }
                if argv.is_empty() || argv[0].is_empty() {
                    bail!("[topics.{name}]: resident must name a program: resident = [\"php\", \"worker.php\"]");
                }
                let r = self.resident(name).expect("a resident topic");
                if r.processes == 0 || r.processes > 1000 {
                    bail!(
                        "[topics.{name}]: processes = {}: must be 1 to 1000",
                        r.processes
                    );
                }
                if r.start_timeout.is_zero() {
                    bail!("[topics.{name}]: start_timeout must be more than 0s");
                }
                if let Some(m) = &t.max_memory {
                    parse_size(m)
                        .map_err(|e| anyhow::anyhow!("[topics.{name}]: max_memory = {m:?}: {e}"))?;
                }
            } else if let Some((key, _)) = resident_keys.iter().find(|(_, set)| *set) {
                bail!("[topics.{name}]: {key} applies to resident handlers only (add resident = [\"program\", \"arg\"])");
            }
            match (&t.exec, &t.http) {
                _ if t.resident.is_some() => {}
                (Some(_), Some(_)) => bail!("[topics.{name}]: give exec or http, not both"),
                (None, None) if rust.contains(&name.as_str()) => {}
                (Some(_), _) | (_, Some(_)) if rust.contains(&name.as_str()) => {
                    bail!("[topics.{name}]: has a Rust handler, so it may not name exec or http too")
                }
                (None, None) => bail!("[topics.{name}]: no handler: add exec = [\"program\", \"arg\"], resident = [\"program\", \"arg\"] or http = {{ url = \"...\" }}"),
                (Some(argv), None) if argv.is_empty() || argv[0].is_empty() => {
                    bail!("[topics.{name}]: exec must name a program: exec = [\"program\", \"arg\"]")
                }
                (None, Some(h)) => {
                    if !t.env.is_empty() || t.cwd.is_some() {
                        bail!("[topics.{name}]: env and cwd apply to exec and resident handlers only");
                    }
                    if h.timeout.is_some_and(|d| d.is_zero()) {
                        bail!("[topics.{name}]: http.timeout must be more than 0s");
                    }
                    reqwest::header::HeaderValue::from_str(&h.content_type).map_err(|_| {
                        anyhow::anyhow!("[topics.{name}]: http.content_type {:?} is not a valid header value", h.content_type)
                    })?;
                    for (k, v) in &h.headers {
                        reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                            anyhow::anyhow!("[topics.{name}]: http.headers: {k:?} is not a valid header name")
                        })?;
                        reqwest::header::HeaderValue::from_str(v).map_err(|_| {
                            anyhow::anyhow!("[topics.{name}]: http.headers.{k}: not a valid header value")
                        })?;
                    }
                    let u = reqwest::Url::parse(&h.url)
                        .map_err(|e| anyhow::anyhow!("[topics.{name}]: http.url = {:?}: {e}", h.url))?;
                    if !matches!(u.scheme(), "http" | "https") {
                        bail!("[topics.{name}]: http.url must be http:// or https://");
                    }
                }
                _ => {}
            }
            if t.partitions == 0 || t.partitions > punctual::MAX_PARTITIONS {
                bail!(
                    "[topics.{name}]: partitions = {}: must be 1 to {}",
                    t.partitions,
                    punctual::MAX_PARTITIONS
                );
            }
            if t.max_attempts == 0 {
                bail!("[topics.{name}]: max_attempts must be at least 1");
            }
            self.limits(name)?;
            self.group_limits(name)?;
            if t.timeout.is_zero() {
                bail!("[topics.{name}]: timeout must be more than 0s");
            }
            self.ladder(name)?;
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

    /// A topic's limits from its table, checked; None when the table sets
    /// none (then serve leaves the limits stored in Redis alone).
    pub(crate) fn limits(&self, topic: &str) -> Result<Option<punctual::Limits>> {
        let t = &self.topics[topic];
        limits_of(topic, "", &t.rate, t.burst, t.max_running)
    }

    /// The default limits of every group of a topic from its table
    /// (`group_rate`, `group_burst`, `group_max_running`), when any is given.
    pub(crate) fn group_limits(&self, topic: &str) -> Result<Option<punctual::Limits>> {
        let t = &self.topics[topic];
        limits_of(
            topic,
            "group_",
            &t.group_rate,
            t.group_burst,
            t.group_max_running,
        )
    }

    /// A resident topic's settings, defaults filled in (None for other
    /// topics). Call after `validate`.
    pub(crate) fn resident(&self, topic: &str) -> Option<ResidentConfig> {
        let t = &self.topics[topic];
        Some(ResidentConfig {
            argv: t.resident.clone()?,
            env: t.env.clone(),
            cwd: t.cwd.clone(),
            processes: t.processes.unwrap_or(1),
            max_jobs: t.max_jobs.unwrap_or(DEFAULT_MAX_JOBS),
            max_memory: t.max_memory.as_deref().and_then(|m| parse_size(m).ok()),
            start_timeout: t.start_timeout.unwrap_or(DEFAULT_START_TIMEOUT),
            timeout: t.timeout,
        })
    }

    /// A topic's backoff ladder, parsed.
    pub(crate) fn ladder(&self, topic: &str) -> Result<Vec<Duration>> {
        let t = &self.topics[topic];
        if t.backoff.is_empty() {
            bail!("[topics.{topic}]: backoff may not be empty (use [\"0s\"] for no wait)");
        }
        t.backoff
            .iter()
            .map(|s| {
                humantime::parse_duration(s)
                    .map_err(|e| anyhow::anyhow!("[topics.{topic}]: backoff step {s:?}: {e}"))
            })
            .collect()
    }
}

/// Serde helpers for durations written as "30s", "2m", "250ms".
mod humantime_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(|e| {
            serde::de::Error::custom(format!(
                "{s:?} is not a duration like 30s, 5m or 250ms ({e})"
            ))
        })
    }

    pub(super) mod option {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(
            d: &Option<Duration>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Duration>, D::Error> {
            // Absent or null (as the supervisor passes it on to its children).
            match Option::<String>::deserialize(d)? {
                None => Ok(None),
                Some(s) => humantime::parse_duration(&s).map(Some).map_err(|e| {
                    serde::de::Error::custom(format!(
                        "{s:?} is not a duration like 30s, 5m or 250ms ({e})"
                    ))
                }),
            }
        }
    }
}

/// Limits from a topic table's fields (`prefix`: "" or "group_"), when any
/// is given.
fn limits_of(
    topic: &str,
    prefix: &str,
    rate: &Option<String>,
    burst: Option<u32>,
    max_running: Option<u32>,
) -> Result<Option<punctual::Limits>> {
    if rate.is_none() && burst.is_none() && max_running.is_none() {
        return Ok(None);
    }
    let mut l = punctual::Limits::default();
    if let Some(r) = rate {
        l = l.rate(
            r.parse()
                .map_err(|e| anyhow::anyhow!("[topics.{topic}]: {prefix}rate = {r:?}: {e}"))?,
        );
    }
    if let Some(b) = burst {
        l = l.burst(b);
    }
    if let Some(m) = max_running {
        l = l.max_running(m);
    }
    l.validate()
        .map_err(|e| anyhow::anyhow!("[topics.{topic}]: {prefix}{e}"))?;
    Ok(Some(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, "test.toml", &Overrides::default(), &[])
    }

    #[test]
    fn the_minimal_form_from_the_issue_parses() {
        let c = parse(
            r#"
redis = "redis://127.0.0.1:6379"
workers = 4          # worker processes
concurrency = 16     # jobs at once per worker process

[topics.orders]
exec = ["php", "close_order.php"]
timeout = "30s"
max_attempts = 6

[topics.coupons]
http = { url = "http://127.0.0.1:8080/hooks/coupon", timeout = "10s" }
"#,
        )
        .unwrap();
        assert_eq!(c.workers, 4);
        assert_eq!(
            c.topics["coupons"].http.as_ref().unwrap().timeout,
            Some(Duration::from_secs(10))
        );
        assert_eq!(c.ladder("orders").unwrap()[3], Duration::from_secs(120));
    }

    #[test]
    fn promote_grace_defaults_to_the_schedulers_and_is_bounded() {
        let c = parse("[topics.a]\nexec = [\"true\"]\n").unwrap();
        assert_eq!(
            c.promote_grace,
            punctual::SchedulerConfig::default().promote_grace
        );
        let c = parse("promote_grace = \"0s\"\n[topics.a]\nexec = [\"true\"]\n").unwrap();
        assert_eq!(c.promote_grace, Duration::ZERO);
        // The example file says the default.
        let c = parse(include_str!("../../../../punctual.example.toml")).unwrap();
        assert_eq!(c.promote_grace, Duration::from_millis(20));
        for (bad, says) in [
            ("promote_grace = \"61s\"", "promote_grace"),
            // The overdue signal must not fire on jobs the grace keeps in
            // the pool on purpose.
            (
                "promote_grace = \"5s\"\noverdue_alert = \"5s\"",
                "overdue_alert",
            ),
        ] {
            let e = format!(
                "{:#}",
                parse(&format!("{bad}\n[topics.a]\nexec = [\"true\"]\n")).unwrap_err()
            );
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn topic_limits_parse_and_bad_ones_name_the_topic() {
        let c = parse(
            "[topics.a]\nexec = [\"true\"]\nrate = \"200/s\"\nburst = 20\nmax_running = 50\n[topics.b]\nexec = [\"true\"]\n",
        )
        .unwrap();
        let l = c.limits("a").unwrap().unwrap();
        assert_eq!(l.to_string(), "rate 200/s, burst 20, max running 50");
        assert!(c.limits("b").unwrap().is_none());
        for (bad, says) in [
            ("rate = \"fast\"", "rate"),
            ("rate = \"0/s\"", "rate"),
            ("burst = 3", "burst needs a rate"),
            ("max_running = 0", "max running"),
        ] {
            let e = parse(&format!("[topics.a]\nexec = [\"true\"]\n{bad}\n")).unwrap_err();
            let msg = format!("{e:#}");
            assert!(
                msg.contains("[topics.a]") && msg.contains(says),
                "{bad}: {msg}"
            );
        }
    }

    #[test]
    fn otel_is_off_by_default_and_its_endpoint_must_be_a_url() {
        let c = parse("[topics.a]\nexec = [\"true\"]\n").unwrap();
        assert!(c.otel.endpoint.is_none());
        let c =
            parse("[otel]\nendpoint = \"http://127.0.0.1:4318\"\n[topics.a]\nexec = [\"true\"]\n")
                .unwrap();
        assert_eq!(c.otel.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        let e = parse("[otel]\nendpoint = \"127.0.0.1:4318\"\n[topics.a]\nexec = [\"true\"]\n")
            .unwrap_err();
        assert!(format!("{e:#}").contains("[otel] endpoint"), "{e:#}");
        let e = parse("[otel]\nendpont = \"x\"\n[topics.a]\nexec = [\"true\"]\n").unwrap_err();
        assert!(format!("{e:#}").contains("endpont"), "{e:#}");
    }

    #[test]
    fn group_limits_parse_and_bad_ones_name_the_topic() {
        let c = parse(
            "[topics.a]\nexec = [\"true\"]\ngroup_rate = \"10/s\"\ngroup_max_running = 2\n[topics.b]\nexec = [\"true\"]\nrate = \"5/s\"\n",
        )
        .unwrap();
        let l = c.group_limits("a").unwrap().unwrap();
        assert_eq!(l.to_string(), "rate 10/s, burst 1 (default), max running 2");
        assert!(c.limits("a").unwrap().is_none());
        assert!(c.group_limits("b").unwrap().is_none());
        for (bad, says) in [
            ("group_rate = \"fast\"", "group_rate"),
            ("group_burst = 3", "burst needs a rate"),
            ("group_max_running = 0", "max running"),
        ] {
            let e = parse(&format!("[topics.a]\nexec = [\"true\"]\n{bad}\n")).unwrap_err();
            let msg = format!("{e:#}");
            assert!(
                msg.contains("[topics.a]") && msg.contains(says),
                "{bad}: {msg}"
            );
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key_and_line() {
        let e = parse("workers = 2\nworkerz = 3\n[topics.a]\nexec = [\"true\"]\n").unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("workerz") && msg.contains("line 2"), "{msg}");

        let e = parse("[topics.a]\nexec = [\"true\"]\ntimeout = \"soon\"\n").unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("timeout") && msg.contains("line 3") && msg.contains("soon"),
            "{msg}"
        );

        let e = parse("[topics.\"a{b}\"]\nexec = [\"true\"]\n").unwrap_err();
        assert!(format!("{e:#}").contains("braces"));

        let e = parse("[topics.a]\ntimeout = \"1s\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("no handler"));

        let e = parse("concurrency = 0\n[topics.a]\nexec = [\"true\"]\n").unwrap_err();
        assert!(format!("{e:#}").contains("concurrency = 0"));

        let e = parse("[topics.a]\nexec = [\"true\"]\nbackoff = [\"1s\", \"x\"]\n").unwrap_err();
        assert!(format!("{e:#}").contains("backoff step \"x\""));
    }

    #[test]
    fn resident_topics_parse_and_their_keys_are_checked() {
        let c = parse(
            "[topics.o]\nresident = [\"php\", \"w.php\"]\nprocesses = 4\nmax_memory = \"512MiB\"\nstart_timeout = \"5s\"\n",
        )
        .unwrap();
        let r = c.resident("o").unwrap();
        assert_eq!(
            (r.processes, r.max_jobs, r.max_memory, r.start_timeout),
            (4, DEFAULT_MAX_JOBS, Some(512 << 20), Duration::from_secs(5))
        );
        let bad = |text: &str, want: &str| {
            let msg = format!("{:#}", parse(text).unwrap_err());
            assert!(msg.contains(want), "{want:?} not in {msg}");
        };
        bad(
            "[topics.o]\nexec = [\"true\"]\nprocesses = 2\n",
            "processes applies to resident handlers only",
        );
        bad(
            "[topics.o]\nresident = [\"x\"]\nexec = [\"true\"]\n",
            "not several",
        );
        bad(
            "[topics.o]\nresident = []\n",
            "resident must name a program",
        );
        bad(
            "[topics.o]\nresident = [\"x\"]\nprocesses = 0\n",
            "processes = 0",
        );
        bad(
            "[topics.o]\nresident = [\"x\"]\nmax_memory = \"lots\"\n",
            "max_memory = \"lots\"",
        );
        bad(
            "[topics.o]\nresident = [\"x\"]\nstart_timeout = \"0s\"\n",
            "start_timeout must be",
        );
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("800K").unwrap(), 800_000);
    }

    #[test]
    fn overrides_win_over_the_file() {
        let o = Overrides {
            workers: Some(7),
            redis: Some("redis://10.0.0.1:6380".into()),
            ..Overrides::default()
        };
        let c =
            Config::parse("workers = 2\n[topics.a]\nexec = [\"true\"]\n", "t", &o, &[]).unwrap();
        assert_eq!((c.workers, c.redis.as_str()), (7, "redis://10.0.0.1:6380"));
    }

    #[test]
    fn security_keys_are_checked() {
        let c = parse("[topics.a]\nexec = [\"true\"]\n").unwrap();
        assert_eq!(c.max_retry_delay, Duration::from_secs(86_400));
        assert_eq!(c.http_header_timeout, Duration::from_secs(30));
        assert!(!c.require_token_for_reads);
        let c = parse("max_retry_delay = \"1h\"\napi_allowed_hosts = [\"q.example\"]\n[topics.a]\nexec = [\"true\"]\n").unwrap();
        assert_eq!(c.max_retry_delay, Duration::from_secs(3600));
        for (bad, says) in [
            ("max_retry_delay = \"0s\"", "max_retry_delay"),
            ("http_header_timeout = \"10ms\"", "http_header_timeout"),
            (
                "api_token = \"0123456789abcdef\"\napi_token_file = \"/t\"",
                "not both",
            ),
            (
                "api_allowed_hosts = [\"http://q.example/\"]",
                "not a host name",
            ),
        ] {
            let e = parse(&format!("{bad}\n[topics.a]\nexec = [\"true\"]\n")).unwrap_err();
            assert!(format!("{e:#}").contains(says), "{bad}: {e:#}");
        }
    }
}
