//! The `serve` phase, and the `serve` path the `resident` and `handlers`
//! phases run too: `punctual serve` (this binary) as a child process.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use punctual::{EnqueueStatus, Job};
use serde::Serialize;

use crate::harness::{payload, status, which, Layout, Left};
use crate::probe::{round, Profile, Snapshot};
use crate::stats::per_s;
use crate::target::{PREFIX, TOPIC};
use crate::{Bench, Report};

/// The `serve` path: `punctual serve` (this binary) with an exec handler
/// running `true`; --serve-n jobs due now; time until all are done.
pub(crate) async fn serve(b: &Bench) -> Result<Report> {
    let true_path = which("true").unwrap_or_else(|| "true".into());
    let handler = Handler {
        toml: format!("exec = [{true_path:?}]"),
        label: "exec true".into(),
        text: "exec `true` per job".into(),
    };
    let dir = tempfile::Builder::new()
        .prefix("punctual-bench-serve-")
        .tempdir()?;
    serve_path(b, "serve", b.args.serve_n, &handler, dir.path()).await
}

/// A handler of the `serve` path: its TOML lines and how reports name it.
pub(crate) struct Handler {
    pub toml: String,
    pub label: String,
    pub text: String,
}

/// `punctual serve` (this binary) with `handler` on `n` jobs due now; time
/// until all are done. serve's own CPU and its handlers' are read from
/// /proc right before the jobs are enqueued and right after the last is
/// done (start and stop left out).
pub(crate) async fn serve_path(
    b: &Bench,
    phase: &str,
    n: u64,
    handler: &Handler,
    dir: &std::path::Path,
) -> Result<Report> {
    let (workers, concurrency) = b.args.serve_workers;
    let config = dir.join(format!("{phase}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"redis = {url:?}
prefix = {PREFIX:?}
workers = {workers}
concurrency = {concurrency}
schedulers = 1
lease = "30s"
shutdown_timeout = "10s"

[topics.{TOPIC}]
{handler}
timeout = "30s"
partitions = {partitions}
"#,
            url = b.target.url,
            handler = handler.toml,
            partitions = b.args.partitions,
        ),
    )?;
    let log = dir.join(format!("{phase}.log"));
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PUNCTUAL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("PUNCTUAL_LOG", "warn");
    let mut child = cmd.spawn().context("cannot start punctual serve")?;
    let tail = |log: &std::path::Path| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    };
    if let Err(e) = b.wait_listening(workers as u64, true, phase).await {
        let _ = child.start_kill();
        bail!("{e:#}; serve's log: {}", tail(&log));
    }

    let producer = b.queue().await?;
    let jobs: Vec<Job> = (0..n).map(|i| Job::new(payload(i))).collect();
    let bar = b.bar(n, phase);
    let deadline = Instant::now() + Duration::from_secs(120) + Duration::from_millis(10 * n);
    let pid = child.id();
    let tree_before = pid.and_then(crate::proctree::tree_cpu);
    let before = Snapshot::take(&b.target).await?;
    let t0 = Instant::now();
    let enqueued = producer.enqueue_batch(TOPIC, jobs).await?;
    let created = enqueued
        .iter()
        .filter(|e| e.status == EnqueueStatus::Created)
        .count() as u64;
    let mut finished = false;
    while Instant::now() < deadline {
        // Every job was enqueued above: the records left are the jobs not
        // yet acked (one HLEN per poll, the least Redis work).
        let left = b.target.records().await?;
        bar.set_position(n.saturating_sub(left));
        if left == 0 {
            finished = true;
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "punctual serve exited during the bench ({status}); its log: {}",
                tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = t0.elapsed();
    let tree = match (tree_before, pid.and_then(crate::proctree::tree_cpu)) {
        (Some(a), Some(z)) => Some(z.since(&a)),
        _ => None,
    };
    let after = Snapshot::take(&b.target).await?;
    bar.finish_and_clear();
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let cpu = Snapshot::take(&b.target).await?.children_cpu_since(&before);
    let stats = b.target.stats().await?;
    let get = |k: &str| stats.counters.get(k).copied().unwrap_or(0);
    let done = get("done");
    let sets = [stats.pool, stats.ready, stats.running, stats.dead];
    let records = b.target.records().await?;
    let ok = finished
        && created == n
        && done == n
        && get("retried") == 0
        && get("dead") == 0
        && sets == [0; 4]
        && records == 0;
    let profile = after.profile(&before, done, elapsed);
    /// The counts of a serve run that is not ok.
    #[derive(Serialize)]
    struct Done {
        done: u64,
        retried: u64,
        dead: u64,
        left: Left,
    }
    #[derive(Serialize)]
    struct Serve<'a> {
        n: u64,
        workers: u64,
        concurrency: u64,
        handler: &'a str,
        jobs_per_s: f64,
        secs: f64,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(flatten)]
        done: Option<Done>,
        serve_cpu_us_per_job: f64,
        /// serve's own processes (supervisor, workers, scheduler) from
        /// the first job enqueued to the last done, per job.
        #[serde(skip_serializing_if = "Option::is_none")]
        serve_own_cpu_us_per_job: Option<f64>,
        /// The handlers' processes over the same span, per job.
        #[serde(skip_serializing_if = "Option::is_none")]
        handler_cpu_us_per_job: Option<f64>,
        profile: Profile,
    }
    let per_job = |us: u64| round(us as f64 / n.max(1) as f64, 1);
    let mut r = Report::of(
        phase,
        &Serve {
            n,
            workers: workers as u64,
            concurrency: concurrency as u64,
            handler: handler.label.as_str(),
            jobs_per_s: per_s(done, elapsed),
            secs: round(elapsed.as_secs_f64(), 3),
            layout: b.layout(),
            ok,
            done: (!ok).then(|| Done {
                done,
                retried: get("retried"),
                dead: get("dead"),
                left: Left::of(sets, Some(records)),
            }),
            serve_cpu_us_per_job: round(cpu as f64 / n.max(1) as f64, 1),
            serve_own_cpu_us_per_job: tree.map(|t| per_job(t.serve_us)),
            handler_cpu_us_per_job: tree.map(|t| per_job(t.handlers_us)),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} punctual serve, {workers} workers x {concurrency}, {}: {n} jobs in {:.3} s: {:.0} jobs/s; serve's processes used {:.0} µs CPU per job (start and stop included){}  {}\n           Redis {:.2} µs/job ({:.0}% busy), {:.1} script calls/1k jobs",
        phase,
        handler.text,
        elapsed.as_secs_f64(),
        per_s(done, elapsed),
        cpu as f64 / n.max(1) as f64,
        tree.map(|t| format!(
            "; while the jobs ran, serve itself {:.1} µs, its handlers {:.1} µs",
            per_job(t.serve_us),
            per_job(t.handlers_us)
        ))
        .unwrap_or_default(),
        status(ok),
        profile.redis_cpu_us_per_job,
        profile.redis_busy_pct,
        profile.script_calls_per_1k_jobs,
    );
    Ok(r)
}
