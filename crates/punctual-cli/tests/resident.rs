//! Resident handlers (docs/RESIDENT.md) end to end: the real `punctual
//! serve`, a real redis-server, resident programs written in Python 3 with
//! the standard library only.

mod support;

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual::{Job, Queue};
use punctual_testkit::eventually;
use punctual_testkit::RedisServer;
use serde_json::{json, Value};
use support::{gone, live, metric, Service};

/// The resident handler under test. It appends to `records` (next to it):
/// `ready PID`, `job ID ATTEMPT PID HEX(payload bytes) DUE_MS START_MS`,
/// `eof PID`. What it does depends on the payload:
/// `hold` / `hang` (first attempt): sleep; `sleep:S`: sleep S seconds;
/// `retry:MS`: ask for a retry after MS; `dead`: declare it dead; `junk`:
/// print junk (JSON-looking too) on stdout and stderr; `violate` (first
/// attempt): reply for an id it does not hold; `garbage` (first attempt):
/// a line that is not JSON on fd 4; `die`: a PHP-like fatal error on
/// stderr, then exit 255; `quit`: exit 3 at once, silently; `say`: a line
/// naming the job on stdout and on stderr, then done; anything else: done.
/// With `LOOKAHEAD` set it declares that look-ahead, and does not start a
/// job whose `start_by_us` passed: it records `skip ID ATTEMPT PID` and
/// replies `skip`; before each reply it records `after ID 1` if the next
/// job was already written to it (`0` if not); `peek` waits until a next
/// job is written, records `ahead ID`, then sleeps.
const HANDLER: &str = r#"#!/usr/bin/env python3
import base64, json, os, select, sys, time

here = os.path.dirname(os.path.abspath(__file__))
def record(line):
    with open(os.path.join(here, "records"), "a") as f:
        f.write(line + "\n")

jobs = os.fdopen(int(os.environ["PUNCTUAL_JOBS_FD"]), "rb")
replies = os.fdopen(int(os.environ["PUNCTUAL_REPLIES_FD"]), "w")
def send(msg):
    replies.write(json.dumps(msg) + "\n")
    replies.flush()

pid = os.getpid()
assert os.environ.get("PUNCTUAL_PROTOCOL") == "1"
leaked = [v for v in ("PUNCTUAL_SERVE_CONFIG", "PUNCTUAL_METRICS_SOCKET") if v in os.environ]
record("ready %d %s" % (pid, ",".join(leaked) or "-"))
time.sleep(float(os.environ.get("SLOW_READY", "0")))
ready = {"type": "ready", "protocol": int(os.environ.get("PROTO", "1")), "inflight": int(os.environ.get("INFLIGHT", "1"))}
if os.environ.get("LOOKAHEAD"):
    ready["lookahead"] = int(os.environ["LOOKAHEAD"])
send(ready)
for line in jobs:
    job = json.loads(line)
    if "start_by_us" in job and time.monotonic_ns() // 1000 > job["start_by_us"]:
        record("skip %s %d %d" % (job["id"], job["attempt"], pid))
        send({"type": "skip", "id": job["id"]})
        continue
    if "payload_b64" in job:
        data = base64.b64decode(job["payload_b64"])
    else:
        data = job["payload"].encode("utf-8")
    start = int(time.time() * 1000)
    jid, attempt = job["id"], job["attempt"]
    record("job %s %d %d %s %d %d" % (jid, attempt, pid, data.hex() or "-", job["due_ms"], start))
    first = attempt == 1
    if data == b"peek" and first:
        if select.select([jobs.fileno()], [], [], 20)[0]:
            record("ahead %s" % jid)
        time.sleep(60)
    if data in (b"hold", b"hang") and first:
        time.sleep(60)
    elif data.startswith(b"sleep:"):
        time.sleep(float(data[6:]))
    elif data == b"say":
        print("said %s on stdout" % jid, flush=True)
        sys.stderr.write("said %s on stderr\n" % jid)
        sys.stderr.flush()
    elif data == b"die":
        sys.stderr.write("PHP Fatal error:  Allowed memory size of 134217728 bytes exhausted (tried to allocate 20480 bytes) in /app/Job.php on line 12\n")
        sys.stderr.flush()
        os._exit(255)
    elif data == b"quit":
        os._exit(3)
    if os.environ.get("LOOKAHEAD"):
        written = select.select([jobs.fileno()], [], [], 0)[0]
        record("after %s %d" % (jid, 1 if written else 0))
    if data.startswith(b"retry:"):
        send({"type": "retry", "id": jid, "error": "bank closed", "delay_ms": int(data[6:])})
    elif data == b"dead":
        send({"type": "dead", "id": jid, "error": "no such order"})
    elif data == b"violate" and first:
        send({"type": "done", "id": "not-" + jid})
    elif data == b"garbage" and first:
        replies.write("this is not json\n")
        replies.flush()
    else:
        if data == b"junk":
            print('{"type":"done","id":"%s"}' % jid, flush=True)
            print("PHP Notice: undefined index", flush=True)
            sys.stderr.write('{"type":"retry","id":"%s"}\nwarning: \xff\n' % jid)
            sys.stderr.flush()
            sys.stdout.write("no newline at the end")
            sys.stdout.flush()
        send({"type": "done", "id": jid})
record("eof %d" % pid)
if os.environ.get("STUBBORN"):
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)
sys.exit(0)
"#;

/// The shared [`Service`] with `HANDLER` in its directory as the resident
/// program of topic `t`.
struct Resident(Service);

impl Resident {
    fn new() -> Resident {
        let s = Service::new();
        let p = s.path("handler.py");
        std::fs::write(&p, HANDLER).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        Resident(s)
    }

    /// Writes the config: `extra` settings and one resident topic `t` with
    /// `keys`, then starts serve.
    fn start(&mut self, redis: &str, extra: &str, keys: &str) {
        let text = format!(
            "redis = {redis:?}\nhttp = \"127.0.0.1:{}\"\n{extra}\n[topics.t]\nresident = [\"python3\", {:?}]\n{keys}\n",
            self.http,
            self.path("handler.py").display().to_string()
        );
        std::fs::write(self.path("punctual.toml"), text).unwrap();
        self.0.start();
    }

    /// The `job` records: (id, attempt, pid, hex, due_ms, start_ms).
    fn jobs(&self) -> Vec<JobRec> {
        self.records()
            .into_iter()
            .filter(|r| r[0] == "job")
            .map(|r| JobRec {
                id: r[1].clone(),
                attempt: r[2].parse().unwrap(),
                pid: r[3].parse().unwrap(),
                hex: r[4].clone(),
                due_ms: r[5].parse().unwrap(),
                start_ms: r[6].parse().unwrap(),
            })
            .collect()
    }

    /// Topic `t`'s resident figures as `/healthz` shows them under
    /// `resident`, once `GET /api/v1/resident` shows the same (one
    /// source); `Null` until then.
    async fn figures(&self) -> Value {
        let Some(h) = self.healthz().await else {
            return Value::Null;
        };
        let api = async {
            let r = reqwest::get(format!("http://127.0.0.1:{}/api/v1/resident", self.http))
                .await
                .ok()?;
            serde_json::from_str::<Value>(&r.text().await.ok()?).ok()
        };
        match api.await {
            Some(a) if a["t"] == h["resident"]["t"] => a["t"].clone(),
            _ => Value::Null,
        }
    }

    /// Waits until `figures` equals `want`.
    async fn figures_become(&self, want: Value) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.figures().await;
            if got == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "resident figures: want {want}, have {got}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Pids that recorded `kind` (ready, eof).
    fn pids(&self, kind: &str) -> Vec<i32> {
        self.records()
            .into_iter()
            .filter(|r| r[0] == kind)
            .map(|r| r[1].parse().unwrap())
            .collect()
    }
}

impl std::ops::Deref for Resident {
    type Target = Service;
    fn deref(&self) -> &Service {
        &self.0
    }
}

impl std::ops::DerefMut for Resident {
    fn deref_mut(&mut self) -> &mut Service {
        &mut self.0
    }
}

#[derive(Debug, Clone)]
struct JobRec {
    id: String,
    attempt: u32,
    pid: i32,
    hex: String,
    due_ms: i64,
    start_ms: i64,
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_runs_at_least_once_and_none_early_over_several_programs() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 2\nconcurrency = 4",
        "processes = 3\ntimeout = \"10s\"",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    let n = 300;
    let mut payloads = HashMap::new();
    for i in 0..n {
        let payload = format!("{{\"order\":{i}}}");
        payloads.insert(format!("o{i}"), hex(payload.as_bytes()));
        let delay = Duration::from_millis((i * 37 % 2500) as u64);
        q.enqueue("t", Job::new(payload).id(format!("o{i}")).delay(delay))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(60), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    let ids: HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids.len(), n, "every job ran");
    for j in &jobs {
        assert!(
            j.start_ms >= j.due_ms,
            "{} started {} ms early",
            j.id,
            j.due_ms - j.start_ms
        );
        assert_eq!(j.hex, payloads[&j.id], "{}: payload bytes", j.id);
    }
    let pids: HashSet<i32> = jobs.iter().map(|j| j.pid).collect();
    assert!(pids.len() >= 2, "several programs took jobs: {pids:?}");
    for r in svc.records().iter().filter(|r| r[0] == "ready") {
        assert_eq!(r[2], "-", "internal variables leaked: {r:?}");
    }
    assert_eq!(
        svc.pids("ready").len(),
        6,
        "2 workers x 3 programs, none restarted; log:\n{}",
        svc.log()
    );
    // /healthz and the API: alive = processes x workers, one reply per job.
    svc.figures_become(json!({
        "alive": 6, "restarts": 0, "jobs": jobs.len(), "restarts_by_reason": {}
    }))
    .await;
    svc.signal(Signal::SIGTERM);
    assert!(svc.wait(Duration::from_secs(20)).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_round_trip_exactly_even_when_not_json_nor_utf8() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    let payloads: Vec<Vec<u8>> = vec![
        b"{\"a\":1}".to_vec(),
        b"not json {".to_vec(),
        b"line\nbreaks\r\n\"quotes\" \\ and \t tabs".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x80, b'\n', 0xc3],
        "h\u{e9}llo \u{1f600}".as_bytes().to_vec(),
        vec![0u8; 3],
        Vec::new(),
    ];
    for (i, p) in payloads.iter().enumerate() {
        q.enqueue("t", Job::new(p.clone()).id(format!("p{i}")))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(30), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let got: HashMap<String, String> = svc.jobs().into_iter().map(|j| (j.id, j.hex)).collect();
    for (i, p) in payloads.iter().enumerate() {
        assert_eq!(got[&format!("p{i}")], hex(p), "payload {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_decide_retry_with_delay_and_dead_with_error() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("retry:600000").id("r"))
        .await
        .unwrap();
    q.enqueue("t", Job::new("dead").id("d")).await.unwrap();
    eventually(Duration::from_secs(30), "both replied", || async {
        let s = q.stats("t").await.unwrap();
        s.dead == 1 && s.pool == 1 && s.running == 0
    })
    .await;
    let d = q.get("t", "d").await.unwrap().unwrap();
    assert_eq!(d.attempts, 1);
    assert_eq!(d.last_error.as_deref(), Some("no such order"));
    let r = q.get("t", "r").await.unwrap().unwrap();
    assert_eq!(r.last_error.as_deref(), Some("bank closed"));
    // The pool score, straight from Redis, against Redis's clock (due
    // 600 s ahead, the job may wait in the cold pool).
    let score = redis
        .pool_jobs("punctual", "t")
        .into_iter()
        .find(|(id, _)| id == "r")
        .expect("r in the pool")
        .1 as f64;
    let time = redis.cli(&["TIME"]).unwrap();
    let t: Vec<f64> = time
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let now_ms = t[0] * 1000.0 + t[1] / 1000.0;
    let ahead = score - now_ms;
    assert!(
        (590_000.0..=600_500.0).contains(&ahead),
        "due about now + 600 s, is now + {ahead} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_killed_mid_job_is_replaced_and_the_job_retried() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1",
        "processes = 1\nbackoff = [\"0s\"]",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("hold").id("h")).await.unwrap();
    eventually(Duration::from_secs(20), "the job started", || async {
        !svc.jobs().is_empty()
    })
    .await;
    let first = svc.jobs()[0].pid;
    svc.figures_become(json!({
        "alive": 1, "restarts": 0, "jobs": 0, "restarts_by_reason": {}
    }))
    .await;
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(20), "the job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert_eq!(jobs[1].attempt, 2, "retried as attempt 2");
    assert_ne!(jobs[1].pid, first, "on a new program");
    assert_eq!(svc.pids("ready").len(), 2, "the program was replaced");
    // /metrics: one program alive again, one restart after an exit, one job.
    eventually(Duration::from_secs(20), "resident metrics", || async {
        let m = svc.metrics().await;
        m.contains("punctual_resident_processes{topic=\"t\"} 1")
            && m.contains("punctual_resident_restarts_total{topic=\"t\",reason=\"exit\"} 1")
            && m.contains("punctual_resident_jobs_total{topic=\"t\"} 1")
    })
    .await;
    // The same figures in /healthz and GET /api/v1/resident.
    svc.figures_become(json!({
        "alive": 1, "restarts": 1, "jobs": 1, "restarts_by_reason": {"exit": 1}
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_on_stdout_and_stderr_breaks_nothing() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    for i in 0..20 {
        q.enqueue("t", Job::new("junk").id(format!("j{i}")))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(30), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    assert_eq!(jobs.len(), 20, "each ran once: {jobs:?}");
    assert!(jobs.iter().all(|j| j.attempt == 1));
    assert_eq!(svc.pids("ready").len(), 1, "never restarted");
    let log = svc.log();
    assert!(
        log.contains("PHP Notice: undefined index") && log.contains("job=j"),
        "stdout is logged with the job id:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_overrun_kills_and_replaces_the_program() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1",
        "processes = 1\ntimeout = \"1s\"\nbackoff = [\"0s\"]",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("hang").id("h")).await.unwrap();
    eventually(Duration::from_secs(30), "the job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert_eq!(jobs[1].attempt, 2);
    assert_ne!(jobs[1].pid, jobs[0].pid);
    assert!(gone(jobs[0].pid), "the overrunning program was killed");
    assert!(svc.log().contains("overran its timeout"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_violation_retries_the_job_on_a_new_program() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1",
        "processes = 1\nbackoff = [\"0s\"]",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("violate").id("v")).await.unwrap();
    q.enqueue("t", Job::new("garbage").id("g")).await.unwrap();
    eventually(Duration::from_secs(30), "both done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    for id in ["v", "g"] {
        let runs: Vec<&JobRec> = jobs.iter().filter(|j| j.id == id).collect();
        assert_eq!(runs.len(), 2, "{id}: {jobs:?}");
        assert_eq!(runs[1].attempt, 2);
        assert_ne!(runs[0].pid, runs[1].pid, "{id}: the violator was replaced");
        assert!(gone(runs[0].pid));
    }
    assert!(svc.log().contains("broke the protocol"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_jobs_recycles_programs_between_jobs_and_no_job_fails() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1\nmax_jobs = 5");
    let q = Queue::connect(redis.url()).await.unwrap();
    for i in 0..23 {
        q.enqueue("t", Job::new("x").id(format!("m{i}")))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(60), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    assert_eq!(jobs.len(), 23, "each ran once: {jobs:?}");
    assert!(jobs.iter().all(|j| j.attempt == 1), "no job failed");
    let mut per_pid: HashMap<i32, usize> = HashMap::new();
    for j in &jobs {
        *per_pid.entry(j.pid).or_default() += 1;
    }
    assert_eq!(per_pid.len(), 5, "23 jobs, 5 per program: {per_pid:?}");
    assert!(per_pid.values().all(|n| *n <= 5), "{per_pid:?}");
    // The four full programs were told to stop with EOF on fd 3.
    eventually(
        Duration::from_secs(10),
        "the recycled programs saw EOF",
        || async { svc.pids("eof").len() >= 4 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_job_in_flight_then_the_program_sees_eof_and_exits() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nshutdown_timeout = \"20s\"",
        "processes = 1",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("sleep:2").id("s")).await.unwrap();
    eventually(Duration::from_secs(20), "the job started", || async {
        !svc.jobs().is_empty()
    })
    .await;
    let pid = svc.jobs()[0].pid;
    svc.signal(Signal::SIGTERM);
    let status = svc.wait(Duration::from_secs(30));
    assert!(status.success(), "serve exits 0; log:\n{}", svc.log());
    assert_eq!(
        live(&q, "t").await,
        0,
        "the job in flight finished and was acked"
    );
    assert_eq!(svc.jobs().len(), 1, "and ran once");
    assert_eq!(svc.pids("eof"), vec![pid], "the program read EOF on fd 3");
    assert!(
        svc.log()
            .contains(&format!("resident program exited pid={pid} status=0")),
        "and exited 0:\n{}",
        svc.log()
    );
    assert!(gone(pid));
}

/// A shutdown that finds a program still starting (not ready yet) stops it
/// like any other, with EOF on fd 3, instead of killing it: it holds no job,
/// and a program that cleans up on EOF must get the chance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_program_starts_gives_it_eof_too() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1",
        "processes = 1\nstart_timeout = \"30s\"\nenv = { SLOW_READY = \"2\" }",
    );
    eventually(Duration::from_secs(20), "the program started", || async {
        !svc.pids("ready").is_empty()
    })
    .await;
    let pid = svc.pids("ready")[0];
    svc.signal(Signal::SIGTERM);
    let status = svc.wait(Duration::from_secs(30));
    assert!(status.success(), "serve exits 0; log:\n{}", svc.log());
    assert_eq!(
        svc.pids("eof"),
        vec![pid],
        "the starting program read EOF on fd 3; log:\n{}",
        svc.log()
    );
    assert!(gone(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_memory_recycles_after_the_job_that_crossed_it() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    // Any program is over 1 byte: each one handles one job, then is recycled.
    svc.start(
        &redis.url(),
        "workers = 1",
        "processes = 1\nmax_memory = \"1B\"",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    for i in 0..3 {
        q.enqueue("t", Job::new("x").id(format!("m{i}")))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(30), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    assert!(jobs.iter().all(|j| j.attempt == 1));
    let pids: HashSet<i32> = jobs.iter().map(|j| j.pid).collect();
    assert_eq!(pids.len(), 3, "a new program per job: {jobs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_memory_recycles_a_program_that_never_runs_out_of_jobs() {
    // A program taking 4 jobs at once under a backlog may never hold none:
    // once over max_memory it gets no more, and is recycled when its last
    // one is answered.
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nconcurrency = 16",
        "processes = 1\nmax_memory = \"1B\"\nenv = { INFLIGHT = \"4\" }",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    let jobs: Vec<Job> = (0..40).map(|i| Job::new("x").id(format!("m{i}"))).collect();
    q.enqueue_batch("t", jobs).await.unwrap();
    eventually(Duration::from_secs(60), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    assert_eq!(jobs.len(), 40, "{jobs:?}");
    let mut per_pid: std::collections::HashMap<i32, usize> = Default::default();
    for j in &jobs {
        *per_pid.entry(j.pid).or_default() += 1;
    }
    assert!(
        per_pid.values().all(|&n| n <= 4),
        "no program takes a job after crossing max_memory: {per_pid:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_speaking_another_protocol_makes_its_worker_claim_nothing() {
    // Claiming jobs for a program that cannot run them would only burn
    // their attempts: the worker stops before it claims, and the
    // supervisor restarts it with backoff, saying why in the log.
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1",
        "processes = 1\nenv = { PROTO = \"2\" }\nmax_attempts = 2\nbackoff = [\"0s\"]",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("p")).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "the worker restarted after refusing",
        || async { svc.pids("ready").len() >= 2 && svc.log().contains("another protocol version") },
    )
    .await;
    let p = q.get("t", "p").await.unwrap().unwrap();
    assert_eq!(p.attempts, 0, "never claimed: {p:?}");
    assert!(svc.jobs().is_empty(), "no job was sent to it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_ignores_eof_and_sigterm_is_killed_at_shutdown() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nshutdown_timeout = \"20s\"",
        "processes = 1\nenv = { STUBBORN = \"1\" }",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("s")).await.unwrap();
    eventually(Duration::from_secs(20), "the job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let pid = svc.jobs()[0].pid;
    svc.signal(Signal::SIGTERM);
    let status = svc.wait(Duration::from_secs(30));
    assert!(status.success(), "log:\n{}", svc.log());
    assert_eq!(svc.pids("eof"), vec![pid], "it saw EOF");
    let log = svc.log();
    assert!(
        log.contains("did not exit after EOF on fd 3; sending SIGTERM")
            && log.contains("ignored SIGTERM; sending SIGKILL"),
        "{log}"
    );
    assert!(gone(pid), "and was killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_its_own_timeout_is_timed_by_it() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1",
        "processes = 1\ntimeout = \"60s\"\nmax_attempts = 1",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue(
        "t",
        Job::new("hang").id("h").timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "the job dead", || async {
        q.stats("t").await.unwrap().dead == 1
    })
    .await;
    let h = q.get("t", "h").await.unwrap().unwrap();
    let err = h.last_error.unwrap();
    assert!(err.contains("timed out after 500ms"), "{err}");
    assert!(
        svc.log().contains("overran its timeout (500ms)"),
        "{}",
        svc.log()
    );
}

/// Issue 29 item 2: one program taking one job at a time, five slow jobs
/// that must start within 1 s of their due time. The worker claims only
/// what the program can start, so the jobs behind the first wait in ready
/// and expire there (to dead, counted as expired) instead of running late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_behind_a_busy_program_expire_instead_of_running_late() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    eventually(Duration::from_secs(20), "the program is ready", || async {
        !svc.pids("ready").is_empty()
    })
    .await;
    for i in 0..5 {
        let job = Job::new("sleep:1.5")
            .id(format!("e{i}"))
            .expire(Duration::from_secs(1));
        q.enqueue("t", job).await.unwrap();
    }
    eventually(Duration::from_secs(30), "every job ran or died", || async {
        let s = q.stats("t").await.unwrap();
        s.pool + s.ready + s.running == 0
    })
    .await;
    let ran = svc.jobs();
    for j in &ran {
        assert!(
            j.start_ms - j.due_ms <= 1000,
            "{} started {} ms after its due time, past its 1 s expiry",
            j.id,
            j.start_ms - j.due_ms
        );
    }
    let s = q.stats("t").await.unwrap();
    assert_eq!(
        (
            ran.len() as u64,
            s.dead,
            s.counters.get("expired").copied().unwrap_or(0)
        ),
        (1, 4, 4),
        "one ran, four expired; log:\n{}",
        svc.log()
    );
    // Which one ran depends on what the first claim found due (on a loaded
    // machine, not always e0): every other one is dead as expired.
    for i in 0..5 {
        let id = format!("e{i}");
        if ran.iter().any(|j| j.id == id) {
            continue;
        }
        let j = q.get("t", &id).await.unwrap().unwrap();
        let err = j.last_error.unwrap_or_default();
        assert!(err.starts_with("expired"), "{id}: {err}");
    }
}

/// Issue 29 item 6: SIGTERM while a worker with a concurrency far above
/// what its programs take has many jobs due. The worker held only what the
/// programs were running: those finish, the rest are in ready with no
/// attempt spent and nothing left leased, and serve exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_no_job_leased_that_no_program_started() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nconcurrency = 200\nshutdown_timeout = \"5s\"",
        "processes = 2\ntimeout = \"10s\"",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    let n = 200;
    let jobs: Vec<Job> = (0..n)
        .map(|i| Job::new("sleep:0.3").id(format!("s{i}")))
        .collect();
    q.enqueue_batch("t", jobs).await.unwrap();
    eventually(
        Duration::from_secs(20),
        "both programs took a job",
        || async { svc.jobs().len() >= 2 },
    )
    .await;
    svc.signal(Signal::SIGTERM);
    let status = svc.wait(Duration::from_secs(20));
    assert!(status.success(), "exit {status:?}; log:\n{}", svc.log());
    let started: HashSet<String> = svc.jobs().into_iter().map(|j| j.id).collect();
    let s = q.stats("t").await.unwrap();
    assert_eq!(s.running, 0, "nothing left leased; log:\n{}", svc.log());
    assert_eq!(
        s.ready + s.pool,
        (n - started.len()) as u64,
        "every job no program started waits again"
    );
    for i in 0..n {
        let id = format!("s{i}");
        if let Some(j) = q.get("t", &id).await.unwrap() {
            assert!(!started.contains(&id), "{id} ran and is still there");
            assert_eq!(
                j.attempts, 0,
                "{id}: no attempt spent on a job never started"
            );
        }
    }
}

/// Issue 28 item 4: a program that dies of a fatal error (PHP's "Allowed
/// memory size exhausted", status 255) leaves the last lines of its stderr
/// as the job's last error, not only its exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_dies_leaves_its_last_stderr_lines_on_the_job() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("die").id("d").max_attempts(1))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "d is dead", || async {
        q.stats("t").await.unwrap().dead == 1
    })
    .await;
    let err = q.get("t", "d").await.unwrap().unwrap().last_error.unwrap();
    assert!(err.contains("exited with status 255"), "{err}");
    assert!(
        err.contains("PHP Fatal error:  Allowed memory size of 134217728 bytes exhausted"),
        "the fatal error is on the job: {err}"
    );
}

/// What a program wrote to stderr for a job that ended well (or before any
/// job) is not put on a later job that it dies with silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_jobs_stderr_is_not_put_on_the_next_job_that_dies() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("say").id("s")).await.unwrap();
    eventually(Duration::from_secs(30), "s is done", || async {
        live(&q, "t").await == 0
    })
    .await;
    q.enqueue("t", Job::new("quit").id("q").max_attempts(1))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "q is dead", || async {
        q.stats("t").await.unwrap().dead == 1
    })
    .await;
    let err = q.get("t", "q").await.unwrap().unwrap().last_error.unwrap();
    assert!(err.contains("exited with status 3"), "{err}");
    assert!(!err.contains("said s"), "s's stderr is on q: {err}");
}

/// Issue 29 item 13: the jobs /healthz counts for resident programs are
/// every reply, also those of a worker killed right after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resident_job_count_keeps_the_replies_of_a_killed_worker() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    let n = 30;
    for i in 0..n {
        q.enqueue("t", Job::new("x").id(format!("k{i}")))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(30), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    // The program's parent is the worker: kill it at once.
    let program = svc.pids("ready")[0];
    let stat = std::fs::read_to_string(format!("/proc/{program}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let worker: i32 = after.split_whitespace().nth(1).unwrap().parse().unwrap();
    kill(Pid::from_raw(worker), Signal::SIGKILL).unwrap();
    let ran = svc.jobs().len() as u64;
    assert_eq!(ran, n);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let h = svc.healthz().await.unwrap_or_default();
        if h["resident"]["t"]["jobs"] == json!(ran) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "healthz counts {} of the {ran} replies: {h}; log:\n{}",
            h["resident"]["t"]["jobs"],
            svc.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 29 item 7: with `inflight = 1`, every line a program writes while
/// it runs a job is logged with that job's id (`job=`), not the previous
/// or the next job's, nor none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_of_a_program_name_the_job_that_wrote_them() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    let n = 200;
    let jobs: Vec<Job> = (0..n)
        .map(|i| Job::new("say").id(format!("j{i}")))
        .collect();
    q.enqueue_batch("t", jobs).await.unwrap();
    eventually(Duration::from_secs(60), "every job done", || async {
        live(&q, "t").await == 0
    })
    .await;
    // A job is acked before its program's last lines are read and logged:
    // wait for them (a lost line still fails the count below).
    let said = |log: &str| {
        log.lines()
            .filter(|l| l.contains("punctual::resident") && l.contains("said "))
            .count()
    };
    eventually(Duration::from_secs(30), "every line logged", || async {
        said(&svc.log()) >= 2 * n
    })
    .await;
    let log = svc.log();
    let mut seen = 0;
    let mut wrong = Vec::new();
    for line in log
        .lines()
        .filter(|l| l.contains("punctual::resident") && l.contains("said "))
    {
        let wrote = line
            .split("said ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let field = line
            .split(" job=")
            .nth(1)
            .map_or("", |f| f.split(' ').next().unwrap());
        seen += 1;
        if field != wrote {
            wrong.push(format!("{wrote} logged as job={field}"));
        }
    }
    assert_eq!(seen, 2 * n, "every line logged; log:\n{log}");
    assert!(
        wrong.is_empty(),
        "{} of {seen} lines name another job: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
}

/// Runs job a (`a_payload`) on the one program and job b leased behind it,
/// queued in the worker; returns the worker's pid.
async fn b_queued_behind_a(svc: &Resident, q: &Queue, a_payload: &str) -> Pid {
    q.enqueue("t", Job::new(a_payload).id("a")).await.unwrap();
    eventually(Duration::from_secs(20), "a started", || async {
        svc.jobs().iter().any(|j| j.id == "a")
    })
    .await;
    q.enqueue("t", Job::new("x").id("b")).await.unwrap();
    eventually(
        Duration::from_secs(20),
        "b leased, queued for the program",
        || async {
            matches!(q.get("t", "b").await.unwrap(), Some(j) if j.state == punctual::State::Running)
        },
    )
    .await;
    let worker = q
        .processes()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.role == punctual::registry::Role::Worker)
        .expect("a worker registered")
        .pid;
    Pid::from_raw(worker as i32)
}

/// b is still held by the claim of [`b_claimed_elsewhere`], its second
/// attempt: the stopped worker's hand-back, under the old token, changed
/// nothing.
async fn b_held_elsewhere(q: &Queue) {
    let j = q
        .get("t", "b")
        .await
        .unwrap()
        .expect("b is still held here");
    assert_eq!((j.state, j.attempts), (punctual::State::Running, 2));
}

/// Claims b, once its lease ran out and it was reclaimed, as another
/// worker would (leased for 2 minutes).
async fn b_claimed_elsewhere(q: &Queue) -> punctual::Delivery {
    let part: punctual::raw::Partition = "t".parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = punctual::raw::claim(q, &part, 10, Duration::from_secs(120))
            .await
            .unwrap();
        if let Some(b) = got.into_iter().find(|d| d.id == "b") {
            return b;
        }
        assert!(std::time::Instant::now() < deadline, "b never reclaimed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 29 item 10, resident: a job the worker holds queued for a busy
/// program is not started when the worker resumes from a stop (SIGSTOP,
/// swap) longer than its lease: the lease ran out meanwhile and the job
/// was claimed elsewhere. The worker hands it back unstarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_is_not_started_after_its_worker_stopped_past_its_lease() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nlease = \"2s\"",
        "processes = 1\ntimeout = \"30s\"",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    let worker = b_queued_behind_a(&svc, &q, "sleep:5").await;
    let stopped = std::time::Instant::now();
    kill(worker, Signal::SIGSTOP).unwrap();
    // Past b's lease the scheduler reclaims it, and another worker (this
    // test) claims it.
    assert_eq!(b_claimed_elsewhere(&q).await.attempt, 2);
    // The program has finished a (5 s) when the worker resumes: it is free
    // for b at once.
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(stopped.elapsed())).await;
    kill(worker, Signal::SIGCONT).unwrap();
    eventually(
        Duration::from_secs(20),
        "b started, or the worker said why not",
        // Either the manager checks b's lease before the keeper's first
        // round after the stop, or that round finds the lease lost and
        // withdraws b: both leave b unstarted, and say so.
        || async {
            let log = svc.log();
            log.contains("not started: its lease was not extended")
                || log.contains("lease lost (expired or cancelled)")
                || svc.jobs().iter().any(|j| j.id == "b")
        },
    )
    .await;
    // Its hand-back (a fail under the old token) changed nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b: Vec<JobRec> = svc.jobs().into_iter().filter(|j| j.id == "b").collect();
    assert!(
        b.is_empty(),
        "b started on the stopped worker's program: {b:?}"
    );
    b_held_elsewhere(&q).await;
}

/// A resident job's lateness is measured when a program gets it, not when
/// it joins the pool's queue: b, due with a, waits for the program to
/// finish a (2 s) and is reported about that late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_jobs_lateness_counts_its_wait_for_a_program() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(&redis.url(), "workers = 1", "processes = 1");
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue_batch(
        "t",
        vec![Job::new("sleep:2").id("a"), Job::new("x").id("b")],
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "both done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let b = svc.jobs().into_iter().find(|j| j.id == "b").expect("b ran");
    let waited = (b.start_ms - b.due_ms) as f64 / 1000.0;
    assert!(waited >= 1.5, "b waited {waited} s for the program");
    let series = "punctual_lateness_seconds_sum{topic=\"t\"}";
    let mut sum = None;
    for _ in 0..50 {
        sum = metric(&svc.metrics().await, series);
        if sum.is_some_and(|s| s >= waited - 0.2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sum = sum.expect("the lateness histogram has topic t");
    assert!(
        sum >= waited - 0.2,
        "lateness of a and b {sum} s, while b alone waited {waited} s"
    );
}

/// Issue 29 (c): jobs the worker leased for a busy program but has not
/// started show as waiting, not running, in stats and the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_queued_for_a_busy_program_show_as_waiting_not_running() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nheartbeat = \"200ms\"",
        "processes = 1",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("sleep:4").id("a")).await.unwrap();
    eventually(Duration::from_secs(20), "a started", || async {
        svc.jobs().iter().any(|j| j.id == "a")
    })
    .await;
    q.enqueue_batch("t", vec![Job::new("x").id("b"), Job::new("x").id("c")])
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "a running, b and c waiting",
        || async {
            let s = q.stats("t").await.unwrap();
            (s.running, s.waiting) == (3, 2)
        },
    )
    .await;
    let api = reqwest::get(format!("http://127.0.0.1:{}/api/v1/topics/t", svc.http))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let api: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(
        (&api["running"], &api["waiting"]),
        (&json!(3), &json!(2)),
        "{api}"
    );
    eventually(
        Duration::from_secs(30),
        "all done, none waiting",
        || async {
            let s = q.stats("t").await.unwrap();
            live(&q, "t").await == 0 && s.waiting == 0
        },
    )
    .await;
}

/// The other side of the lease check: a worker stopped for over half its
/// lease but less than all of it still holds the queued job, and hands it
/// back without counting an attempt; it then runs as its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_handed_back_with_its_lease_in_doubt_keeps_its_attempt() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nlease = \"4s\"",
        "processes = 1\ntimeout = \"30s\"",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    let worker = b_queued_behind_a(&svc, &q, "sleep:1").await;
    // Stopped for 2.6 s: over half the 4 s lease, not all of it; a's
    // program finishes meanwhile.
    kill(worker, Signal::SIGSTOP).unwrap();
    tokio::time::sleep(Duration::from_millis(2600)).await;
    kill(worker, Signal::SIGCONT).unwrap();
    eventually(Duration::from_secs(30), "b done", || async {
        q.get("t", "b").await.unwrap().is_none()
    })
    .await;
    let log = svc.log();
    let runs: Vec<u32> = svc
        .jobs()
        .into_iter()
        .filter(|j| j.id == "b")
        .map(|j| j.attempt)
        .collect();
    if log.contains("not started: its lease was not extended") {
        assert_eq!(
            runs,
            [1],
            "handed back without an attempt counted; log:\n{log}"
        );
    } else {
        // The keeper extended the lease before the program was free: b
        // started as usual (nothing to check here but that it ran once).
        assert_eq!(runs, [1], "log:\n{log}");
    }
}

/// Starts serve with one look-ahead program (`LOOKAHEAD=16`) and `keys`,
/// and runs 20 no-op jobs on it, so that its recent jobs are short and it
/// is written jobs ahead (`lookahead_budget = "1s"`: a loaded machine's
/// slow no-ops still count as short).
async fn warm_lookahead(svc: &mut Resident, redis: &RedisServer, extra: &str, keys: &str) -> Queue {
    svc.start(
        &redis.url(),
        &format!("workers = 1\n{extra}"),
        &format!(
            "processes = 1\nenv = {{ LOOKAHEAD = \"16\" }}\nlookahead_budget = \"1s\"\n{keys}"
        ),
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    let warm: Vec<Job> = (0..20).map(|i| Job::new("x").id(format!("w{i}"))).collect();
    q.enqueue_batch("t", warm).await.unwrap();
    eventually(Duration::from_secs(30), "the warm-up jobs done", || async {
        live(&q, "t").await == 0
    })
    .await;
    q
}

/// The `skip` records: (id, attempt, pid).
fn skips(svc: &Resident) -> Vec<(String, u32, i32)> {
    svc.records()
        .into_iter()
        .filter(|r| r[0] == "skip")
        .map(|r| (r[1].clone(), r[2].parse().unwrap(), r[3].parse().unwrap()))
        .collect()
}

/// Look-ahead (RESIDENT.md): b, written to the program ahead of a, carries
/// a `start_by_us`; the worker is stopped past b's lease, b is claimed
/// elsewhere, and when the program reaches b it does not start it (the
/// check the worker makes for a job it holds unwritten, made by the
/// program). Without `start_by_us`, the program would run b after a.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_written_ahead_is_not_started_after_its_worker_stopped_past_its_lease() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    let q = warm_lookahead(&mut svc, &redis, "lease = \"2s\"", "timeout = \"30s\"").await;
    let worker = b_queued_behind_a(&svc, &q, "sleep:5").await;
    // b is written to fd 3 right after its claim.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = std::time::Instant::now();
    kill(worker, Signal::SIGSTOP).unwrap();
    assert_eq!(b_claimed_elsewhere(&q).await.attempt, 2);
    // The program finishes a (5 s) and reaches b while the worker is
    // stopped.
    eventually(Duration::from_secs(20), "the program reached b", || async {
        skips(&svc).iter().any(|s| s.0 == "b") || svc.jobs().iter().any(|j| j.id == "b")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(stopped.elapsed())).await;
    kill(worker, Signal::SIGCONT).unwrap();
    let b: Vec<JobRec> = svc.jobs().into_iter().filter(|j| j.id == "b").collect();
    assert!(
        b.is_empty(),
        "b started on the stopped worker's program: {b:?}"
    );
    assert_eq!(
        skips(&svc)
            .into_iter()
            .map(|s| (s.0, s.1))
            .collect::<Vec<_>>(),
        [("b".to_string(), 1)]
    );
    // Its hand-back after the worker resumed (under the old token) changed
    // nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    b_held_elsewhere(&q).await;
}

/// Look-ahead: the program dies while it runs a, with b written ahead of
/// it. a is retried (its attempt counted); b, never started, goes back to
/// the pool's queue, still leased, and runs on the next program as its
/// first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_written_ahead_go_to_the_next_program_when_theirs_dies() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    let q = warm_lookahead(&mut svc, &redis, "", "timeout = \"30s\"").await;
    b_queued_behind_a(&svc, &q, "peek").await;
    eventually(Duration::from_secs(20), "b written ahead of a", || async {
        svc.records().iter().any(|r| r[0] == "ahead" && r[1] == "a")
    })
    .await;
    let old = *svc.pids("ready").last().unwrap();
    kill(Pid::from_raw(old), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(30), "a and b done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let runs = |id: &str| -> Vec<(u32, i32)> {
        svc.jobs()
            .into_iter()
            .filter(|j| j.id == id)
            .map(|j| (j.attempt, j.pid))
            .collect()
    };
    let a = runs("a");
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!((a[0].0, a[0].1), (1, old));
    assert_eq!(a[1].0, 2, "a was running: retried, its attempt counted");
    let b = runs("b");
    assert_eq!(b.len(), 1, "{b:?}");
    assert_ne!(b[0].1, old);
    assert_eq!(
        b[0].0, 1,
        "b was written ahead, never started: no attempt spent"
    );
}

/// Look-ahead: a job written ahead is timed from its start, not from its
/// write. b (1.5 s) waits about 2 s behind a, so 3.5 s pass between its
/// write and its reply; its timeout of 3 s is not overrun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_written_ahead_is_timed_from_its_start() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    let q = warm_lookahead(&mut svc, &redis, "", "timeout = \"3s\"").await;
    q.enqueue("t", Job::new("sleep:2").id("a")).await.unwrap();
    eventually(Duration::from_secs(20), "a started", || async {
        svc.jobs().iter().any(|j| j.id == "a")
    })
    .await;
    q.enqueue("t", Job::new("sleep:1.5").id("b")).await.unwrap();
    eventually(Duration::from_secs(30), "a and b done", || async {
        live(&q, "t").await == 0
    })
    .await;
    let jobs = svc.jobs();
    let b: Vec<&JobRec> = jobs.iter().filter(|j| j.id == "b").collect();
    assert_eq!(b.len(), 1, "b ran once: {b:?}; log:\n{}", svc.log());
    assert_eq!(b[0].attempt, 1);
    let a = jobs.iter().find(|j| j.id == "a").unwrap();
    assert_eq!(a.pid, b[0].pid, "b waited for a's program");
    assert!(
        svc.records()
            .iter()
            .any(|r| r[0] == "after" && r[1] == "a" && r[2] == "1"),
        "b was written ahead while a ran"
    );
    assert!(!svc.log().contains("timed out"), "log:\n{}", svc.log());
}

/// Look-ahead, claim side: a program whose jobs are slow is claimed no
/// more than 4 x its `inflight` (what it runs and its queue), whatever its
/// `lookahead`: jobs are leased for it only as far as they may be written
/// ahead to it (about 2 ms of its jobs), so the others wait in Redis for
/// any worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_with_slow_jobs_is_claimed_no_more_for_its_lookahead() {
    let redis = RedisServer::start();
    let mut svc = Resident::new();
    svc.start(
        &redis.url(),
        "workers = 1\nheartbeat = \"200ms\"",
        "processes = 1\nenv = { LOOKAHEAD = \"16\" }",
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    let jobs: Vec<Job> = (0..24)
        .map(|i| Job::new("sleep:0.2").id(format!("s{i}")))
        .collect();
    q.enqueue_batch("t", jobs).await.unwrap();
    eventually(Duration::from_secs(20), "two jobs done", || async {
        svc.jobs().len() >= 3
    })
    .await;
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(q.stats("t").await.unwrap().running);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(most >= 2, "jobs ran: {most} leased at most");
    // 4, and one whose ack is still on its way (acks wait up to 2 ms for
    // others of the topic) when the next claim is made.
    assert!(
        most <= 5,
        "{most} leased for one program running 0.2 s jobs"
    );
}
