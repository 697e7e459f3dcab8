//! Cancelling a running job, wherever it runs (docs/PROTOCOL.md "cancel"):
//! the job is cancelled by the CLI (`punctual cancel`, its own process; the
//! HTTP API of `serve` once),
//! the worker holding it runs in a `serve` process, and hears it on the
//! topic's cancel channel. Every `serve` here has a lease of a minute: the
//! keeper's backstop (a refused extension, every 20 s) cannot be what
//! stops a handler within the tests' waits; the message must.

#[path = "support/provision.rs"]
mod provision;
mod support;

use std::io::{Read, Write};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual::{Job, Queue};
use punctual_testkit::{eventually, RedisServer};
use support::{
    a_client_loop_tells_its_handler, cancel_running, gone, live, punctual_at, Service, BIN, TOKEN,
};

/// `punctual cancel TOPIC ID` through the CLI: (exit code, stdout, stderr).
fn cli_cancel(redis: &str, topic: &str, id: &str) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(["--redis", redis, "cancel", topic, id])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn counter(s: &punctual::TopicStats, name: &str) -> u64 {
    s.counters.get(name).copied().unwrap_or(0)
}

/// The lines of a file the handlers append to, split in words.
fn lines(svc: &Service, name: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(svc.path(name))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

fn find(svc: &Service, file: &str, words: &[&str]) -> Option<Vec<String>> {
    lines(svc, file)
        .into_iter()
        .find(|l| l.len() >= words.len() && l.iter().zip(words).all(|(a, b)| a == b))
}

/// Ends as cancelled: nothing live, counted `cancelled`, never retried,
/// dead, reclaimed or done.
async fn assert_ended_cancelled(q: &Queue, topic: &str, n: u64) {
    let s = q.stats(topic).await.unwrap();
    assert_eq!(s.pool + s.ready + s.running + s.dead, 0, "{s:?}");
    assert_eq!(counter(&s, "cancelled"), n, "{s:?}");
    for c in ["done", "retried", "dead", "reclaimed"] {
        assert_eq!(counter(&s, c), 0, "{c}: {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_handler_gets_sigterm_then_sigkill_after_cancel_grace() {
    let redis = RedisServer::start();
    let mut svc = Service::new();
    // `polite` stops on SIGTERM; `stubborn` ignores it (so does its
    // `sleep`, which inherits the ignored signal): only SIGKILL ends it.
    let handler = svc.script(
        "handler.sh",
        r#"cat > /dev/null
here="$(dirname "$0")"
case "$PUNCTUAL_JOB_ID" in
  polite) trap 'echo "term $PUNCTUAL_JOB_ID" >> "$here/events"; exit 0' TERM ;;
  *) trap '' TERM ;;
esac
sleep 60 &
echo "started $PUNCTUAL_JOB_ID $$ $!" >> "$here/events"
wait
echo "ended $PUNCTUAL_JOB_ID" >> "$here/events"
"#,
    );
    svc.config(
        &redis.url(),
        &format!("lease = \"60s\"\ncancel_grace = \"500ms\"\napi_token = {TOKEN:?}"),
        &format!(
            "[topics.t]\nexec = [{:?}]\ntimeout = \"120s\"",
            handler.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("polite")).await.unwrap();
    q.enqueue("t", Job::new("x").id("stubborn")).await.unwrap();
    eventually(Duration::from_secs(20), "both handlers started", || async {
        find(&svc, "events", &["started", "polite"]).is_some()
            && find(&svc, "events", &["started", "stubborn"]).is_some()
    })
    .await;

    cancel_running(&redis.url(), "t", "polite");
    eventually(Duration::from_secs(10), "polite got SIGTERM", || async {
        find(&svc, "events", &["term", "polite"]).is_some()
    })
    .await;

    let stubborn = find(&svc, "events", &["started", "stubborn"]).unwrap();
    let (sh, sleep): (i32, i32) = (stubborn[2].parse().unwrap(), stubborn[3].parse().unwrap());
    // This one through the HTTP API of the serve.
    let reply = reqwest::Client::new()
        .delete(format!(
            "http://127.0.0.1:{}/api/v1/topics/t/jobs/stubborn",
            svc.http
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["was"], "running", "{reply}");
    eventually(
        Duration::from_secs(10),
        "stubborn's group SIGKILLed after the grace",
        || async { gone(sh) && gone(sleep) },
    )
    .await;
    assert!(find(&svc, "events", &["ended", "stubborn"]).is_none());
    assert!(find(&svc, "events", &["term", "stubborn"]).is_none());

    assert_ended_cancelled(&q, "t", 2).await;
    // Counted by the handler metrics too, and in the audit trail with who.
    eventually(
        Duration::from_secs(10),
        "cancelled runs in /metrics",
        || async {
            svc.metrics()
                .await
                .contains("punctual_handler_runs_total{topic=\"t\",outcome=\"cancelled\"} 2")
        },
    )
    .await;
    let trail = punctual::internal::audit::read(&q, 10)
        .await
        .unwrap()
        .entries;
    let cancels: Vec<_> = trail.iter().filter(|e| e.action == "cancel").collect();
    assert_eq!(cancels.len(), 2, "{trail:?}");
    assert!(
        cancels.iter().all(|e| e.detail["was"] == "running"),
        "{cancels:?}"
    );
    let who: Vec<(&str, &str)> = cancels
        .iter()
        .map(|e| (e.who.as_str(), e.detail["id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        who,
        [("api", "stubborn"), ("cli", "polite")],
        "newest first"
    );
    assert!(
        svc.log().contains("job cancelled while it ran"),
        "{}",
        svc.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_handler_has_its_request_aborted() {
    let redis = RedisServer::start();
    // A server that takes the request and never answers; it reports the
    // request, then the client closing the connection.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel::<&'static str>();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "closed before the request");
            got.extend_from_slice(&buf[..n]);
        }
        tx.send("request").unwrap();
        // Whatever is left of the body, then EOF when the client hangs up.
        loop {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        tx.send("closed").unwrap();
        let _ = conn.write_all(b"");
    });
    let mut svc = Service::new();
    svc.config(
        &redis.url(),
        // A grace of an hour: only the abort at the cancel can close the
        // connection within the wait below (the drop after the grace cannot).
        "lease = \"60s\"\ncancel_grace = \"1h\"",
        &format!(
            "[topics.h]\nhttp = {{ url = \"http://127.0.0.1:{port}/hook\", timeout = \"120s\" }}\n"
        ),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("h", Job::new("{}").id("hook-1")).await.unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let first = rx.recv_timeout(Duration::from_secs(20));
        (first, rx)
    })
    .await
    .unwrap();
    let (first, rx) = got;
    assert_eq!(first, Ok("request"));

    cancel_running(&redis.url(), "h", "hook-1");
    let closed = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(closed, Ok("closed"), "the request was not aborted");
    assert_ended_cancelled(&q, "h", 1).await;
}

/// A resident program (inflight 1) that reads fd 3 while it works: a
/// `polite` job ends on its `cancel` message (it replies); a `stubborn`
/// one never does. Records `ready PID`, `job ID PID`, `cancel ID PID`.
const RESIDENT: &str = r#"#!/usr/bin/env python3
import json, os, select, time
here = os.path.dirname(os.path.abspath(__file__))
def record(line):
    with open(os.path.join(here, "records"), "a") as f:
        f.write(line + "\n")
jfd = int(os.environ["PUNCTUAL_JOBS_FD"])
rfd = int(os.environ["PUNCTUAL_REPLIES_FD"])
def send(msg):
    os.write(rfd, (json.dumps(msg) + "\n").encode())
buf = b""
def next_msg():
    global buf
    while b"\n" not in buf:
        select.select([jfd], [], [])
        chunk = os.read(jfd, 65536)
        if not chunk:
            raise SystemExit(0)
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    return json.loads(line)
pid = os.getpid()
record("ready %d" % pid)
send({"type": "ready", "protocol": 1, "inflight": 1})
while True:
    msg = next_msg()
    if msg.get("type") != "job":
        continue
    jid = msg["id"]
    record("job %s %d" % (jid, pid))
    if msg["payload"] == "polite":
        while True:
            m = next_msg()
            if m.get("type") == "cancel" and m.get("id") == jid:
                record("cancel %s %d" % (jid, pid))
                send({"type": "retry", "id": jid, "error": "stopped: cancelled"})
                break
    elif msg["payload"] == "stubborn":
        time.sleep(60)
        send({"type": "done", "id": jid})
    else:
        send({"type": "done", "id": jid})
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_program_is_told_and_replaced_only_if_it_does_not_stop() {
    let redis = RedisServer::start();
    let mut svc = Service::new();
    let program = svc.script("resident.py", RESIDENT);
    svc.config(
        &redis.url(),
        "workers = 1\nlease = \"60s\"\ncancel_grace = \"500ms\"",
        &format!(
            "[topics.r]\nresident = [\"python3\", {:?}]\ntimeout = \"120s\"",
            program.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();

    // Told, it stops the job and replies: the program stays.
    q.enqueue("r", Job::new("polite").id("p")).await.unwrap();
    eventually(Duration::from_secs(30), "p running", || async {
        find(&svc, "records", &["job", "p"]).is_some()
    })
    .await;
    let pid = find(&svc, "records", &["job", "p"]).unwrap()[2].clone();
    cancel_running(&redis.url(), "r", "p");
    eventually(
        Duration::from_secs(10),
        "the program heard the cancel",
        || async { find(&svc, "records", &["cancel", "p", &pid]).is_some() },
    )
    .await;
    q.enqueue("r", Job::new("plain").id("after")).await.unwrap();
    eventually(Duration::from_secs(10), "the next job ran", || async {
        find(&svc, "records", &["job", "after"]).is_some()
    })
    .await;
    assert_eq!(find(&svc, "records", &["job", "after"]).unwrap()[2], pid);
    eventually(Duration::from_secs(10), "after done", || async {
        live(&q, "r").await == 0
    })
    .await;

    // It does not stop: after the grace its group is replaced.
    q.enqueue("r", Job::new("stubborn").id("s")).await.unwrap();
    eventually(Duration::from_secs(10), "s running", || async {
        find(&svc, "records", &["job", "s"]).is_some()
    })
    .await;
    let old: i32 = pid.parse().unwrap();
    cancel_running(&redis.url(), "r", "s");
    eventually(Duration::from_secs(20), "the program replaced", || async {
        gone(old)
            && lines(&svc, "records")
                .iter()
                .filter(|l| l[0] == "ready")
                .count()
                == 2
    })
    .await;

    let s = q.stats("r").await.unwrap();
    assert_eq!(s.pool + s.ready + s.running + s.dead, 0, "{s:?}");
    assert_eq!(
        (counter(&s, "cancelled"), counter(&s, "done")),
        (2, 1),
        "{s:?}"
    );
    for c in ["retried", "dead", "reclaimed"] {
        assert_eq!(counter(&s, c), 0, "{c}: {s:?}");
    }
    assert!(
        svc.log().contains("did not end within cancel_grace"),
        "{}",
        svc.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_worker_is_killed_between_the_cancel_and_its_effect_ends_cancelled() {
    let redis = RedisServer::start();
    let mut svc = Service::new();
    let handler = svc.script(
        "handler.sh",
        r#"cat > /dev/null
echo "started $PUNCTUAL_JOB_ID $PPID" >> "$(dirname "$0")/events"
[ "$PUNCTUAL_JOB_ID" = "victim" ] && sleep 60
echo "ended $PUNCTUAL_JOB_ID" >> "$(dirname "$0")/events"
"#,
    );
    // A short lease: were the job still leased, a scheduler would reclaim
    // it about a second after its worker died.
    svc.config(
        &redis.url(),
        "lease = \"1s\"",
        &format!(
            "[topics.t]\nexec = [{:?}]\ntimeout = \"120s\"\nbackoff = [\"0s\"]",
            handler.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("victim")).await.unwrap();
    eventually(Duration::from_secs(20), "victim running", || async {
        find(&svc, "events", &["started", "victim"]).is_some()
    })
    .await;
    // The worker process (the handler's parent) stops: it can hear nothing.
    let worker: i32 = find(&svc, "events", &["started", "victim"]).unwrap()[2]
        .parse()
        .unwrap();
    kill(Pid::from_raw(worker), Signal::SIGSTOP).unwrap();
    cancel_running(&redis.url(), "t", "victim");
    kill(Pid::from_raw(worker), Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(10), "the worker is gone", || async {
        gone(worker)
    })
    .await;

    // A job due 3 s from now (three leases) runs on the restarted worker:
    // by then a lease the cancel had left would have been reclaimed.
    q.enqueue("t", Job::new("x").id("later").delay(Duration::from_secs(3)))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "later done", || async {
        find(&svc, "events", &["ended", "later"]).is_some()
    })
    .await;
    eventually(Duration::from_secs(10), "later acked", || async {
        live(&q, "t").await == 0
    })
    .await;
    let s = q.stats("t").await.unwrap();
    assert_eq!(
        (counter(&s, "cancelled"), counter(&s, "done")),
        (1, 1),
        "{s:?}"
    );
    for c in ["retried", "dead", "reclaimed"] {
        assert_eq!(counter(&s, c), 0, "{c}: {s:?}");
    }
    let victim_runs = lines(&svc, "events")
        .iter()
        .filter(|l| l[0] == "started" && l[1] == "victim")
        .count();
    assert_eq!(victim_runs, 1, "the cancelled job ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_after_the_job_ended_reports_it_done_and_changes_nothing() {
    let redis = RedisServer::start();
    let mut svc = Service::new();
    let handler = svc.script("handler.sh", "cat > /dev/null\n");
    svc.config(
        &redis.url(),
        "",
        &format!("[topics.t]\nexec = [{:?}]", handler.display().to_string()),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("quick")).await.unwrap();
    eventually(Duration::from_secs(20), "quick done", || async {
        counter(&q.stats("t").await.unwrap(), "done") == 1
    })
    .await;
    let (code, out, err) = cli_cancel(&redis.url(), "t", "quick");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("no live job \"quick\"") && err.contains("it is done"),
        "{err}"
    );
    let s = q.stats("t").await.unwrap();
    assert_eq!(
        (counter(&s, "done"), counter(&s, "cancelled")),
        (1, 0),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_cli_cancel_reaches_exec_handlers_on_every_shard() {
    let c = punctual_testkit::RedisCluster::start();
    // One topic on each master.
    let mut topics: Vec<String> = Vec::new();
    let mut masters = std::collections::HashSet::new();
    for t in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"] {
        let m = c.master_of(&format!("punctual:{{{t}}}:jobs")).unwrap();
        if masters.insert(m) {
            topics.push(t.to_string());
        }
    }
    assert_eq!(topics.len(), 3, "a topic on each master");
    let mut svc = Service::new();
    let handler = svc.script(
        "handler.sh",
        r#"cat > /dev/null
here="$(dirname "$0")"
trap 'echo "term $PUNCTUAL_TOPIC" >> "$here/events"; exit 0' TERM
sleep 60 &
echo "started $PUNCTUAL_TOPIC" >> "$here/events"
wait
"#,
    );
    let sections: String = topics
        .iter()
        .map(|t| {
            format!(
                "[topics.{t}]\nexec = [{:?}]\ntimeout = \"120s\"\n",
                handler.display().to_string()
            )
        })
        .collect();
    svc.config(&c.seed_urls(), "lease = \"60s\"", &sections);
    svc.start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    for t in &topics {
        q.enqueue(t, Job::new("x").id("j")).await.unwrap();
    }
    eventually(Duration::from_secs(30), "every handler started", || async {
        topics
            .iter()
            .all(|t| find(&svc, "events", &["started", t]).is_some())
    })
    .await;
    // The CLI talks to one node only.
    let node = c.urls()[1].clone();
    for t in &topics {
        cancel_running(&node, t, "j");
    }
    eventually(
        Duration::from_secs(10),
        "every handler got SIGTERM",
        || async {
            topics
                .iter()
                .all(|t| find(&svc, "events", &["term", t]).is_some())
        },
    )
    .await;
    for t in &topics {
        assert_ended_cancelled(&q, t, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_clients_cancel_stops_a_running_job_too() {
    // The clients run their copy of the cancel script (clients_lua.rs keeps
    // it identical): the worker hears their cancel as the CLI's.
    if provision::skipped("python") {
        return;
    }
    let python = provision::python().unwrap_or_else(|e| panic!("{e}"));
    let redis = RedisServer::start();
    let mut svc = Service::new();
    let handler = svc.script(
        "handler.sh",
        r#"cat > /dev/null
here="$(dirname "$0")"
trap 'echo "term $PUNCTUAL_JOB_ID" >> "$here/events"; exit 0' TERM
sleep 60 &
echo "started $PUNCTUAL_JOB_ID" >> "$here/events"
wait
"#,
    );
    svc.config(
        &redis.url(),
        "lease = \"60s\"",
        &format!(
            "[topics.t]\nexec = [{:?}]\ntimeout = \"120s\"",
            handler.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("py")).await.unwrap();
    eventually(Duration::from_secs(20), "the handler started", || async {
        find(&svc, "events", &["started", "py"]).is_some()
    })
    .await;
    let out = Command::new(python)
        .arg("-c")
        .arg(
            "import sys, redis, punctual\n\
             p = punctual.Producer(redis.Redis.from_url(sys.argv[1]))\n\
             print(p.cancel('t', 'py'))",
        )
        .arg(redis.url())
        .env("PYTHONPATH", provision::clients_dir().join("python"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.trim(), "running");
    eventually(
        Duration::from_secs(10),
        "the handler got SIGTERM",
        || async { find(&svc, "events", &["term", "py"]).is_some() },
    )
    .await;
    assert_ended_cancelled(&q, "t", 1).await;
    // In the audit trail as the CLI's cancel is: who (the client's name),
    // from (host/pid), and what it found.
    let trail = punctual::internal::audit::read(&q, 10)
        .await
        .unwrap()
        .entries;
    assert_eq!(trail.len(), 1, "{trail:?}");
    let e = &trail[0];
    assert_eq!(
        (e.who.as_str(), e.action.as_str(), e.topic.as_deref()),
        ("python", "cancel", Some("t")),
        "{e:?}"
    );
    assert_eq!(e.detail, serde_json::json!({"id": "py", "was": "running"}));
    assert!(e.from.contains('/'), "host/pid: {e:?}");
}

/// The start of a Python resident program of these tests: the client from
/// the path in argv[1], and `record(line)`, which appends to `records`.
macro_rules! py_prelude {
    () => {
        r#"import os, sys
sys.path.insert(0, sys.argv[1])
import punctual
here = os.path.dirname(os.path.abspath(__file__))
def record(line):
    with open(os.path.join(here, "records"), "a") as f:
        f.write(line + "\n")
"#
    };
}

/// A resident program on a client's sequential loop (Python's `run`,
/// PHP's `Worker::run`): a `wait` job looks at `cancelled()` between
/// steps until it says so. Records `job ID PID` and `cancelled ID PID`.
const PY_SEQUENTIAL: &str = concat!(
    "import time\n",
    py_prelude!(),
    r#"def handle(job):
    record("job %s %d" % (job.id, os.getpid()))
    if job.payload == b"wait":
        deadline = time.monotonic() + 60
        while not job.cancelled():
            if time.monotonic() > deadline:
                raise punctual.Dead("never told")
            time.sleep(0.02)
        record("cancelled %s %d" % (job.id, os.getpid()))
        raise punctual.Retry("stopped: cancelled")
punctual.run(handle)
"#
);

const PHP_SEQUENTIAL: &str = r#"<?php
require $argv[1] . '/tests/bootstrap.php';
$record = fn (string $line) => file_put_contents(__DIR__ . '/records', "$line\n", FILE_APPEND);
Punctual\Worker::run(function (Punctual\Job $job) use ($record): void {
    $record("job {$job->id} " . getmypid());
    if ($job->payload === 'wait') {
        $deadline = microtime(true) + 60;
        while (!$job->cancelled()) {
            if (microtime(true) > $deadline) {
                throw new Punctual\Dead('never told');
            }
            usleep(20000);
        }
        $record("cancelled {$job->id} " . getmypid());
        throw new Punctual\Retry('stopped: cancelled');
    }
});
"#;

/// Runs `program` (PY_SEQUENTIAL, PHP_SEQUENTIAL or PY_ASYNC) as a
/// resident handler with `interpreter`, through
/// [`a_client_loop_tells_its_handler`] (jobs pushed by the CLI).
async fn a_client_loop_runs(interpreter: &str, file: &str, program: &str, client: &str) {
    let redis = RedisServer::start();
    let mut svc = Service::new();
    let program = svc.script(file, program);
    let client = provision::clients_dir().join(client);
    svc.config(
        &redis.url(),
        "workers = 1\nlease = \"60s\"\ncancel_grace = \"1h\"",
        &format!(
            "[topics.r]\nresident = [{:?}, {:?}, {:?}]\ntimeout = \"120s\"",
            interpreter,
            program.display().to_string(),
            client.display().to_string()
        ),
    );
    svc.start();
    a_client_loop_tells_its_handler(&svc, &redis.url(), "r", |id, what| {
        punctual_at(&redis.url(), &["push", "r", "--id", id, what], b"").ok();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_clients_sequential_loop_tells_the_handler() {
    python_loop_tells_its_handler(PY_SEQUENTIAL).await;
}

/// [`a_client_loop_tells_its_handler`] with the Python client.
async fn python_loop_tells_its_handler(program: &str) {
    if provision::skipped("python") {
        return;
    }
    let python = provision::python().unwrap_or_else(|e| panic!("{e}"));
    a_client_loop_runs(
        &python.display().to_string(),
        "worker.py",
        program,
        "python",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_php_clients_loop_tells_the_handler() {
    if provision::skipped("php") {
        return;
    }
    a_client_loop_runs("php", "worker.php", PHP_SEQUENTIAL, "php").await;
}

/// A resident program on the Python client's `run_async`: a `wait` job
/// sleeps until its task is cancelled. Records `job ID PID` and
/// `cancelled ID PID`.
const PY_ASYNC: &str = concat!(
    "import asyncio\n",
    py_prelude!(),
    r#"async def handle(job):
    record("job %s %d" % (job.id, os.getpid()))
    if job.payload == b"wait":
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            record("cancelled %s %d" % (job.id, os.getpid()))
            raise
asyncio.run(punctual.run_async(handle, inflight=2))
"#
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_clients_async_loop_cancels_the_handlers_task() {
    python_loop_tells_its_handler(PY_ASYNC).await;
}

/// A program on the Python client's sequential loop (look-ahead 16): a
/// `sleep` job sleeps 2 s; any other is done at once. Records `job ID PID`.
const PY_AHEAD: &str = concat!(
    "import time\n",
    py_prelude!(),
    r#"def handle(job):
    record("job %s %d" % (job.id, os.getpid()))
    if job.payload == b"sleep":
        time.sleep(2)
punctual.run(handle)
"#
);

/// Look-ahead (docs/RESIDENT.md): b is written to the program behind a, a
/// 2 s job; an operator cancels b. The program reads the cancel before it
/// would start b and does not start it; it is not killed for it, also with
/// `cancel_grace = "0s"`, where the worker gives up on b at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_written_ahead_and_cancelled_is_not_started_and_its_program_stays() {
    if provision::skipped("python") {
        return;
    }
    let python = provision::python().unwrap_or_else(|e| panic!("{e}"));
    let redis = RedisServer::start();
    let mut svc = Service::new();
    let program = svc.script("ahead.py", PY_AHEAD);
    let client = provision::clients_dir().join("python");
    svc.config(
        &redis.url(),
        "workers = 1\nlease = \"60s\"\ncancel_grace = \"0s\"",
        &format!(
            "[topics.r]\nresident = [{:?}, {:?}, {:?}]\nprocesses = 1\nlookahead_budget = \"1s\"",
            python.display().to_string(),
            program.display().to_string(),
            client.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();
    // Short jobs first: the program is written jobs ahead once its jobs
    // are known to be short.
    let warm: Vec<Job> = (0..20).map(|i| Job::new("x").id(format!("w{i}"))).collect();
    q.enqueue_batch("r", warm).await.unwrap();
    eventually(Duration::from_secs(60), "the warm-up done", || async {
        counter(&q.stats("r").await.unwrap(), "done") == 20
    })
    .await;
    q.enqueue("r", Job::new("sleep").id("a")).await.unwrap();
    eventually(Duration::from_secs(20), "a running", || async {
        find(&svc, "records", &["job", "a"]).is_some()
    })
    .await;
    q.enqueue("r", Job::new("x").id("b")).await.unwrap();
    eventually(Duration::from_secs(20), "b leased", || async {
        matches!(q.get("r", "b").await.unwrap(), Some(j) if j.state == punctual::State::Running)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, _, err) = cli_cancel(&redis.url(), "r", "b");
    assert_eq!(code, 0, "{err}");
    q.enqueue("r", Job::new("x").id("after")).await.unwrap();
    eventually(Duration::from_secs(30), "a and after done", || async {
        counter(&q.stats("r").await.unwrap(), "done") == 22
    })
    .await;
    let log = svc.log();
    assert!(
        log.contains("told to its resident program"),
        "b was written ahead and its program told; log:\n{log}"
    );
    assert!(find(&svc, "records", &["job", "b"]).is_none(), "b started");
    let pid = &find(&svc, "records", &["job", "a"]).unwrap()[2];
    assert_eq!(
        &find(&svc, "records", &["job", "after"]).unwrap()[2],
        pid,
        "the program was kept"
    );
    assert!(!log.contains("killing its resident program"), "{log}");
    let s = q.stats("r").await.unwrap();
    assert_eq!(s.pool + s.ready + s.running + s.dead, 0, "{s:?}");
    assert_eq!(
        (counter(&s, "cancelled"), counter(&s, "retried")),
        (1, 0),
        "{s:?}"
    );
}
