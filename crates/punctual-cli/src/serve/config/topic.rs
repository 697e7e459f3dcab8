//! `[topics.NAME]`: one topic's handler (exec, http or resident), its job
//! defaults and limits, and how they are checked and read.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::{humantime_serde, Config};

/// Default backoff ladder: 0s, 5s, 30s, 2m, 10m, 30m.
const DEFAULT_BACKOFF: [u64; 6] = [0, 5, 30, 120, 600, 1800];

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
    /// How much of a look-ahead program's work may be written ahead of the
    /// job it runs, by its recent jobs' average (default 2ms).
    #[serde(default, with = "humantime_serde::option")]
    pub lookahead_budget: Option<Duration>,
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
    /// A look-ahead program is written ahead at most as many jobs as it
    /// runs in this time, by its recent jobs' average (docs/RESIDENT.md,
    /// "Look-ahead").
    pub lookahead_budget: Duration,
}

/// Default `max_jobs` of a resident topic.
pub(crate) const DEFAULT_MAX_JOBS: u64 = 10_000;

/// Default `start_timeout` of a resident topic.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Default `lookahead_budget` of a resident topic.
pub(crate) const DEFAULT_LOOKAHEAD_BUDGET: Duration = Duration::from_millis(2);

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

impl Config {
    /// Checks one topic's table (part of `validate`); the message names
    /// the table and the key.
    pub(super) fn validate_topic(&self, name: &str, t: &TopicConfig, rust: &[&str]) -> Result<()> {
        punctual::validate_topic(name).map_err(|e| anyhow::anyhow!("[topics.{name}]: {e}"))?;
        let resident_keys = [
            ("processes", t.processes.is_some()),
            ("max_jobs", t.max_jobs.is_some()),
            ("max_memory", t.max_memory.is_some()),
            ("start_timeout", t.start_timeout.is_some()),
            ("lookahead_budget", t.lookahead_budget.is_some()),
        ];
        if let Some(argv) = &t.resident {
            if t.exec.is_some() || t.http.is_some() {
                bail!("[topics.{name}]: give one of exec, http and resident, not several");
            }
            if rust.contains(&name) {
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
            if r.lookahead_budget > Duration::from_secs(60) {
                bail!("[topics.{name}]: lookahead_budget must be 0s to 60s (0s: no job written ahead)");
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
            (None, None) if rust.contains(&name) => {}
            (Some(_), _) | (_, Some(_)) if rust.contains(&name) => {
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
            lookahead_budget: t.lookahead_budget.unwrap_or(DEFAULT_LOOKAHEAD_BUDGET),
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
