//! The client packages in `clients/` (PHP, Python, Node), driven from here so
//! that `cargo test --workspace --locked` runs them:
//!
//! - each client's own test suite (`php tests/run.php`, `python3 -m unittest`,
//!   `node --test`) against a private redis-server, with the punctual binary
//!   at hand for cross-checks;
//! - end to end: jobs produced through the client, consumed by the real
//!   `punctual serve` running the client's resident loop
//!   (`clients/*/tests/e2e_handler.*`) on a partitioned topic: every job at
//!   least once and none early, exact payloads, retry with a delay and dead
//!   replies landing in Redis, junk on stdout, kill -9 of a program mid-job,
//!   SIGTERM draining; a PHP program's `exit` mid-job retried at once;
//! - the CLI refuses `clients/testdata/invalid.json` with the clients' messages.
//! - schedules written by each client (`clients/*/tests/e2e_schedule.*`) on a
//!   Redis Cluster, and fired by `punctual serve`; per-job options enqueued
//!   through each client reaching serve (these two need the `sched` and
//!   `opts` work merged); schedule pause and remove through each client
//!   taking back what a real firer fired ahead.
//!
//! What a language needs is provisioned here (support/provision.rs):
//! redis-py into a venv under target/ when `python3` lacks it, `npm ci` in
//! clients/node when its node_modules is missing. What still cannot run (no
//! php, phpredis, python3 or node) fails the tests that need it, naming what
//! is missing, so it shows in cargo's summary; `PUNCTUAL_SKIP_CLIENTS=php`
//! (a comma-separated list) skips a language on purpose, with a printed
//! notice.

#[path = "support/provision.rs"]
mod provision;
mod support;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual::{Queue, State};
use punctual_testkit::eventually;
use punctual_testkit::{RedisCluster, RedisServer};
use serde_json::{json, Value};
use support::{output_text, Service, BIN};

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients")
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Lang {
    Php,
    Python,
    /// The Python client's asyncio loop (`run_async`, 4 jobs at once).
    PythonAsync,
    Node,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Php => "php",
            Lang::Python => "python",
            Lang::PythonAsync => "python-async",
            Lang::Node => "node",
        }
    }

    /// The interpreter: for Python, `python3` when it has redis-py, else
    /// the venv provisioned under target/.
    fn interpreter(self) -> String {
        match self {
            Lang::Php => "php".into(),
            Lang::Python | Lang::PythonAsync => provision::python()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "python3".into()),
            Lang::Node => "node".into(),
        }
    }

    fn dir(self) -> PathBuf {
        clients().join(match self {
            Lang::PythonAsync => "python",
            other => other.name(),
        })
    }

    /// A file of the client's tests directory.
    fn test_file(self, stem: &str) -> PathBuf {
        match self {
            Lang::Php => self.dir().join(format!("tests/{stem}.php")),
            Lang::Python | Lang::PythonAsync => self.dir().join(format!("tests/{stem}.py")),
            Lang::Node => self.dir().join(format!("test/{stem}.js")),
        }
    }

    /// The class name the handler's plain exception reports (`raise`).
    fn error_class(self) -> &'static str {
        match self {
            Lang::Php => "DomainException",
            Lang::Python | Lang::PythonAsync => "ValueError",
            Lang::Node => "BoomError",
        }
    }

    /// The client's own test suite.
    fn suite(self) -> Command {
        let mut cmd = Command::new(self.interpreter());
        match self {
            Lang::Php => cmd.arg("tests/run.php"),
            Lang::Python | Lang::PythonAsync => cmd.args([
                "-m", "unittest", "discover", "-v", "-s", "tests", "-t", "tests",
            ]),
            Lang::Node => cmd.args([
                "--test",
                "test/producer.test.js",
                "test/options.test.js",
                "test/worker.test.js",
                "test/bullmq.test.js",
            ]),
        };
        cmd.current_dir(self.dir());
        cmd
    }

    /// Why this language cannot run here, if it cannot, after provisioning
    /// what can be (redis-py in a venv, `npm ci`).
    fn missing(self) -> Option<String> {
        match self {
            Lang::Python | Lang::PythonAsync => {
                if let Err(e) = provision::python() {
                    return Some(e);
                }
            }
            Lang::Node => {
                if let Err(e) = provision::node() {
                    return Some(e);
                }
            }
            Lang::Php => {}
        }
        let (probe, what): (&[&str], String) = match self {
            Lang::Php => (
                &["-r", "exit(extension_loaded('redis') ? 0 : 1);"],
                "php's redis extension (Debian: php-redis)".into(),
            ),
            Lang::Python | Lang::PythonAsync => (
                &["-c", "import redis"],
                "python3's redis package (pip install redis, or Debian: python3-redis)".into(),
            ),
            Lang::Node => (
                &["-e", "require('redis')"],
                "node's redis package (run `npm ci` in clients/node)".into(),
            ),
        };
        match Command::new(self.interpreter())
            .args(probe)
            .current_dir(self.dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            Err(_) => Some(format!("{} not installed", self.interpreter())),
            Ok(s) if !s.success() => Some(format!("{what} not installed")),
            Ok(_) => None,
        }
    }

    /// Whether to run: false only when PUNCTUAL_SKIP_CLIENTS names the
    /// language (printed); a language that cannot run fails the test, naming
    /// what is missing.
    fn available(self) -> bool {
        let family = match self {
            Lang::PythonAsync => "python",
            other => other.name(),
        };
        if provision::skipped(family) {
            return false;
        }
        if let Some(why) = self.missing() {
            panic!(
                "the {} client's tests cannot run: {why}. Install it (.ci/run shows how), or skip the \
                 language on purpose with PUNCTUAL_SKIP_CLIENTS={family}",
                self.name()
            );
        }
        true
    }
}

// ---- each client's own tests ------------------------------------------------

fn run_suite(lang: Lang) {
    if !lang.available() {
        return;
    }
    let redis = RedisServer::start();
    let out = lang
        .suite()
        .env("PUNCTUAL_TEST_REDIS_URL", redis.url())
        .env("PUNCTUAL_BIN", BIN)
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(
        out.status.success(),
        "the {} client's tests failed ({}):\n{text}",
        lang.name(),
        out.status
    );
    eprintln!("{} client tests:\n{text}", lang.name());
}

#[test]
fn php_client_tests() {
    run_suite(Lang::Php);
}

#[test]
fn python_client_tests() {
    run_suite(Lang::Python);
}

#[test]
fn node_client_tests() {
    run_suite(Lang::Node);
}

/// The messages the clients are tested against are the CLI's (the Rust
/// library's) word for word, and the CLI writes nothing either.
#[test]
fn the_cli_refuses_the_shared_invalid_inputs_with_the_same_messages() {
    let redis = RedisServer::start();
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(clients().join("testdata/invalid.json")).unwrap(),
    )
    .unwrap();
    assert!(cases.len() >= 10);
    for case in &cases {
        let topic = case["topic"].as_str().unwrap();
        let size = case["payload_bytes"].as_u64().unwrap_or(1) as usize;
        let mut cmd = Command::new(BIN);
        cmd.args(["--redis", &redis.url(), "push", topic, &"x".repeat(size)]);
        if let Some(id) = case["id"].as_str() {
            cmd.args(["--id", id]);
        }
        if let Some(hex) = case["id_hex"].as_str() {
            // An id that is not UTF-8: its bytes, as a shell would pass them.
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            cmd.arg("--id").arg(std::ffi::OsStr::from_bytes(&bytes));
        }
        if let Some(n) = case["max_attempts"].as_u64() {
            cmd.args(["--max-attempts", &n.to_string()]);
        }
        let out = cmd.output().unwrap();
        let want = case
            .get("cli_message")
            .unwrap_or(&case["message"])
            .as_str()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case}: accepted");
        assert!(
            // "punctual: error: ...", or "error: ..." where the argument
            // parser refuses the flag's value itself.
            stderr.contains(&format!("error: {want}\n")),
            "{case}: the CLI says\n{stderr}"
        );
    }
    assert_eq!(redis.cli(&["DBSIZE"]).unwrap().trim(), "0");
}

// ---- end to end: the client's producer and resident loop under serve --------

/// `punctual serve` with one resident topic running the client's handler.
struct Serve {
    svc: Service,
    /// What the environment of its resident programs holds.
    needle: String,
}

impl Serve {
    fn start(redis: &str, lang: Lang, topic: &str, key: &str) -> Serve {
        let mut svc = Service::new();
        let text = format!(
            "redis = {redis:?}\nworkers = 1\n\n[topics.{topic}]\nresident = [{:?}, {:?}]\n\
             processes = 2\npartitions = 2\ntimeout = \"60s\"\nbackoff = [\"0s\"]\n\
             env = {{ PUNCTUAL_TEST_REDIS_URL = {redis:?}, E2E_KEY = {key:?}, E2E_INFLIGHT = \"4\"{} }}\n",
            lang.interpreter(),
            lang.test_file("e2e_handler").display().to_string(),
            if lang == Lang::PythonAsync {
                ", E2E_ASYNC = \"1\""
            } else {
                ""
            },
        );
        std::fs::write(svc.path("punctual.toml"), text).unwrap();
        svc.start();
        Serve {
            svc,
            needle: format!("E2E_KEY={key}"),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.svc.kill();
        for pid in residents(&self.needle) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// The live processes whose environment holds `needle` (`E2E_KEY=...`,
/// which serve passes to the resident programs of the topic only).
fn residents(needle: &str) -> HashSet<i32> {
    let mut out = HashSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            out.insert(pid);
        }
    }
    out
}

/// Enqueues through the client: one JSON object per job on the stdin of
/// `e2e_produce` (one job: `enqueue`; more: `enqueue_batch`).
fn produce(lang: Lang, redis: &str, topic: &str, jobs: &[Value]) -> Vec<(String, String)> {
    produce_with(lang, redis, None, topic, jobs)
}

/// [`produce`], on a Redis Cluster when `cluster` has its seed URLs.
fn produce_with(
    lang: Lang,
    redis: &str,
    cluster: Option<&str>,
    topic: &str,
    jobs: &[Value],
) -> Vec<(String, String)> {
    let mut cmd = Command::new(lang.interpreter());
    if let Some(seeds) = cluster {
        cmd.env("PUNCTUAL_TEST_CLUSTER_URLS", seeds);
    }
    let mut child = cmd
        .arg(lang.test_file("e2e_produce"))
        .arg(topic)
        .env("PUNCTUAL_TEST_REDIS_URL", redis)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for j in jobs {
            writeln!(stdin, "{j}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{} producer failed: {}",
        lang.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<(String, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_str().unwrap().to_string(),
                v["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(results.len(), jobs.len());
    results
}

/// What the handler recorded: every delivery (`:seen`) or the ones it
/// started to hang or sleep on (`:hung`, `:started`).
fn recorded(redis: &redis::Client, key: &str) -> Vec<Value> {
    let mut conn = redis.get_connection().unwrap();
    let items: Vec<String> = redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    items
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect()
}

async fn end_to_end(lang: Lang) {
    if !lang.available() {
        return;
    }
    let server = RedisServer::start();
    let url = server.url();
    let rc = redis::Client::open(url.as_str()).unwrap();
    let topic = format!("e2e-{}", lang.name());
    let key = format!("e2e:{topic}");
    let seen_key = format!("{key}:seen");
    let needle = format!("E2E_KEY={key}");
    let mut serve = Serve::start(&url, lang, &topic, &key);
    let q = Queue::connect(url.as_str()).await.unwrap();
    let wait = Duration::from_secs(60);

    // serve splits the topic before it starts consuming; the producer must
    // see the split, or its ids would not map.
    eventually(
        wait,
        "serve partitions the topic and starts 2 programs",
        || async { q.partitions(&topic).await.unwrap() == 2 && residents(&needle).len() == 2 },
    )
    .await;

    // 1. A batch through the client's producer: due now and delayed, exact
    //    payloads, junk printing, retry with a delay, dead, an exception, once.
    let mut jobs = Vec::new();
    let mut delays = HashMap::new();
    for i in 0..30u64 {
        let delay = (i % 6) * 400;
        jobs.push(json!({"payload": json!({"do": "ok", "n": i}).to_string(), "delay_ms": delay}));
    }
    jobs.push(json!({"payload": r#"{"do":"print"}"#, "id": "print"}));
    jobs.push(json!({"payload_hex": "ff00fe3a3a", "id": "binary"}));
    jobs.push(json!({"payload": r#"{"do":"retry","delay_ms":600000}"#, "id": "retry"}));
    jobs.push(json!({"payload": r#"{"do":"dead"}"#, "id": "dead"}));
    jobs.push(json!({"payload": r#"{"do":"raise"}"#, "id": "raise", "max_attempts": 2}));
    jobs.push(json!({"payload": r#"{"do":"once"}"#, "id": "once"}));
    let results = produce(lang, &url, &topic, &jobs);
    let mut ok_ids = Vec::new();
    for ((id, status), job) in results.iter().zip(&jobs) {
        assert_eq!(status, "created", "{id}");
        if let Some(given) = job["id"].as_str() {
            assert_eq!(id, given);
        } else {
            // A partitioned topic: the client made the id, as the library does.
            assert_eq!(id.len(), 21, "{id}");
            assert!(id
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()));
            delays.insert(id.clone(), job["delay_ms"].as_i64().unwrap());
            ok_ids.push(id.clone());
        }
    }
    let mut want_done: Vec<String> = ok_ids.clone();
    want_done.extend(["print".to_string(), "binary".into()]);
    eventually(wait, "every job due is handled", || async {
        let seen: HashSet<String> = recorded(&rc, &seen_key)
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        want_done.iter().all(|id| seen.contains(id))
    })
    .await;
    eventually(wait, "retry, dead, raise and once settle", || async {
        let retry = q.get(&topic, "retry").await.unwrap();
        let dead = q.get(&topic, "dead").await.unwrap();
        let raise = q.get(&topic, "raise").await.unwrap();
        let once = q.get(&topic, "once").await.unwrap();
        retry.is_some_and(|j| j.state == State::Pool && j.last_error.is_some())
            && dead.is_some_and(|j| j.state == State::Dead)
            && raise.is_some_and(|j| j.state == State::Dead)
            && once.is_none()
    })
    .await;
    for id in &want_done {
        assert!(q.get(&topic, id).await.unwrap().is_none(), "{id} is done");
    }
    let seen = recorded(&rc, &seen_key);
    let by_id = |id: &str| -> Vec<&Value> { seen.iter().filter(|s| s["id"] == id).collect() };
    for s in &seen {
        // Never early: Redis's clock when the handler ran, against the due time.
        let (now, due) = (s["now_ms"].as_i64().unwrap(), s["due_ms"].as_i64().unwrap());
        assert!(now >= due, "{s}: handled {} ms early", due - now);
        assert_eq!(
            s["max_attempts"],
            if s["id"] == "raise" { 2 } else { 6 },
            "{s}"
        );
        assert_eq!(s["timeout_ms"], 60000);
        // The topic as configured, also on a partitioned topic (RESIDENT.md).
        assert_eq!(s["topic"], topic.as_str(), "{s}");
    }
    // Lateness (Redis's clock at the handler minus the due time), printed
    // for the record: no timing is asserted on a shared machine.
    let mut late: Vec<i64> = seen
        .iter()
        .filter(|s| s["attempt"] == 1)
        .map(|s| s["now_ms"].as_i64().unwrap() - s["due_ms"].as_i64().unwrap())
        .collect();
    late.sort_unstable();
    eprintln!(
        "{} end to end: {} first deliveries, lateness median {} ms, max {} ms",
        lang.name(),
        late.len(),
        late[late.len() / 2],
        late[late.len() - 1]
    );
    for (id, delay) in &delays {
        let s = by_id(id)[0];
        // The delay the producer asked for, measured by Redis.
        // Redis's clock rounded up to the ms: the delay, or 1 ms more.
        let measured = s["due_ms"].as_i64().unwrap() - s["created_ms"].as_i64().unwrap();
        assert!(
            measured == *delay || measured == *delay + 1,
            "{id}: due - created = {measured}, asked {delay}"
        );
        let payload: Value = serde_json::from_slice(
            &(0..s["payload_hex"].as_str().unwrap().len())
                .step_by(2)
                .map(|i| {
                    u8::from_str_radix(&s["payload_hex"].as_str().unwrap()[i..i + 2], 16).unwrap()
                })
                .collect::<Vec<u8>>(),
        )
        .unwrap();
        assert_eq!(payload["do"], "ok");
    }
    assert_eq!(
        by_id("binary")[0]["payload_hex"],
        "ff00fe3a3a",
        "bytes exactly"
    );
    // Junk on stdout and stderr broke nothing: done on the first attempt.
    assert_eq!(by_id("print").len(), 1);
    assert_eq!(by_id("print")[0]["attempt"], 1);
    let retry = q.get(&topic, "retry").await.unwrap().unwrap();
    assert_eq!(retry.last_error.as_deref(), Some("asked to retry"));
    assert_eq!(retry.attempts, 1);
    let wait_ms = retry.due_ms - retry.now_ms;
    assert!(
        (500_000..=600_000).contains(&wait_ms),
        "retried in {wait_ms} ms, asked 600000"
    );
    let dead = q.get(&topic, "dead").await.unwrap().unwrap();
    assert_eq!(dead.last_error.as_deref(), Some("asked to die"));
    assert_eq!(dead.attempts, 1);
    let raise = q.get(&topic, "raise").await.unwrap().unwrap();
    assert_eq!(
        raise.last_error.as_deref(),
        Some(format!("{}: boom", lang.error_class()).as_str())
    );
    assert_eq!(raise.attempts, 2);
    // once: the step ran on the first attempt only, the job was retried.
    assert_eq!(by_id("once").len(), 2);
    let mut conn = rc.get_connection().unwrap();
    let count: i64 = redis::cmd("GET")
        .arg(format!("{key}:once:once"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(count, 1);
    assert!(
        serve.svc.log().contains("junk on stdout"),
        "stdout goes to the log"
    );

    // 2. kill -9 of a program mid-job: the job is retried, the program replaced.
    let before = residents(&needle);
    assert_eq!(before.len(), 2);
    produce(
        lang,
        &url,
        &topic,
        &[json!({"payload": r#"{"do":"hang"}"#, "id": "hang"})],
    );
    eventually(wait, "a program takes the hanging job", || async {
        !recorded(&rc, &format!("{key}:hung")).is_empty()
    })
    .await;
    let victim = recorded(&rc, &format!("{key}:hung"))[0]["pid"]
        .as_i64()
        .unwrap() as i32;
    assert!(before.contains(&victim));
    kill(Pid::from_raw(victim), Signal::SIGKILL).unwrap();
    eventually(wait, "the killed job runs again elsewhere", || async {
        recorded(&rc, &seen_key)
            .iter()
            .any(|s| s["id"] == "hang" && s["attempt"] == 2 && s["pid"] != victim)
    })
    .await;
    eventually(wait, "the killed program is replaced", || async {
        let now = residents(&needle);
        now.len() == 2 && !now.contains(&victim)
    })
    .await;
    eventually(wait, "the retried job is done", || async {
        q.get(&topic, "hang").await.unwrap().is_none()
    })
    .await;

    // 3. SIGTERM drains: the job in flight finishes, the programs see EOF and exit.
    produce(
        lang,
        &url,
        &topic,
        &[json!({"payload": r#"{"do":"slow","ms":1500}"#, "id": "slow"})],
    );
    eventually(wait, "a program starts the slow job", || async {
        !recorded(&rc, &format!("{key}:started")).is_empty()
    })
    .await;
    let programs = residents(&needle);
    serve.svc.signal(Signal::SIGTERM);
    let status = serve.svc.wait(Duration::from_secs(60));
    assert!(
        status.success(),
        "serve exited with {status}; log:\n{}",
        serve.svc.log()
    );
    assert!(
        q.get(&topic, "slow").await.unwrap().is_none(),
        "the job in flight was finished and acked"
    );
    assert!(recorded(&rc, &seen_key)
        .iter()
        .any(|s| s["id"] == "slow" && s["attempt"] == 1));
    eventually(Duration::from_secs(10), "the programs exited", || async {
        residents(&needle).is_empty()
    })
    .await;
    let log = serve.svc.log();
    for pid in programs {
        assert!(
            log.contains(&format!("EOF, exiting {pid}")),
            "program {pid} saw EOF and exited on its own; log:\n{log}"
        );
    }
    assert!(q.check(&topic).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn php_end_to_end_under_serve() {
    end_to_end(Lang::Php).await;
}

/// A crash of a PHP resident program mid-job (`exit` in the handler) is
/// retried at once, not after the topic's 60 s timeout: serve sees the
/// program exit and puts the job back (backoff 0 s), and replaces the
/// program; the second attempt is due within seconds of the crash, by
/// Redis's clock (the Python and Node apps' crashes are checked in
/// client_apps.rs).
#[tokio::test(flavor = "multi_thread")]
async fn php_crash_in_the_resident_handler_is_retried_at_once() {
    let lang = Lang::Php;
    if !lang.available() {
        return;
    }
    let server = RedisServer::start();
    let url = server.url();
    let rc = redis::Client::open(url.as_str()).unwrap();
    let topic = "crash-php";
    let key = format!("e2e:{topic}");
    let serve = Serve::start(&url, lang, topic, &key);
    let q = Queue::connect(url.as_str()).await.unwrap();
    eventually(
        Duration::from_secs(60),
        "serve partitions the topic and starts 2 programs",
        || async { q.partitions(topic).await.unwrap() == 2 && residents(&serve.needle).len() == 2 },
    )
    .await;
    produce(
        lang,
        &url,
        topic,
        &[json!({"payload": r#"{"do":"exit"}"#, "id": "exit"})],
    );
    // Longer than the timeout, so a job held until it ran out shows below
    // as the time it came back after, not as this wait failing.
    eventually(
        Duration::from_secs(90),
        "the crashed job is done",
        || async { q.get(topic, "exit").await.unwrap().is_none() },
    )
    .await;
    let crashed = recorded(&rc, &format!("{key}:crashed"));
    assert_eq!(crashed.len(), 1, "{crashed:?}");
    assert_eq!(crashed[0]["attempt"], 1);
    let seen = recorded(&rc, &format!("{key}:seen"));
    let again: Vec<&Value> = seen.iter().filter(|s| s["id"] == "exit").collect();
    assert_eq!(again.len(), 1, "done once, on the second attempt: {seen:?}");
    assert_eq!(again[0]["attempt"], 2);
    assert_ne!(again[0]["pid"], crashed[0]["pid"]);
    let redo = again[0]["due_ms"].as_i64().unwrap() - crashed[0]["now_ms"].as_i64().unwrap();
    assert!(
        redo < 30_000,
        "the crashed job came back {redo} ms after the crash (the timeout is 60 s)"
    );
    eventually(
        Duration::from_secs(60),
        "the crashed program is replaced",
        || async {
            let now = residents(&serve.needle);
            now.len() == 2 && !now.contains(&(crashed[0]["pid"].as_i64().unwrap() as i32))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_end_to_end_under_serve() {
    end_to_end(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_asyncio_end_to_end_under_serve() {
    end_to_end(Lang::PythonAsync).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn node_end_to_end_under_serve() {
    end_to_end(Lang::Node).await;
}

/// Each client's producer on a Redis Cluster: hash tags keep a topic's keys
/// in one slot, a partitioned topic spreads over slots by crc32(id), the
/// scripts are loaded (EVAL after NOSCRIPT) on whichever node holds the keys,
/// and the Rust library finds every job where the client put it.
#[tokio::test(flavor = "multi_thread")]
async fn producers_work_on_a_redis_cluster() {
    let langs: Vec<Lang> = [Lang::Php, Lang::Python, Lang::Node]
        .into_iter()
        .filter(|l| l.available())
        .collect();
    if langs.is_empty() {
        return;
    }
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let q = Queue::connect(seeds.as_str()).await.unwrap();
    for lang in langs {
        let hot = format!("hot-{}", lang.name());
        let plain = format!("plain-{}", lang.name());
        q.set_partitions(&hot, 3).await.unwrap();
        let jobs: Vec<Value> = (0..30)
            .map(|i| json!({"payload": format!("hot {i}"), "delay_ms": 60000}))
            .collect();
        let made = produce_with(lang, &cluster.node(0).url(), Some(&seeds), &hot, &jobs);
        for (i, (id, status)) in made.iter().enumerate() {
            assert_eq!(status, "created");
            let job =
                q.get(&hot, id).await.unwrap().unwrap_or_else(|| {
                    panic!("{}: {id} is not where the library looks", lang.name())
                });
            assert_eq!(job.payload, format!("hot {i}").as_bytes());
            assert_eq!(job.state, State::Pool);
        }
        let parts: HashSet<u32> = made
            .iter()
            .map(|(id, _)| punctual::internal::partition_of(id, 3))
            .collect();
        assert_eq!(parts.len(), 3, "30 ids over 3 partitions");
        let given: Vec<Value> = (0..5)
            .map(|i| json!({"payload": format!("p{i}"), "id": format!("order:{i}")}))
            .collect();
        let first = produce_with(lang, &cluster.node(1).url(), Some(&seeds), &plain, &given);
        assert!(first.iter().all(|(_, s)| s == "created"));
        let again = produce_with(lang, &cluster.node(2).url(), Some(&seeds), &plain, &given);
        assert!(again.iter().all(|(_, s)| s == "duplicate"), "{again:?}");
        for i in 0..5 {
            let job = q.get(&plain, &format!("order:{i}")).await.unwrap().unwrap();
            assert_eq!(job.state, State::Ready);
        }
        assert!(q.check(&hot).await.unwrap().is_empty());
        assert!(q.check(&plain).await.unwrap().is_empty());
    }
}

/// Runs schedule operations through the client (`e2e_schedule`: one JSON
/// object per line on its stdin); returns each op's result.
fn schedule_ops(lang: Lang, redis: &str, seeds: &str, topic: &str, ops: &[Value]) -> Vec<Value> {
    let mut child = Command::new(lang.interpreter())
        .arg(lang.test_file("e2e_schedule"))
        .arg(topic)
        .env("PUNCTUAL_TEST_REDIS_URL", redis)
        .env("PUNCTUAL_TEST_CLUSTER_URLS", seeds)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for op in ops {
            writeln!(stdin, "{op}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{} schedules failed: {}",
        lang.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["result"].clone())
        .collect();
    assert_eq!(results.len(), ops.len());
    results
}

/// Each client's schedules on a Redis Cluster: the JSON lands in
/// `P:{T}:schedules` in the topic's slot, as PROTOCOL.md writes it, every
/// change is published where a firer on any node hears it, and the three
/// clients write the same JSON for the same schedule.
#[test]
fn schedules_from_the_clients_on_a_redis_cluster() {
    let langs: Vec<Lang> = [Lang::Php, Lang::Python, Lang::Node]
        .into_iter()
        .filter(|l| l.available())
        .collect();
    if langs.is_empty() {
        return;
    }
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let mut written = Vec::new();
    for lang in langs {
        let topic = format!("sched-{}", lang.name());
        let channel = format!("punctual:{{{topic}}}:schedules");
        // PUBLISH reaches every node of a cluster: listen on one.
        let client = redis::Client::open(cluster.node(2).url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let mut sub = conn.as_pubsub();
        sub.subscribe(&channel).unwrap();
        sub.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let ops = [
            json!({"op": "add", "name": "close-unpaid", "spec": {
                "cron": "0 */5 * * * *", "tz": "Europe/Berlin", "payload": "{\"kind\":\"sweep\"}",
                "timeout_ms": 60000, "group": "ops"}}),
            json!({"op": "add", "name": "tick", "spec": {
                "every_ms": 5000, "catch_up": "spread", "spread_ms": 600000, "max_attempts": 2}}),
            json!({"op": "pause", "name": "tick"}),
            json!({"op": "list"}),
            json!({"op": "resume", "name": "tick"}),
            json!({"op": "remove", "name": "close-unpaid"}),
            json!({"op": "remove", "name": "close-unpaid"}),
            json!({"op": "list"}),
        ];
        let out = schedule_ops(lang, &cluster.node(1).url(), &seeds, &topic, &ops);
        // One message per change. Sorted: publishes sent through different
        // nodes cross the cluster bus in no set order (a firer only re-reads).
        let mut names: Vec<String> = (0..5)
            .map(|_| sub.get_message().unwrap().get_payload().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["close-unpaid", "close-unpaid", "tick", "tick", "tick"],
            "{}",
            lang.name()
        );
        // The remove of a name that is gone published nothing.
        sub.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert!(sub.get_message().is_err(), "{}", lang.name());
        let cron = &out[0];
        assert_eq!(cron["options"], ";t60000;gops", "{}", lang.name());
        assert_eq!(cron["catch_up"], "all");
        assert_eq!(out[1]["every_ms"], 5000);
        assert_eq!(out[1]["options"], "2");
        assert_eq!(out[2], json!(true));
        let listed = out[3].as_array().unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(&listed[0], cron, "list reads back what add wrote");
        assert_eq!(listed[1]["paused"], json!(true));
        assert_eq!(
            (&out[4], &out[5], &out[6]),
            (&json!(true), &json!(true), &json!(false))
        );
        let left = out[7].as_array().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0]["name"], "tick");
        assert_eq!(left[0]["paused"], json!(false));
        // Stored in the topic's slot, wherever that is (-c follows MOVED).
        let raw = cluster
            .node(0)
            .cli(&["-c", "HGET", &channel, "tick"])
            .unwrap();
        let stored: Value = serde_json::from_str(raw.trim()).unwrap();
        assert_eq!(stored, left[0]);
        let mut same = cron.clone();
        same["created_ms"] = json!(0);
        written.push((lang.name(), same));
    }
    for (name, s) in &written[1..] {
        assert_eq!(s, &written[0].1, "{name} and {} differ", written[0].0);
    }
}

/// Pause, resume and remove through each client against a real firer (a
/// Rust `Scheduler`) on a partitioned topic: pause and remove take back
/// every occurrence fired ahead and not yet due (the `unfire` script, as
/// `punctual schedule pause|rm` does), resume fires them again. `seeds`:
/// the cluster's seed URLs ("" for a single Redis at `url`).
async fn take_back_through_the_clients(url: &str, seeds: &str) {
    let langs: Vec<Lang> = [Lang::Php, Lang::Python, Lang::Node]
        .into_iter()
        .filter(|l| l.available())
        .collect();
    let q = Queue::connect(if seeds.is_empty() { url } else { seeds })
        .await
        .unwrap();
    for lang in langs {
        let topic = format!("takeback-{}", lang.name());
        q.set_partitions(&topic, 3).await.unwrap();
        let op = |kind: &str| json!({"op": kind, "name": "tick"});
        let add =
            json!({"op": "add", "name": "tick", "spec": {"every_ms": 1000, "catch_up": "skip"}});
        schedule_ops(lang, url, seeds, &topic, &[add]);
        let stop = tokio_util::sync::CancellationToken::new();
        let firer = punctual::Scheduler::new(q.clone(), punctual::SchedulerConfig::default())
            .topic(topic.clone());
        let firer = tokio::spawn(firer.run(stop.clone().cancelled_owned()));
        // The occurrences waiting in the pool, not yet due.
        let ahead = async || {
            let now = q.redis_now_ms().await.unwrap();
            q.peek(&topic, State::Pool, 1000)
                .await
                .unwrap()
                .into_iter()
                .filter(|l| l.id.starts_with("tick@") && l.at_ms > now)
                .count()
        };
        eventually(Duration::from_secs(20), "fired ahead", async || {
            ahead().await >= 55
        })
        .await;
        assert_eq!(
            schedule_ops(lang, url, seeds, &topic, &[op("pause")]),
            [json!(true)]
        );
        assert_eq!(
            ahead().await,
            0,
            "{}: pause took back what was not due",
            lang.name()
        );
        assert_eq!(
            schedule_ops(lang, url, seeds, &topic, &[op("resume")]),
            [json!(true)]
        );
        eventually(Duration::from_secs(20), "fired ahead again", async || {
            ahead().await >= 55
        })
        .await;
        assert_eq!(
            schedule_ops(lang, url, seeds, &topic, &[op("remove")]),
            [json!(true)]
        );
        assert_eq!(
            ahead().await,
            0,
            "{}: remove took back what was not due",
            lang.name()
        );
        assert!(q.schedule(&topic, "tick").await.unwrap().is_none());
        stop.cancel();
        firer.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn schedule_pause_and_remove_from_the_clients_take_back_what_was_fired_ahead() {
    let server = RedisServer::start();
    take_back_through_the_clients(&server.url(), "").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn schedule_pause_and_remove_from_the_clients_take_back_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    take_back_through_the_clients(&cluster.node(1).url(), &cluster.seed_urls()).await;
}

/// An every-60s schedule with catch-up spread over 1 h, written through
/// the client, 10 minutes down, then fired by a real firer: its missed
/// occurrences are due over the next hour. Pause (topic `…-pause`) and
/// remove (`…-remove`) through the client take those back too, not only
/// the occurrences after now, as the Rust library's
/// `rm_/pause_takes_back_occurrences_spread_ahead` (PROTOCOL.md, unfire).
/// More than a page of other marks, tied at one score, sit before the
/// occurrences' marks in every partition: the take-back pages past them.
async fn spread_taken_back_through(lang: Lang) {
    if !lang.available() {
        return;
    }
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(&url).await.unwrap();
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for change in ["pause", "remove"] {
        let topic = format!("spread-{}-{change}", lang.name());
        q.set_partitions(&topic, 3).await.unwrap();
        let add = json!({"op": "add", "name": "tick", "spec": {
            "every_ms": 60000, "payload": "tick", "catch_up": "spread", "spread_ms": 3600000}});
        let mut s = schedule_ops(lang, &url, "", &topic, &[add]).remove(0);
        // Ten minutes down: created (and last handled) 10 min 30 s ago.
        let created = s["created_ms"].as_i64().unwrap() - 630_000;
        s["created_ms"] = json!(created);
        let _: () = redis::pipe()
            .hset(
                format!("punctual:{{{topic}}}:schedules"),
                "tick",
                s.to_string(),
            )
            .ignore()
            .hset(
                format!("punctual:{{{topic}}}:schedules:last"),
                "tick",
                created,
            )
            .ignore()
            .query_async(&mut c)
            .await
            .unwrap();
        let ahead = async |after: i64| {
            q.peek(&topic, State::Pool, 1000)
                .await
                .unwrap()
                .into_iter()
                .filter(|l| l.id.starts_with("tick@") && l.at_ms > after)
                .map(|l| l.id)
                .collect::<Vec<_>>()
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let firer = punctual::Scheduler::new(q.clone(), punctual::SchedulerConfig::default())
            .topic(topic.clone());
        let firer = tokio::spawn(firer.run(stop.clone().cancelled_owned()));
        eventually(
            Duration::from_secs(10),
            "the missed occurrences spread ahead",
            async || ahead(q.redis_now_ms().await.unwrap() + 60_000).await.len() >= 8,
        )
        .await;
        stop.cancel();
        firer.await.unwrap().unwrap();
        let other_at = q.redis_now_ms().await.unwrap() - 3_000_000;
        for i in 0..3 {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(format!(
                "punctual:{{{}}}:fired",
                punctual::internal::partition_name(&topic, i, 3)
            ));
            for j in 0..2500 {
                zadd.arg(other_at).arg(format!("other@{j}"));
            }
            let _: i64 = zadd.query_async(&mut c).await.unwrap();
        }
        assert_eq!(
            schedule_ops(
                lang,
                &url,
                "",
                &topic,
                &[json!({"op": change, "name": "tick"})]
            ),
            [json!(true)]
        );
        let left = ahead(q.redis_now_ms().await.unwrap()).await;
        assert!(
            left.is_empty(),
            "{}: {change} left occurrences due ahead: {left:?}",
            lang.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn php_schedule_pause_and_remove_take_back_occurrences_spread_ahead() {
    spread_taken_back_through(Lang::Php).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_schedule_pause_and_remove_take_back_occurrences_spread_ahead() {
    spread_taken_back_through(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn node_schedule_pause_and_remove_take_back_occurrences_spread_ahead() {
    spread_taken_back_through(Lang::Node).await;
}

/// Schedules written by each client are fired by `punctual serve` (the
/// Rust firer reads the clients' JSON): every second an occurrence
/// `<name>@<o>` with `o` on the interval's grid from `created_ms`, due at
/// `o` and handled no earlier, with the schedule's payload and its options
/// (max attempts, and the per-job timeout in the job message). Needs the
/// firer (branch `sched`) and the options in `enqueue` (branch `opts`).
#[tokio::test(flavor = "multi_thread")]
async fn schedules_written_by_the_clients_are_fired_by_serve() {
    let langs: Vec<Lang> = [Lang::Python, Lang::Php, Lang::Node]
        .into_iter()
        .filter(|l| l.available())
        .collect();
    let Some(&handler) = langs.first() else {
        return;
    };
    let server = RedisServer::start();
    let url = server.url();
    let rc = redis::Client::open(url.as_str()).unwrap();
    let topic = "sched-fired";
    let key = format!("e2e:{topic}");
    let _serve = Serve::start(&url, handler, topic, &key);
    let mut created = HashMap::new();
    for lang in &langs {
        let name = format!("every-{}", lang.name());
        let out = schedule_ops(
            *lang,
            &url,
            "",
            topic,
            &[json!({"op": "add", "name": name, "spec": {
                "every_ms": 1000, "payload": format!("{{\"do\":\"ok\",\"from\":\"{name}\"}}"),
                "max_attempts": 2, "timeout_ms": 45000}})],
        );
        created.insert(name, out[0]["created_ms"].as_i64().unwrap());
    }
    let seen_key = format!("{key}:seen");
    let fired = |name: &str| -> Vec<Value> {
        recorded(&rc, &seen_key)
            .into_iter()
            .filter(|s| s["id"].as_str().unwrap().starts_with(&format!("{name}@")))
            .collect()
    };
    eventually(
        Duration::from_secs(60),
        "every client's schedule fired twice",
        || async { created.keys().all(|name| fired(name).len() >= 2) },
    )
    .await;
    for (name, created_ms) in &created {
        let mut ids = HashSet::new();
        for s in fired(name) {
            let id = s["id"].as_str().unwrap();
            let o: i64 = id[name.len() + 1..].parse().unwrap();
            assert!(o >= *created_ms && (o - created_ms) % 1000 == 0, "{s}");
            assert_eq!(s["due_ms"], o, "{s}: due at the occurrence");
            assert!(s["now_ms"].as_i64().unwrap() >= o, "{s}: early");
            assert_eq!(s["max_attempts"], 2, "{s}");
            assert_eq!(s["timeout_ms"], 45000, "{s}: the job's own timeout");
            let payload = hex_bytes(s["payload_hex"].as_str().unwrap());
            let payload: Value = serde_json::from_slice(&payload).unwrap();
            assert_eq!(payload["from"], name.as_str());
            assert!(ids.insert(id.to_string()), "{id} fired twice");
        }
    }
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Per-job options enqueued through each client reach `punctual serve`: a
/// job's own timeout is the one its handler gets, a job whose expiry had
/// passed when it was enqueued is never handled but dead with `expired:
/// ...`, one within its window runs, and a trace context reaches the
/// handler. Needs the options in `enqueue`,
/// `claim` and serve (branch `opts`).
#[tokio::test(flavor = "multi_thread")]
async fn options_from_the_clients_reach_serve() {
    let langs: Vec<Lang> = [Lang::Python, Lang::Php, Lang::Node]
        .into_iter()
        .filter(|l| l.available())
        .collect();
    let Some(&handler) = langs.first() else {
        return;
    };
    let server = RedisServer::start();
    let url = server.url();
    let rc = redis::Client::open(url.as_str()).unwrap();
    let topic = "opts-e2e";
    let key = format!("e2e:{topic}");
    let _serve = Serve::start(&url, handler, topic, &key);
    let q = Queue::connect(url.as_str()).await.unwrap();
    let wait = Duration::from_secs(60);
    eventually(wait, "serve partitions the topic", || async {
        q.partitions(topic).await.unwrap() == 2
    })
    .await;
    let now_ms = q.redis_now_ms().await.unwrap();
    for lang in &langs {
        let n = lang.name();
        let made = produce(
            *lang,
            &url,
            topic,
            &[
                json!({"payload": r#"{"do":"ok"}"#, "id": format!("{n}-own-timeout"),
                       "timeout_ms": 45000, "group": "shop-1"}),
                json!({"payload": r#"{"do":"ok"}"#, "id": format!("{n}-expired"),
                       "at_ms": now_ms - 10_000, "expire_ms": 1000}),
                json!({"payload": r#"{"do":"ok"}"#, "id": format!("{n}-in-time"),
                       "expire_ms": 3_600_000}),
                json!({"payload": r#"{"do":"ok"}"#, "id": format!("{n}-traced"),
                       "traceparent": TRACEPARENT, "tracestate": "rojo=1,congo=a:b;c"}),
            ],
        );
        assert!(made.iter().all(|(_, s)| s == "created"), "{n}: {made:?}");
    }
    let seen_key = format!("{key}:seen");
    let seen = || -> HashMap<String, Value> {
        recorded(&rc, &seen_key)
            .into_iter()
            .map(|s| (s["id"].as_str().unwrap().to_string(), s))
            .collect()
    };
    eventually(
        wait,
        "the jobs in time are handled, the expired one dead",
        || async {
            let now = seen();
            let mut all = true;
            for lang in &langs {
                let n = lang.name();
                let dead = q.get(topic, &format!("{n}-expired")).await.unwrap();
                all &= now.contains_key(&format!("{n}-own-timeout"))
                    && now.contains_key(&format!("{n}-in-time"))
                    && now.contains_key(&format!("{n}-traced"))
                    && dead.is_some_and(|j| j.state == State::Dead);
            }
            all
        },
    )
    .await;
    let now = seen();
    for lang in &langs {
        let n = lang.name();
        assert_eq!(now[&format!("{n}-own-timeout")]["timeout_ms"], 45000);
        assert_eq!(
            now[&format!("{n}-in-time")]["timeout_ms"],
            60000,
            "the topic's"
        );
        assert!(
            !now.contains_key(&format!("{n}-expired")),
            "{n}: ran expired"
        );
        // The trace context, from this producer to that handler.
        let traced = &now[&format!("{n}-traced")];
        assert_eq!(traced["traceparent"], TRACEPARENT, "{n}");
        assert_eq!(traced["tracestate"], "rojo=1,congo=a:b;c", "{n}");
        assert_eq!(
            now[&format!("{n}-in-time")]["traceparent"],
            Value::Null,
            "{n}"
        );
        let dead = q
            .get(topic, &format!("{n}-expired"))
            .await
            .unwrap()
            .unwrap();
        let err = dead.last_error.unwrap_or_default();
        assert!(err.starts_with("expired"), "{n}: last error {err:?}");
    }
}
