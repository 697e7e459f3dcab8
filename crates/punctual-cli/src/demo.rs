//! `punctual demo`: the main job in one command. Uses the Redis at --redis,
//! or a private `redis-server` in a temp dir when none answers; pushes jobs
//! with delays; runs `serve` with an exec handler (this binary's hidden
//! `__demo-handler`); prints each job as it runs with its lateness; ends with
//! a summary and removes everything it wrote.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use punctual::{Job, Queue};
use rand::Rng;

use crate::input::parse_duration;

/// `punctual demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// How many jobs to push.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub jobs: u32,

    /// Delays are spread from 0 to this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub max_delay: Duration,

    /// Worker processes for the demo's `serve`.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
}

const TOPIC: &str = "demo";
const LOG_ENV: &str = "PUNCTUAL_DEMO_LOG";

async fn reachable(url: &str) -> bool {
    Queue::builder(url)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
        .connect()
        .await
        .is_ok()
}

/// Runs the demo.
pub(crate) async fn run(redis_url: &str, args: DemoArgs) -> Result<()> {
    let (url, _private) = if reachable(redis_url).await {
        println!(
            "Using the Redis at {}",
            punctual::internal::redact(redis_url)
        );
        (redis_url.to_string(), None)
    } else {
        let (url, p) = punctual_redis_server::start("punctual-demo-redis-")?;
        println!(
            "No Redis answers at {}; started a private redis-server at {url}",
            punctual::internal::redact(redis_url)
        );
        (url, Some(p))
    };
    // A prefix of its own, so the demo never touches other data.
    let prefix = format!("punctual-demo-{}", std::process::id());
    let queue = Queue::builder(url.as_str())
        .prefix(prefix.as_str())
        .connect()
        .await?;
    let dir = tempfile::Builder::new()
        .prefix("punctual-demo-")
        .tempdir()?;
    let log = dir.path().join("ran.log");
    let config = dir.path().join("punctual.toml");
    let exe = std::env::current_exe()?;
    std::fs::write(
        &config,
        format!(
            r#"redis = {url:?}
prefix = {prefix:?}
workers = {workers}
concurrency = 8
schedulers = 1
lease = "5s"
shutdown_timeout = "5s"

[topics.{TOPIC}]
exec = [{exe:?}, "__demo-handler"]
timeout = "10s"
max_attempts = 3
backoff = ["1s"]
env = {{ {LOG_ENV} = {log:?} }}
"#,
            workers = args.workers.max(1),
            exe = exe.display().to_string(),
            log = log.display().to_string(),
        ),
    )?;

    let mut serve = tokio::process::Command::new(&exe)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("PUNCTUAL_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .context("cannot start punctual serve")?;

    let mut rng = rand::rng();
    let max_ms = args.max_delay.as_millis().max(1) as u64;
    let jobs: Vec<Job> = (0..args.jobs)
        .map(|i| {
            let delay = Duration::from_millis(rng.random_range(0..=max_ms));
            Job::new(format!("{{\"order\":{}}}", 10_000 + i))
                .id(format!("order:{}", 10_000 + i))
                .delay(delay)
        })
        .collect();
    queue.enqueue_batch(TOPIC, jobs).await?;
    println!(
        "Pushed {} jobs due over the next {}; `punctual serve` runs them:",
        args.jobs,
        humantime::format_duration(args.max_delay)
    );

    let started = Instant::now();
    let deadline = args.max_delay + Duration::from_secs(30);
    let outcome = loop {
        let s = queue.stats(TOPIC).await?;
        if s.pool + s.ready + s.running + s.dead == 0 {
            break Ok(());
        }
        if let Ok(Some(status)) = serve.try_wait() {
            break Err(anyhow::anyhow!("punctual serve exited early: {status}"));
        }
        if started.elapsed() > deadline {
            break Err(anyhow::anyhow!(
                "jobs still pending after {deadline:?}: {s:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    if let Some(pid) = serve.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), serve.wait()).await;
    let summary = summarize(&log, args.jobs as usize);
    if let Err(e) = cleanup(&url, &prefix).await {
        eprintln!("punctual: warning: could not remove the demo's keys ({prefix}:*): {e}");
    }
    outcome?;
    println!("{}", summary?);
    Ok(())
}

fn summarize(log: &Path, expected: usize) -> Result<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut ids = std::collections::HashSet::new();
    let mut late: Vec<f64> = Vec::new();
    for line in text.lines() {
        let mut f = line.split('\t');
        if let (Some(id), Some(ms)) = (f.next(), f.next().and_then(|v| v.parse::<f64>().ok())) {
            ids.insert(id.to_string());
            late.push(ms);
        }
    }
    if late.is_empty() {
        bail!("no job ran");
    }
    late.sort_by(f64::total_cmp);
    let pct = |p: f64| late[((late.len() - 1) as f64 * p).round() as usize];
    let early = late.iter().filter(|l| **l < 0.0).count();
    Ok(format!(
        "\nDone: {}/{expected} jobs ran ({} runs). Lateness (start - due): min {:.1} ms, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {early} started early.",
        ids.len(),
        late.len(),
        late[0],
        pct(0.5),
        pct(0.99),
        late[late.len() - 1],
    ))
}

/// Deletes every key under the demo's prefix, on every master.
async fn cleanup(url: &str, prefix: &str) -> punctual::Result<()> {
    let t = Duration::from_secs(5);
    let nodes = punctual::internal::nodes::Nodes::connect(url, t, t).await?;
    nodes.delete_matching(&format!("{prefix}:*")).await?;
    Ok(())
}

/// The demo's exec handler: prints the job and appends "id\tlateness" to the
/// demo's log.
pub(crate) fn handler() -> Result<()> {
    let mut payload = String::new();
    std::io::stdin().read_to_string(&mut payload)?;
    let id = std::env::var("PUNCTUAL_JOB_ID").unwrap_or_default();
    let late = std::env::var("PUNCTUAL_LATENESS_MS").unwrap_or_default();
    let attempt = std::env::var("PUNCTUAL_ATTEMPT").unwrap_or_default();
    println!("  ran {id:<12} {payload:<16} lateness {late:>7} ms  (attempt {attempt})");
    if let Ok(path) = std::env::var(LOG_ENV) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        // One write(2) per line: writeln! on a File writes each piece of
        // the format on its own, and the pieces of two handlers running at
        // once interleaved in the log (the summary then counted 4 of 6).
        f.write_all(format!("{id}\t{late}\n").as_bytes())?;
    }
    Ok(())
}
