//! The `calls` phase's enqueue from each client: the Rust library's
//! `Queue::enqueue` and the PHP, Python and Node producers' one-job
//! `enqueue`, N calls each, in one run.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use punctual::{EnqueueStatus, Job};
use serde_json::{json, Map, Value};

use super::handlers::clients_dir;
use crate::harness::which;
use crate::probe::{round, Snapshot};
use crate::target::{PREFIX, TOPIC};
use crate::Bench;

/// The clients' loops (clients/*/bench): language, interpreter, the loop's
/// script under clients/, and the check that its Redis client is installed
/// (run in the script's package directory).
const CLIENTS: [(&str, &str, &str, &[&str]); 3] = [
    (
        "php",
        "php",
        "php/bench/enqueue-each.php",
        &["-r", "exit(extension_loaded('redis') ? 0 : 1);"],
    ),
    (
        "python",
        "python3",
        "python/bench/enqueue_each.py",
        &["-c", "import redis"],
    ),
    (
        "node",
        "node",
        "node/bench/enqueue-each.js",
        &["-e", "require.resolve('redis')"],
    ),
];

/// What one side's N calls cost: Redis µs per call (the scripts' usec in
/// INFO commandstats), the calls Redis saw, jobs/s of the loop and the
/// jobs created.
fn side(n: u64, usec: u64, calls: u64, secs: f64, created: u64) -> Value {
    json!({
        "redis_us_per_call": round(usec as f64 / n.max(1) as f64, 2),
        "script_calls": calls,
        "jobs_per_s": round(n as f64 / secs.max(1e-9), 1),
        "created": created,
    })
}

/// The jobs the bench topic counts as enqueued.
async fn enqueued(b: &Bench) -> Result<u64> {
    Ok(b.target
        .queue
        .stats(TOPIC)
        .await?
        .counters
        .get("enqueued")
        .copied()
        .unwrap_or(0))
}

/// Rust first (its connection loads the script, so no client's first call
/// compiles it), then each client on a clean topic: N jobs due now,
/// payloads `payload-<i>`, one enqueue call each. Per side Redis µs per
/// call and jobs/s; per client the ratio of its µs per call to Rust's. A
/// client whose interpreter or Redis client is missing is reported as
/// skipped (and warned about); one that runs and fails is an error. Returns
/// the sides and whether every side that ran created its N jobs.
pub(crate) async fn client_enqueue(b: &Bench, n: u64) -> Result<(Map<String, Value>, bool)> {
    let mut sides = Map::new();
    let mut ok = true;
    if b.target.cluster || b.target.parts.len() > 1 {
        let why = "runs on one Redis and an unpartitioned topic only";
        eprintln!("punctual bench: warning: calls: client enqueue SKIPPED: {why}");
        sides.insert("skipped".into(), json!(why));
        return Ok((sides, true));
    }
    b.clean().await?;
    let q = b.queue().await?;
    let before = Snapshot::take(&b.target).await?;
    let t0 = Instant::now();
    let mut created = 0u64;
    for i in 0..n {
        let e = q
            .enqueue(TOPIC, Job::new(format!("payload-{i:08}")))
            .await?;
        created += u64::from(e.status == EnqueueStatus::Created);
    }
    let secs = t0.elapsed().as_secs_f64();
    let after = Snapshot::take(&b.target).await?;
    let (calls, usec) = after.scripts_since(&before);
    ok &= created == n;
    let rust_us = usec as f64 / n.max(1) as f64;
    sides.insert("rust".into(), side(n, usec, calls, secs, created));

    let clients = clients_dir(b);
    for (lang, program, script, probe) in CLIENTS {
        let skip = |why: String, sides: &mut Map<String, Value>| {
            eprintln!("punctual bench: warning: calls: {lang} enqueue SKIPPED: {why}");
            sides.insert(lang.into(), json!({ "skipped": why }));
        };
        let Some(interp) = which(program) else {
            skip(format!("{program} not installed (not on PATH)"), &mut sides);
            continue;
        };
        let path = clients.join(script);
        let pkg = clients.join(lang);
        if !path.is_file() {
            skip(
                format!(
                    "{} is missing (pass --clients DIR, the clients/ directory of the source tree)",
                    path.display()
                ),
                &mut sides,
            );
            continue;
        }
        let has_client = tokio::process::Command::new(&interp)
            .args(probe)
            .current_dir(&pkg)
            .output()
            .await
            .is_ok_and(|o| o.status.success());
        if !has_client {
            skip(
                format!("{program} has no Redis client for the {lang} package"),
                &mut sides,
            );
            continue;
        }
        b.clean().await?;
        let before = Snapshot::take(&b.target).await?;
        let secs = run(&interp, &path, &pkg, &b.target.url, n)
            .await
            .with_context(|| format!("the {lang} client's enqueue loop"))?;
        let after = Snapshot::take(&b.target).await?;
        let (calls, usec) = after.scripts_since(&before);
        let created = enqueued(b).await?;
        ok &= created == n;
        let mut v = side(n, usec, calls, secs, created);
        let us = usec as f64 / n.max(1) as f64;
        if rust_us > 0.0 {
            v["ratio_to_rust"] = json!(round(us / rust_us, 2));
        }
        sides.insert(lang.into(), v);
    }
    b.clean().await?;
    Ok((sides, ok))
}

/// Runs a client's loop on `n` jobs against `url` with the bench's prefix
/// and topic; returns the seconds it reports for its loop.
async fn run(interp: &str, script: &Path, pkg: &Path, url: &str, n: u64) -> Result<f64> {
    let out = tokio::process::Command::new(interp)
        .arg(script)
        .arg(TOPIC)
        .arg(n.to_string())
        .current_dir(pkg)
        .env("PUNCTUAL_REDIS_URL", url)
        .env("PUNCTUAL_PREFIX", PREFIX)
        .env("PYTHONPATH", pkg)
        .output()
        .await
        .with_context(|| format!("cannot run {interp}"))?;
    if !out.status.success() {
        bail!(
            "{interp} {} exited with {}: {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<f64>().ok())
        .with_context(|| format!("no loop time in its output {text:?}"))
}

/// The text line of the client sides: per side µs per call, jobs/s and the
/// ratio to Rust, or why it was skipped.
pub(crate) fn line(sides: &Map<String, Value>) -> String {
    if let Some(why) = sides.get("skipped").and_then(Value::as_str) {
        return format!("client enqueue SKIPPED: {why}");
    }
    let parts: Vec<String> = ["rust", "php", "python", "node"]
        .iter()
        .filter_map(|lang| Some((lang, sides.get(*lang)?)))
        .map(|(lang, v)| match v.get("skipped").and_then(Value::as_str) {
            Some(why) => format!("{lang} SKIPPED ({why})"),
            None => {
                let ratio = v
                    .get("ratio_to_rust")
                    .map(|r| format!(", {r}× Rust's"))
                    .unwrap_or_default();
                format!(
                    "{lang} {} µs{ratio}, {:.0} jobs/s",
                    v["redis_us_per_call"],
                    v["jobs_per_s"].as_f64().unwrap_or(0.0)
                )
            }
        })
        .collect();
    format!(
        "one-job enqueue per client, Redis µs per call: {}",
        parts.join("; ")
    )
}
