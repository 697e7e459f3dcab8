//! The `handlers` phase: what each kind of handler costs `punctual serve`
//! per job, a no-op of each kind, one after the other in one run.
//!
//! - `in_process`: the library's `Worker` with a Rust no-op (the bench's own
//!   consumer, two workers and a scheduler in this process, as `serve` runs
//!   a Rust handler of a program embedding `punctual_cli`): this process's
//!   CPU per job.
//! - `exec`: `serve` running `true` per job.
//! - `http`: `serve` POSTing each job to a no-op HTTP server of the bench
//!   (answers 200 at once, on kept-alive connections).
//! - `resident_php`, `resident_python`, `resident_node`: `serve` with the
//!   client packages' resident loops (clients/*/) and a no-op handler; each
//!   skipped, and saying so in its entry, when its interpreter or the
//!   clients directory is missing.
//!
//! For the serve runs, serve's own CPU (its supervisor, worker and scheduler
//! processes, read from /proc) is apart from its handlers'.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::drain::drain_n;
use super::serve::{serve_path, Handler};
use crate::harness::which;
use crate::{Bench, Report};

/// Where the client packages are: --clients, else the source tree this
/// binary was built from.
pub(crate) fn clients_dir(b: &Bench) -> PathBuf {
    b.args
        .clients
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients"))
}

/// A no-op resident handler on the PHP client's `Punctual\Worker`.
fn php_noop(clients: &Path) -> String {
    format!(
        r#"<?php
spl_autoload_register(static function (string $class): void {{
    $file = {src:?} . '/' . str_replace('\\', '/', substr($class, strlen('Punctual\\'))) . '.php';
    if (str_starts_with($class, 'Punctual\\') && is_file($file)) {{
        require $file;
    }}
}});
Punctual\Worker::run(static function (Punctual\Job $job): void {{}});
"#,
        src = clients.join("php/src").display().to_string()
    )
}

/// A no-op resident handler on the Python client's worker loop, imported
/// from the package (which needs redis-py, as the client does).
fn python_noop(clients: &Path) -> String {
    format!(
        r#"import sys
sys.path.insert(0, {path:?})
from punctual.worker import run
run(lambda job: None)
"#,
        path = clients.join("python").display().to_string()
    )
}

/// Jobs at once in each Node resident program (the client's `inflight`):
/// with the default 2 workers x 2 programs, 64 in all, the concurrency of
/// BullMQ's worker in `run-bullmq.sh`.
const NODE_INFLIGHT: u64 = 16;

/// A no-op resident handler on the Node client's `run`.
fn node_noop(clients: &Path) -> String {
    format!(
        r#"const {{ run }} = require({path:?});
run(async () => {{}}, {{ inflight: {NODE_INFLIGHT} }});
"#,
        path = clients.join("node/lib/worker.js").display().to_string()
    )
}

/// The resident languages: name, interpreter, the client file it needs,
/// the script's extension and its text.
type Script = fn(&Path) -> String;
const RESIDENT: [(&str, &str, &str, &str, Script); 3] = [
    ("php", "php", "php/src/Worker.php", "php", php_noop),
    (
        "python",
        "python3",
        "python/punctual/worker.py",
        "py",
        python_noop,
    ),
    ("node", "node", "node/lib/worker.js", "js", node_noop),
];

/// A no-op HTTP server: answers every request 200 with an empty body, on
/// kept-alive connections. Counts the requests.
struct NoopHttp {
    addr: std::net::SocketAddr,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl NoopHttp {
    async fn start() -> Result<NoopHttp> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let count = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let _ = serve_conn(conn, &count).await;
                });
            }
        });
        Ok(NoopHttp {
            addr,
            requests,
            task,
        })
    }
}

impl Drop for NoopHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One HTTP/1.1 connection: requests with a Content-Length body, each
/// answered 200.
async fn serve_conn(mut conn: tokio::net::TcpStream, count: &AtomicU64) -> Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        // A whole head, then its body.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let got = conn.read(&mut chunk).await?;
            if got == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..got]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let got = conn.read(&mut chunk).await?;
            if got == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..got]);
        }
        buf.drain(..head_end + len);
        count.fetch_add(1, Ordering::Relaxed);
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await?;
    }
}

/// The fields of one kind's entry, from a serve run's line.
fn entry(r: &Report, n: u64) -> Value {
    let g = |k: &str| r.get(k).cloned().unwrap_or(Value::Null);
    let redis = r
        .get("profile")
        .and_then(|p| p.get("redis_cpu_us_per_job"))
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "n": n,
        "jobs_per_s": g("jobs_per_s"),
        "serve_cpu_us_per_job": g("serve_own_cpu_us_per_job"),
        "handler_cpu_us_per_job": g("handler_cpu_us_per_job"),
        "redis_cpu_us_per_job": redis,
        "ok": r.ok(),
    })
}

/// `handlers`: a no-op of each handler kind, one after the other; per
/// kind, jobs/s and CPU per job (serve's own, the handler's, Redis's).
pub(crate) async fn handlers(b: &Bench) -> Result<Report> {
    let n = b.args.handler_n;
    let dir = tempfile::Builder::new()
        .prefix("punctual-bench-handlers-")
        .tempdir()?;
    let mut kinds = Map::new();
    let mut ok = true;
    let mut text = Vec::new();
    let mut note = |name: &str, v: Value, kinds: &mut Map<String, Value>| {
        let line = match v.get("skipped").and_then(Value::as_str) {
            Some(why) => {
                eprintln!("punctual bench: warning: handlers: {name} SKIPPED: {why}");
                format!("{name:<16} SKIPPED: {why}")
            }
            None => format!(
                "{name:<16} {:>9.0} jobs/s; CPU µs per job: serve {}, handler {}, Redis {}",
                v["jobs_per_s"].as_f64().unwrap_or(0.0),
                v["serve_cpu_us_per_job"],
                v["handler_cpu_us_per_job"],
                v["redis_cpu_us_per_job"],
            ),
        };
        text.push(format!("           {line}"));
        kinds.insert(name.to_string(), v);
    };

    let kinds_asked = &b.args.handler_kinds;
    let asked = |k: &str| kinds_asked.is_empty() || kinds_asked.iter().any(|a| a == k);
    let left_out = || json!({ "skipped": "not in --handler-kinds" });

    // In-process: the library's Worker, a Rust no-op, in this process.
    if !asked("in_process") {
        note("in_process", left_out(), &mut kinds);
    } else {
        let d = drain_n(b, n).await?;
        b.clean().await?;
        let p = d.get("profile").cloned().unwrap_or(Value::Null);
        ok &= d.ok();
        note(
            "in_process",
            json!({
                "n": n,
                "jobs_per_s": d.get("jobs_per_s").cloned().unwrap_or(Value::Null),
                "serve_cpu_us_per_job": p["client_cpu_us_per_job"],
                "handler_cpu_us_per_job": 0.0,
                "redis_cpu_us_per_job": p["redis_cpu_us_per_job"],
                "ok": d.ok(),
            }),
            &mut kinds,
        );
    }

    // exec: `true` per job.
    let exec_n = b.args.serve_n.min(n);
    if !asked("exec") {
        note("exec", left_out(), &mut kinds);
    } else {
        let true_path = which("true").unwrap_or_else(|| "true".into());
        let exec = Handler {
            toml: format!("exec = [{true_path:?}]"),
            label: "exec true".into(),
            text: "exec `true` per job".into(),
        };
        let r = serve_path(b, "handlers-exec", exec_n, &exec, dir.path()).await?;
        b.clean().await?;
        ok &= r.ok();
        note("exec", entry(&r, exec_n), &mut kinds);
    }

    // http: a POST per job to the bench's no-op server.
    if !asked("http") {
        note("http", left_out(), &mut kinds);
    } else {
        let server = NoopHttp::start().await?;
        let http = Handler {
            toml: format!("http = {{ url = \"http://{}/job\" }}", server.addr),
            label: "http no-op".into(),
            text: "http POST to a no-op server".into(),
        };
        let r = serve_path(b, "handlers-http", n, &http, dir.path()).await?;
        b.clean().await?;
        let requests = server.requests.load(Ordering::Relaxed);
        drop(server);
        let mut e = entry(&r, n);
        e["requests"] = json!(requests);
        ok &= r.ok() && requests >= n;
        note("http", e, &mut kinds);
    }

    // Resident, each language on its client's loop.
    let clients = clients_dir(b);
    let processes = b.args.resident_processes;
    for (lang, program, needs, ext, script) in RESIDENT {
        let name = format!("resident_{lang}");
        if !asked(lang) {
            note(&name, left_out(), &mut kinds);
            continue;
        }
        let Some(interp) = which(program) else {
            note(
                &name,
                json!({ "skipped": format!("{program} not installed (not on PATH)") }),
                &mut kinds,
            );
            continue;
        };
        if !clients.join(needs).is_file() {
            note(
                &name,
                json!({ "skipped": format!(
                    "the {lang} client is not at {} (pass --clients DIR, the clients/ directory of the source tree)",
                    clients.join(needs).display()
                ) }),
                &mut kinds,
            );
            continue;
        }
        let file = dir.path().join(format!("noop.{ext}"));
        std::fs::write(&file, script(&clients))
            .with_context(|| format!("cannot write {}", file.display()))?;
        let argv = vec![interp, file.display().to_string()];
        let h = Handler {
            toml: format!("resident = {argv:?}\nprocesses = {processes}"),
            label: format!("resident {lang} no-op"),
            text: format!("resident {lang} no-op (clients/{lang}), {processes} per worker"),
        };
        let r = serve_path(b, &format!("handlers-{lang}"), n, &h, dir.path()).await?;
        b.clean().await?;
        ok &= r.ok();
        let mut e = entry(&r, n);
        if lang == "node" {
            e["inflight"] = json!(NODE_INFLIGHT);
        }
        note(&name, e, &mut kinds);
    }

    let (workers, concurrency) = b.args.serve_workers;
    /// The kinds, in this order.
    #[derive(Serialize)]
    struct Kinds {
        in_process: Value,
        exec: Value,
        http: Value,
        resident_php: Value,
        resident_python: Value,
        resident_node: Value,
    }
    #[derive(Serialize)]
    struct Line {
        n: u64,
        exec_n: u64,
        workers: u64,
        concurrency: u64,
        processes: u64,
        kinds: Kinds,
        ok: bool,
    }
    let mut take = |k: &str| kinds.remove(k).unwrap_or(Value::Null);
    let kinds = Kinds {
        in_process: take("in_process"),
        exec: take("exec"),
        http: take("http"),
        resident_php: take("resident_php"),
        resident_python: take("resident_python"),
        resident_node: take("resident_node"),
    };
    let mut rep = Report::of(
        "handlers",
        &Line {
            n,
            exec_n,
            workers: workers as u64,
            concurrency: concurrency as u64,
            processes,
            kinds,
            ok,
        },
    );
    rep.text = format!(
        "{:<10} a no-op of each handler kind, {n} jobs each (exec {exec_n}); serve {workers} workers x {concurrency}, {processes} resident programs per worker  {}\n{}",
        "handlers",
        if ok { "ok" } else { "NOT OK" },
        text.join("\n")
    );
    Ok(rep)
}
