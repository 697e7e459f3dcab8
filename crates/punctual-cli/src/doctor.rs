//! `punctual doctor`: checks the Redis that punctual points at, one verdict
//! per line with what to change. Read-only: INFO, CONFIG GET and PING.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Args;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::context::Ctx;
use crate::exit;
use crate::output::{emit, emit_json};
use punctual::internal::redact;

/// Arguments of `doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The schedulers' promote batch (`promote_batch` in the serve config,
    /// 1 to 1000): the script time check estimates how long one tick of
    /// this size keeps Redis busy.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub promote_batch: u16,

    /// Round trips (PING) to time for the latency check.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u16).range(5..=10_000))]
    pub pings: u16,

    /// A topic fails when a job in its pool is past due by more than this
    /// (no scheduler alive, or one too slow): `overdue_alert` in the serve
    /// config.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = crate::input::parse_duration)]
    pub overdue_alert: Duration,

    /// A topic fails when its oldest ready job has waited longer than this
    /// (no worker alive, or too few): `ready_alert` in the serve config.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::input::parse_duration)]
    pub ready_alert: Duration,
}

/// A verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub check: &'static str,
    pub status: Status,
    /// What was found.
    pub found: String,
    /// What to change (empty when nothing).
    pub advice: String,
}

fn check(
    check: &'static str,
    status: Status,
    found: impl Into<String>,
    advice: impl Into<String>,
) -> Check {
    Check {
        check,
        status,
        found: found.into(),
        advice: advice.into(),
    }
}

/// Upper bound of the work per job in a tick (reclaim or promote: a few
/// sorted-set and hash commands). Measured at 2 to 4 µs per job on Redis
/// 7.0 on a small VM; 10 µs leaves room for a slower host.
const TICK_US_PER_JOB: u64 = 10;

/// What a tick of `batch` costs at most, in ms: reclaim and promote may
/// each move a whole batch.
fn tick_estimate_ms(batch: u64) -> f64 {
    (2 * batch * TICK_US_PER_JOB) as f64 / 1000.0
}

/// The facts the checks judge, read from one node.
#[derive(Debug, Default)]
struct Facts {
    info: HashMap<String, String>,
    /// `None`: CONFIG is disabled or renamed (common on managed Redis).
    config: Option<HashMap<String, String>>,
    config_error: String,
    /// Round-trip times.
    rtt: Vec<Duration>,
}

impl Facts {
    fn info(&self, key: &str) -> Option<&str> {
        self.info.get(key).map(String::as_str)
    }

    fn config(&self, key: &str) -> Option<&str> {
        self.config.as_ref()?.get(key).map(String::as_str)
    }
}

async fn read_facts(conn: &mut MultiplexedConnection, pings: u16) -> Result<Facts> {
    let info: String = redis::cmd("INFO")
        .arg("everything")
        .query_async(conn)
        .await
        .context("INFO failed")?;
    let mut facts = Facts {
        info: punctual::internal::nodes::parse_info(&info),
        ..Facts::default()
    };
    if facts.info("cluster_enabled") == Some("1") {
        // cluster_state, cluster_size, ...: in CLUSTER INFO, not in INFO.
        let text: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(conn)
            .await
            .context("CLUSTER INFO failed")?;
        facts
            .info
            .extend(punctual::internal::nodes::parse_info(&text));
    }
    let mut config = HashMap::new();
    for pattern in [
        "maxmemory-policy",
        "maxmemory",
        "appendonly",
        "appendfsync",
        "save",
        "busy-reply-threshold",
        "lua-time-limit",
    ] {
        let r: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(pattern)
            .query_async(conn)
            .await;
        match r {
            Ok(m) => config.extend(m),
            Err(e) => {
                facts.config_error = e.to_string();
                config.clear();
                break;
            }
        }
    }
    if facts.config_error.is_empty() {
        facts.config = Some(config);
    }
    for _ in 0..pings {
        let t = Instant::now();
        let _: String = redis::cmd("PING")
            .query_async(conn)
            .await
            .context("PING failed")?;
        facts.rtt.push(t.elapsed());
    }
    Ok(facts)
}

fn config_unknown(check_name: &'static str, facts: &Facts, what: &str) -> Check {
    check(
        check_name,
        Status::Warn,
        format!(
            "cannot read {what}: CONFIG GET was refused ({})",
            facts.config_error.trim()
        ),
        format!("check {what} in your provider's console or redis.conf"),
    )
}

fn version(facts: &Facts) -> Check {
    let Some(v) = facts.info("redis_version") else {
        return check(
            "version",
            Status::Warn,
            "INFO does not say redis_version",
            "punctual needs Redis 7.0 or newer; check the server's version by hand",
        );
    };
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let name = match facts.info("server_name") {
        Some(s) if !s.is_empty() && s != "redis" => format!("{s} (redis_version {v})"),
        _ => format!("Redis {v}"),
    };
    if major >= 7 {
        check(
            "version",
            Status::Ok,
            format!("{name}: 7.0 or newer, as the #!lua scripts need"),
            "",
        )
    } else if (major, minor) >= (6, 2) {
        check(
            "version",
            Status::Fail,
            format!("{name}: has TIME in scripts, but not the #!lua shebang that punctual's scripts start with"),
            "upgrade to Redis 7.0 or newer (the shebang makes Redis refuse a script whole under maxmemory instead of failing it halfway)",
        )
    } else {
        check(
            "version",
            Status::Fail,
            format!("{name}: too old (no #!lua shebang, no ZRANGE BYSCORE)"),
            "upgrade to Redis 7.0 or newer",
        )
    }
}

fn eviction(facts: &Facts) -> Check {
    let Some(policy) = facts.config("maxmemory-policy") else {
        return config_unknown("maxmemory-policy", facts, "maxmemory-policy");
    };
    let fix = "set `maxmemory-policy noeviction` (CONFIG SET maxmemory-policy noeviction, and in redis.conf so a restart keeps it)";
    match policy {
        "noeviction" => check(
            "maxmemory-policy",
            Status::Ok,
            "noeviction: a full Redis refuses writes (punctual reports OOM and retries) and drops nothing",
            "",
        ),
        p if p.starts_with("allkeys-") => check(
            "maxmemory-policy",
            Status::Fail,
            format!("{p}: when memory runs short Redis silently deletes any key, queued jobs and leases included"),
            fix,
        ),
        p => check(
            "maxmemory-policy",
            Status::Warn,
            format!("{p}: punctual sets no TTLs so its keys are not picked, but once no volatile key is left writes fail anyway, and other apps' keys vanish"),
            fix,
        ),
    }
}

fn memory(facts: &Facts) -> Check {
    let used: u64 = facts
        .info("used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let max: Option<u64> = facts
        .config("maxmemory")
        .or_else(|| facts.info("maxmemory"))
        .and_then(|v| v.parse().ok());
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    match max {
        Some(0) => check(
            "memory",
            Status::Warn,
            format!("{:.1} MiB used, no maxmemory limit: if the host runs out of memory the kernel kills Redis", mib(used)),
            "set maxmemory below the host's free RAM, so a full Redis refuses writes (which punctual retries) instead of dying",
        ),
        Some(max) if used as f64 > 0.9 * max as f64 => check(
            "memory",
            Status::Warn,
            format!("{:.1} MiB used of maxmemory {:.1} MiB (over 90%)", mib(used), mib(max)),
            "raise maxmemory or drain queues: a full Redis refuses new jobs",
        ),
        Some(max) => check(
            "memory",
            Status::Ok,
            format!("{:.1} MiB used of maxmemory {:.1} MiB", mib(used), mib(max)),
            "",
        ),
        None => config_unknown("memory", facts, "maxmemory"),
    }
}

fn persistence(facts: &Facts) -> Check {
    let aof = facts
        .config("appendonly")
        .map(|v| v == "yes")
        .or_else(|| facts.info("aof_enabled").map(|v| v == "1"));
    let Some(aof) = aof else {
        return config_unknown("persistence", facts, "appendonly");
    };
    let always_cost = "`appendfsync always` makes Redis fsync the AOF before it answers each write, so no acknowledged job is lost even on a power loss; every write then waits for the disk (about 0.1 ms on a local NVMe SSD, several ms on a network disk), which lowers the writes per second";
    if !aof {
        let snapshots = match facts.config("save") {
            Some("") | None => {
                "RDB snapshots are off too, so a restart loses every job".to_string()
            }
            Some(s) => {
                format!("RDB snapshots (save \"{s}\") keep only what existed at the last snapshot")
            }
        };
        return check(
            "persistence",
            Status::Fail,
            format!("AOF is off: a Redis restart or crash loses the jobs written since the last snapshot; {snapshots}"),
            format!("set `appendonly yes` and `appendfsync always` (CONFIG SET appendonly yes, CONFIG SET appendfsync always, and in redis.conf); {always_cost}"),
        );
    }
    if facts
        .info("aof_last_write_status")
        .is_some_and(|s| s != "ok")
    {
        return check(
            "persistence",
            Status::Fail,
            "AOF is on, but its last write failed (disk full or read-only?): Redis refuses writes until it succeeds",
            "free disk space in Redis's dir and check its log",
        );
    }
    match facts.config("appendfsync") {
        Some("always") => check(
            "persistence",
            Status::Ok,
            "AOF with appendfsync always: every acknowledged job survives a crash or power loss; each write waits for an fsync (about 0.1 ms on NVMe, more on network disks)",
            "",
        ),
        Some("everysec") => check(
            "persistence",
            Status::Warn,
            "AOF with appendfsync everysec: a redis-server crash loses nothing, but a power loss or kernel crash loses up to about 1 s (at worst 2 s) of acknowledged jobs; the fsync costs writes almost nothing",
            format!("for at-least-once across power loss set `appendfsync always`; {always_cost}"),
        ),
        Some("no") => check(
            "persistence",
            Status::Warn,
            "AOF with appendfsync no: the kernel flushes when it likes (about every 30 s on Linux), so a power loss or kernel crash loses up to that much",
            format!("set `appendfsync always` (or everysec, which loses up to about 1 s); {always_cost}"),
        ),
        Some(other) => check("persistence", Status::Warn, format!("AOF on, appendfsync {other:?}"), "set `appendfsync always`"),
        None => config_unknown("persistence", facts, "appendfsync"),
    }
}

fn script_limit(facts: &Facts, batch: u64) -> Check {
    let (name, value) = match (
        facts.config("busy-reply-threshold"),
        facts.config("lua-time-limit"),
    ) {
        (Some(v), _) => ("busy-reply-threshold", v),
        (None, Some(v)) => ("lua-time-limit", v),
        (None, None) => return config_unknown("script-time-limit", facts, "busy-reply-threshold"),
    };
    let Ok(limit) = value.parse::<i64>() else {
        return check(
            "script-time-limit",
            Status::Warn,
            format!("{name} = {value:?} is not a number"),
            "",
        );
    };
    let estimate = tick_estimate_ms(batch);
    let needed = (estimate * 10.0).ceil() as i64;
    if limit <= 0 {
        return check(
            "script-time-limit",
            Status::Ok,
            format!("{name} {limit}: no limit; punctual's scripts are bounded (a tick with promote batch {batch} takes at most about {estimate:.0} ms)"),
            "",
        );
    }
    if limit < needed {
        check(
            "script-time-limit",
            Status::Fail,
            format!("{name} {limit} ms: a scheduler tick with promote batch {batch} can take about {estimate:.0} ms, and past {limit} ms Redis answers every other client BUSY"),
            format!("raise {name} to at least {needed} ms (the default is 5000), or lower promote_batch"),
        )
    } else {
        check(
            "script-time-limit",
            Status::Ok,
            format!("{name} {limit} ms; a scheduler tick with promote batch {batch} takes at most about {estimate:.0} ms"),
            "",
        )
    }
}

fn role(facts: &Facts) -> Check {
    match facts.info("role") {
        Some("master") => {
            let replicas = facts.info("connected_slaves").unwrap_or("0");
            check(
                "role",
                Status::Ok,
                format!("primary with {replicas} connected replica(s)"),
                if replicas != "0" {
                    "replication is asynchronous: a failover can lose the last acknowledged jobs; pair replicas with appendfsync always on the primary"
                } else {
                    ""
                },
            )
        }
        Some("slave") | Some("replica") => check(
            "role",
            Status::Fail,
            "a replica: it refuses writes (READONLY), so enqueue, claim and ack fail",
            "point --redis (PUNCTUAL_REDIS_URL) at the primary",
        ),
        other => check("role", Status::Warn, format!("role {other:?}"), ""),
    }
}

fn cluster(facts: &Facts) -> Check {
    if facts.info("cluster_enabled") != Some("1") {
        return check(
            "cluster",
            Status::Ok,
            "standalone (not a Redis Cluster)",
            "",
        );
    }
    match facts.info("cluster_state") {
        Some("ok") => check(
            "cluster",
            Status::Ok,
            format!(
                "Redis Cluster of {} shard(s): every topic's keys share the hash tag {{topic}}, so each topic lives in one slot and the scripts run unchanged",
                facts.info("cluster_size").unwrap_or("?")
            ),
            "these checks read one node: run doctor against every primary; split a topic too hot for one shard into partitions",
        ),
        state => check(
            "cluster",
            Status::Fail,
            format!(
                "Redis Cluster in state {:?} ({} of 16384 slots served): topics in the other slots fail",
                state.unwrap_or("unknown"),
                facts.info("cluster_slots_ok").unwrap_or("?")
            ),
            "fix the cluster (CLUSTER INFO, redis-cli --cluster check) before running punctual",
        ),
    }
}

fn latency(facts: &Facts) -> Check {
    let mut v: Vec<f64> = facts.rtt.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return check("latency", Status::Warn, "no round trips timed", "");
    }
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let (median, p99, max) = (at(0.5), at(0.99), v[v.len() - 1]);
    let found = format!(
        "round trip median {median:.2} ms, p99 {p99:.2} ms, max {max:.2} ms over {} PINGs",
        v.len()
    );
    if median >= 20.0 {
        check(
            "latency",
            Status::Fail,
            found,
            "every claim, ack and wake-up pays this: run punctual in the same region (ideally the same zone) as Redis",
        )
    } else if median >= 2.0 || p99 >= 10.0 {
        check(
            "latency",
            Status::Warn,
            found,
            "jobs start late by about this much; punctual's target (p99 lateness under 5 ms) needs round trips well under 1 ms: move punctual closer to Redis",
        )
    } else {
        check("latency", Status::Ok, found, "")
    }
}

/// Every check, in the order they are printed.
fn judge(facts: &Facts, batch: u64) -> Vec<Check> {
    vec![
        version(facts),
        role(facts),
        eviction(facts),
        memory(facts),
        persistence(facts),
        script_limit(facts, batch),
        cluster(facts),
        latency(facts),
    ]
}

/// Runs `doctor`.
pub(crate) async fn run(ctx: &Ctx, args: DoctorArgs) -> Result<()> {
    // A cluster may be given as several comma-separated URLs: check the first.
    let url = punctual::internal::split_seeds(&ctx.global.redis_url)
        .first()
        .copied()
        .unwrap_or("")
        .to_string();
    let shown = redact(&url);
    let node = punctual::internal::nodes::Node::connect(&url, Duration::from_secs(5))
        .await
        .map_err(|e| match e.kind() {
            punctual::ErrorKind::InvalidInput => exit::invalid(format!(
                "{e} (expected redis://[user:password@]host:port[/db] or rediss://...)"
            )),
            _ => anyhow::Error::new(e).context(format!("cannot reach Redis at {shown}")),
        })?;
    let mut conn = node.conn();
    let facts = read_facts(&mut conn, args.pings)
        .await
        .with_context(|| format!("cannot read the configuration of Redis at {shown}"))?;
    let mut checks = judge(&facts, args.promote_batch as u64);
    let alerts = crate::health::Alerts {
        overdue: args.overdue_alert,
        ready: args.ready_alert,
    };
    checks.extend(topic_checks(ctx, &alerts).await);
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
    if ctx.json() {
        emit_json(&serde_json::json!({
            "redis": shown,
            "checks": checks,
            "failed": failed,
            "warnings": warned,
        }))?;
    } else {
        emit(&render(&shown, &checks, failed, warned))?;
    }
    if failed > 0 {
        return Err(exit::problem(format!(
            "{failed} of {} checks failed: change what the FAIL lines say",
            checks.len()
        )));
    }
    Ok(())
}

/// The overdue signal and the consumers of every known topic: a FAIL per
/// topic over an alert, a warning per topic with jobs and no live worker,
/// else one ok line.
async fn topic_checks(ctx: &Ctx, alerts: &crate::health::Alerts) -> Vec<Check> {
    let read = async {
        let queue = ctx.queue().await?;
        let topics = queue.topics().await?;
        let n = topics.len();
        let procs = queue.processes().await?.len();
        anyhow::Ok((
            crate::health::topics(&queue, topics, alerts).await?,
            n,
            procs,
        ))
    };
    let (all, n, procs) = match read.await {
        Ok(r) => r,
        Err(e) => {
            return vec![check(
                "topics",
                Status::Warn,
                format!("cannot read the topics and the process registry: {e:#}"),
                "check that --redis and --prefix are the ones punctual serve uses",
            )]
        }
    };
    let mut out = Vec::new();
    for (s, h) in &all {
        if !h.reasons.is_empty() {
            let advice = if s.overdue_ms.is_some() && h.schedulers == 0 {
                "start a scheduler for it (punctual serve with schedulers >= 1 and the topic in its config)"
            } else if h.workers == 0 {
                "start a worker for it (punctual serve with workers >= 1 and the topic in its config)"
            } else {
                "it cannot keep up: look at the logs of its schedulers and workers, add workers or concurrency (punctual ps lists them)"
            };
            out.push(check("topic", Status::Fail, h.reasons.join("; "), advice));
        }
        let waiting = s.pool + s.ready + s.running;
        if h.workers == 0 && waiting > 0 && !s.paused {
            out.push(check(
                "topic",
                Status::Warn,
                format!(
                    "topic {}: {} jobs waiting or running; no worker alive",
                    s.topic, waiting
                ),
                "start a worker for it, or ignore this if none should run yet",
            ));
        }
    }
    if out.is_empty() {
        out.push(check(
            "topics",
            Status::Ok,
            format!("{n} topic(s), none overdue or without a worker; {procs} punctual process(es) alive"),
            "",
        ));
    }
    out
}

fn render(url: &str, checks: &[Check], failed: usize, warned: usize) -> String {
    let mut out = format!("punctual doctor: {url}\n");
    for c in checks {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        out.push_str(&format!("{status:<5} {:<18} {}", c.check, c.found));
        if !c.advice.is_empty() {
            out.push_str(&format!(". Fix: {}", c.advice));
        }
        out.push('\n');
    }
    out.push_str(&match (failed, warned) {
        (0, 0) => "all checks passed\n".to_string(),
        (0, w) => format!("no check failed; {w} warning(s)\n"),
        (f, w) => format!("{f} check(s) failed, {w} warning(s)\n"),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(info: &[(&str, &str)], config: &[(&str, &str)]) -> Facts {
        Facts {
            info: info
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            config: Some(
                config
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            config_error: String::new(),
            rtt: vec![Duration::from_micros(100); 10],
        }
    }

    #[test]
    fn versions_before_7_fail() {
        let v = |s| version(&facts(&[("redis_version", s)], &[])).status;
        assert_eq!(v("7.0.15"), Status::Ok);
        assert_eq!(v("7.2.4"), Status::Ok);
        assert_eq!(v("6.2.14"), Status::Fail);
        assert_eq!(v("5.0.7"), Status::Fail);
    }

    #[test]
    fn eviction_policies_are_judged() {
        let p = |s| eviction(&facts(&[], &[("maxmemory-policy", s)])).status;
        assert_eq!(p("noeviction"), Status::Ok);
        assert_eq!(p("allkeys-lru"), Status::Fail);
        assert_eq!(p("allkeys-random"), Status::Fail);
        assert_eq!(p("volatile-lru"), Status::Warn);
    }

    #[test]
    fn script_limits_below_ten_ticks_fail() {
        let s = |v, batch| script_limit(&facts(&[], &[("busy-reply-threshold", v)]), batch).status;
        assert_eq!(s("5000", 1000), Status::Ok);
        assert_eq!(s("0", 1000), Status::Ok);
        // A tick of 1000 may take ~20 ms: 100 ms leaves too little room.
        assert_eq!(s("100", 1000), Status::Fail);
        assert_eq!(s("100", 200), Status::Ok);
    }

    #[test]
    fn a_cluster_is_fine_when_it_serves_every_slot() {
        let f = |state| {
            facts(
                &[
                    ("cluster_enabled", "1"),
                    ("cluster_state", state),
                    ("cluster_size", "3"),
                ],
                &[],
            )
        };
        let ok = cluster(&f("ok"));
        assert_eq!(ok.status, Status::Ok);
        assert!(ok.found.contains("3 shard(s)"), "{}", ok.found);
        assert_eq!(cluster(&f("fail")).status, Status::Fail);
        assert_eq!(
            cluster(&facts(&[("cluster_enabled", "0")], &[])).status,
            Status::Ok
        );
    }

    #[test]
    fn unreadable_config_is_a_warning_not_a_pass() {
        let mut f = facts(&[("redis_version", "7.0.0")], &[]);
        f.config = None;
        f.config_error = "ERR unknown command 'CONFIG'".into();
        let c = eviction(&f);
        assert_eq!(c.status, Status::Warn);
        assert!(c.found.contains("CONFIG GET was refused"), "{}", c.found);
    }
}
