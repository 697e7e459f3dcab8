//! The `resident` phase: a no-op exec handler against a no-op resident
//! one, in the same language.

use anyhow::{Context, Result};
use serde::Serialize;

use super::serve::{serve_path, Handler};
use crate::harness::{status, which};
use crate::probe::round;
use crate::{Bench, Report};

/// A no-op resident handler in PHP: the protocol in 20 lines, with its
/// look-ahead (it takes no cancels: the bench sends none).
const PHP_NOOP: &str = r#"<?php
// A no-op resident handler (docs/RESIDENT.md): every job is done.
$jobs = fopen('php://fd/' . (getenv('PUNCTUAL_JOBS_FD') ?: 3), 'r');
$replies = fopen('php://fd/' . (getenv('PUNCTUAL_REPLIES_FD') ?: 4), 'w');
fwrite($replies, "{\"type\":\"ready\",\"protocol\":1,\"inflight\":1,\"lookahead\":16}\n");
fflush($replies);
while (($line = fgets($jobs)) !== false) {
    $job = json_decode($line, true);
    if (($job['type'] ?? '') !== 'job') {
        continue;
    }
    // Written ahead and reached too late: not started.
    $late = isset($job['start_by_us']) && intdiv(hrtime(true), 1000) > $job['start_by_us'];
    fwrite($replies, json_encode(['type' => $late ? 'skip' : 'done', 'id' => $job['id']]) . "\n");
    fflush($replies);
}
exit(0);
"#;

/// The same in Python, where PHP is not installed.
const PYTHON_NOOP: &str = r#"import json, os, time
jobs = os.fdopen(int(os.environ.get("PUNCTUAL_JOBS_FD", "3")), "rb")
replies = os.fdopen(int(os.environ.get("PUNCTUAL_REPLIES_FD", "4")), "w")
replies.write('{"type":"ready","protocol":1,"inflight":1,"lookahead":16}\n')
replies.flush()
for line in jobs:
    job = json.loads(line)
    if job.get("type") != "job":
        continue
    late = "start_by_us" in job and time.monotonic_ns() // 1000 > job["start_by_us"]
    replies.write(json.dumps({"type": "skip" if late else "done", "id": job["id"]}) + "\n")
    replies.flush()
"#;

/// The resident phase: in one run, a no-op exec handler (`php -r ''`, or
/// `python3 -c ''` without PHP) on --serve-n jobs, then a no-op resident
/// handler in the same language on --resident-n jobs; jobs/s, serve's CPU
/// per job (handler processes included) and the ratio.
pub(crate) async fn resident(b: &Bench) -> Result<Report> {
    let dir = tempfile::Builder::new()
        .prefix("punctual-bench-resident-")
        .tempdir()?;
    let (lang, exec_argv, resident_argv) = match which("php") {
        Some(php) => {
            let script = dir.path().join("noop.php");
            std::fs::write(&script, PHP_NOOP)?;
            (
                "php",
                vec![php.clone(), "-r".into(), String::new()],
                vec![php, script.display().to_string()],
            )
        }
        None => {
            let py = which("python3").context("the resident phase needs php or python3 on PATH")?;
            let script = dir.path().join("noop.py");
            std::fs::write(&script, PYTHON_NOOP)?;
            (
                "python",
                vec![py.clone(), "-c".into(), String::new()],
                vec![py, script.display().to_string()],
            )
        }
    };
    let exec = Handler {
        toml: format!("exec = {exec_argv:?}"),
        label: format!("exec {lang} no-op"),
        text: format!("exec {exec_argv:?} per job"),
    };
    let processes = b.args.resident_processes;
    let res = Handler {
        toml: format!("resident = {resident_argv:?}\nprocesses = {processes}"),
        label: format!("resident {lang} no-op"),
        text: format!("resident {lang} no-op, {processes} per worker"),
    };
    let e = serve_path(b, "resident-exec", b.args.serve_n, &exec, dir.path()).await?;
    b.clean().await?;
    let r = serve_path(b, "resident", b.args.resident_n, &res, dir.path()).await?;
    let f = |rep: &Report, k: &str| {
        rep.get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    };
    let (ej, rj) = (f(&e, "jobs_per_s"), f(&r, "jobs_per_s"));
    let (ec, rc) = (f(&e, "serve_cpu_us_per_job"), f(&r, "serve_cpu_us_per_job"));
    let ratio = if ej > 0.0 { rj / ej } else { 0.0 };
    let ok = e.ok() && r.ok();
    let (workers, concurrency) = b.args.serve_workers;
    #[derive(Serialize)]
    struct Resident<'a> {
        language: &'a str,
        workers: u64,
        concurrency: u64,
        processes: u64,
        exec_n: u64,
        exec_jobs_per_s: f64,
        exec_cpu_us_per_job: f64,
        resident_n: u64,
        resident_jobs_per_s: f64,
        resident_cpu_us_per_job: f64,
        ratio: f64,
        jobs_per_s: f64,
        ok: bool,
        /// The two runs' lines, when not ok.
        #[serde(skip_serializing_if = "Option::is_none")]
        exec: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        resident_run: Option<String>,
    }
    let mut rep = Report::of(
        "resident",
        &Resident {
            language: lang,
            workers: workers as u64,
            concurrency: concurrency as u64,
            processes,
            exec_n: b.args.serve_n,
            exec_jobs_per_s: round(ej, 1),
            exec_cpu_us_per_job: ec,
            resident_n: b.args.resident_n,
            resident_jobs_per_s: round(rj, 1),
            resident_cpu_us_per_job: rc,
            ratio: round(ratio, 1),
            jobs_per_s: round(rj, 1),
            ok,
            exec: (!ok).then(|| e.line()),
            resident_run: (!ok).then(|| r.line()),
        },
    );
    rep.text = format!(
        "{}\n{}\n{:<10} resident {lang} no-op: {rj:.0} jobs/s, {rc:.0} µs CPU/job; exec {lang} no-op: {ej:.0} jobs/s, {ec:.0} µs CPU/job: {ratio:.1}x the jobs/s  {}",
        e.text,
        r.text,
        "resident",
        status(ok)
    );
    Ok(rep)
}
