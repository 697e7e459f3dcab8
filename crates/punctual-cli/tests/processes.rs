//! The process registry and the overdue signal, end to end: the real
//! binary (`serve`, `ps`, `doctor`, `api`), a real redis-server.

mod support;

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual::{Job, Queue};
use punctual_testkit::eventually;
use punctual_testkit::RedisServer;
use serde_json::Value;
use support::{live, metric, output_text, Server, Service, BIN};

/// `punctual ps --json` (plus `extra`): the records.
fn ps(redis: &str, extra: &[&str]) -> Vec<Value> {
    let out = Command::new(BIN)
        .args(["--redis", redis, "ps", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["processes"]
        .as_array()
        .unwrap()
        .clone()
}

fn roles(procs: &[Value]) -> Vec<String> {
    let mut r: Vec<String> = procs
        .iter()
        .map(|p| p["role"].as_str().unwrap().to_string())
        .collect();
    r.sort();
    r
}

/// `punctual doctor`: exit code and text.
fn doctor(redis: &str, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(["--redis", redis, "doctor", "--pings", "5"])
        .args(extra)
        .output()
        .unwrap();
    (out.status.code(), output_text(&out))
}

/// `/healthz`: status code and body.
async fn healthz(port: u16) -> (u16, Value) {
    let r = reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .unwrap();
    let code = r.status().as_u16();
    (
        code,
        serde_json::from_str(&r.text().await.unwrap()).unwrap(),
    )
}

async fn get_json(url: String) -> Value {
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_scheduler_turns_gauges_healthz_and_doctor_red_and_they_recover() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut svc = Service::new();
    let handler = svc.script("handler.sh", "cat > /dev/null");
    svc.config(
        &url,
        "workers = 1\nschedulers = 1\nheartbeat = \"500ms\"\noverdue_alert = \"1s\"",
        &format!(
            "[topics.orders]\nexec = [{:?}]",
            handler.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(url.clone()).await.unwrap();

    // Every process of the service is in the registry.
    eventually(
        Duration::from_secs(20),
        "three processes registered",
        || async { roles(&ps(&url, &[])) == ["scheduler", "supervisor", "worker"] },
    )
    .await;
    let procs = ps(&url, &[]);
    let sup = procs.iter().find(|p| p["role"] == "supervisor").unwrap();
    assert_eq!(sup["pid"], svc.pid().as_raw());
    let sched = procs.iter().find(|p| p["role"] == "scheduler").unwrap();
    let sup_id = sup["id"].as_str().unwrap();
    assert_eq!(sched["id"], format!("{sup_id}/scheduler-0"));
    assert_eq!(sched["topics"], serde_json::json!(["orders"]));
    assert_eq!(sched["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(sched["beat_period_ms"], 500);
    let sched_pid = sched["pid"].as_i64().unwrap() as i32;
    let (code, h) = healthz(svc.http).await;
    assert_eq!((code, &h["status"]), (200, &Value::from("ok")), "{h}");
    // The API and /metrics read the same registry.
    let api = get_json(format!("http://127.0.0.1:{}/api/v1/processes", svc.http)).await;
    assert_eq!(api["processes"].as_array().unwrap().len(), 3, "{api}");
    let m = svc.metrics().await;
    for role in ["supervisor", "worker", "scheduler"] {
        assert_eq!(
            metric(
                &m,
                &format!("punctual_processes{{role=\"{role}\",topic=\"orders\"}}")
            ),
            Some(1.0),
            "{m}"
        );
    }

    // The scheduler stops (SIGSTOP: alive to the supervisor, silent in
    // Redis); due jobs of a topic with groups stay in the pool (workers
    // claim due jobs from the pool themselves only on topics without
    // groups).
    kill(Pid::from_raw(sched_pid), Signal::SIGSTOP).unwrap();
    for i in 0..5 {
        q.enqueue(
            "orders",
            Job::new("x")
                .id(format!("o{i}"))
                .group("g")
                .delay(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    }
    eventually(
        Duration::from_secs(15),
        "the overdue gauges rise",
        || async {
            let m = svc.metrics().await;
            metric(&m, "punctual_overdue_jobs{topic=\"orders\"}") == Some(5.0)
                && metric(&m, "punctual_overdue_seconds{topic=\"orders\"}").unwrap_or(0.0) > 1.0
                && metric(
                    &m,
                    "punctual_processes{role=\"scheduler\",topic=\"orders\"}",
                ) == Some(0.0)
        },
    )
    .await;
    let (code, h) = healthz(svc.http).await;
    assert_eq!(code, 503, "{h}");
    assert_eq!(h["status"], "degraded", "{h}");
    let reasons = h["reasons"].to_string();
    assert!(
        reasons.contains("topic orders: 5 jobs overdue by up to")
            && reasons.contains("no scheduler alive"),
        "{h}"
    );
    let (code, text) = doctor(&url, &["--overdue-alert", "1s"]);
    assert_eq!(code, Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("topic orders:"))
        .unwrap_or_else(|| panic!("no line for topic orders:\n{text}"));
    assert!(
        line.starts_with("FAIL")
            && line.contains("5 jobs overdue by up to")
            && line.contains("no scheduler alive"),
        "{line}"
    );
    let topic = get_json(format!(
        "http://127.0.0.1:{}/api/v1/topics/orders",
        svc.http
    ))
    .await;
    assert_eq!(topic["overdue"], 5, "{topic}");
    assert!(topic["overdue_ms"].as_i64().unwrap() > 1000, "{topic}");
    assert_eq!(topic["status"], "overdue", "{topic}");

    // The scheduler resumes: everything turns green again.
    kill(Pid::from_raw(sched_pid), Signal::SIGCONT).unwrap();
    eventually(Duration::from_secs(20), "recovered", || async {
        let m = svc.metrics().await;
        live(&q, "orders").await == 0
            && metric(&m, "punctual_overdue_jobs{topic=\"orders\"}") == Some(0.0)
            && metric(
                &m,
                "punctual_processes{role=\"scheduler\",topic=\"orders\"}",
            ) == Some(1.0)
            && healthz(svc.http).await.0 == 200
    })
    .await;
    let (_, text) = doctor(&url, &["--overdue-alert", "1s"]);
    assert!(!text.contains("overdue by"), "{text}");
    let topic = get_json(format!(
        "http://127.0.0.1:{}/api/v1/topics/orders",
        svc.http
    ))
    .await;
    assert_eq!(topic["status"], "active", "{topic}");

    // A clean stop leaves nothing behind.
    svc.signal(Signal::SIGTERM);
    assert!(svc.wait(Duration::from_secs(15)).success());
    assert!(ps(&url, &[]).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_leaves_the_registry_within_one_beat_and_its_successor_joins() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut svc = Service::new();
    let handler = svc.script("handler.sh", "cat > /dev/null");
    // The default beat: 5 s, so the record alone would live 15 s.
    svc.config(
        &url,
        "workers = 1\nschedulers = 1",
        &format!(
            "[topics.orders]\nexec = [{h:?}]\n[topics.mails]\nexec = [{h:?}]",
            h = handler.display().to_string()
        ),
    );
    svc.start();
    eventually(Duration::from_secs(20), "worker registered", || async {
        ps(&url, &["--topic", "orders"])
            .iter()
            .any(|p| p["role"] == "worker")
    })
    .await;
    let worker = ps(&url, &[])
        .into_iter()
        .find(|p| p["role"] == "worker")
        .unwrap();
    let (id, pid) = (
        worker["id"].as_str().unwrap().to_string(),
        worker["pid"].as_i64().unwrap() as i32,
    );
    assert!(id.ends_with("/worker-0"), "{id}");
    assert_eq!(worker["topics"], serde_json::json!(["mails", "orders"]));
    assert!(ps(&url, &["--topic", "other"]).is_empty());

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    eventually(
        Duration::from_secs(5),
        "the killed worker's record is gone",
        || async { !ps(&url, &[]).iter().any(|p| p["pid"] == pid) },
    )
    .await;
    eventually(
        Duration::from_secs(20),
        "its successor registered",
        || async {
            ps(&url, &[])
                .iter()
                .any(|p| p["id"] == id.as_str() && p["pid"] != pid)
        },
    )
    .await;

    // The text listing names each process.
    let out = Command::new(BIN)
        .args(["--redis", &url, "ps"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    for word in [
        "ROLE",
        "supervisor",
        "worker",
        "scheduler",
        "mails,orders",
        &id,
    ] {
        assert!(text.contains(word), "no {word} in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_jobs_and_no_worker_is_not_active_and_api_healthz_says_why() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    q.enqueue("orders", Job::new("x").delay(Duration::from_millis(50)))
        .await
        .unwrap();
    q.enqueue("later", Job::new("x").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    q.enqueue(
        "idle",
        Job::new("x").id("i1").delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    q.cancel("idle", "i1").await.unwrap();
    let api = Server::api(&url, None, &["--overdue-alert", "500ms"]).await;
    let (_, topic) = api.call("GET", "/api/v1/topics/later", None, None).await;
    assert_eq!(topic["status"], "no consumer", "{topic}");
    assert_eq!(topic["workers"], 0, "{topic}");
    let (_, idle) = api.call("GET", "/api/v1/topics/idle", None, None).await;
    assert_eq!(idle["status"], "idle", "{idle}");
    eventually(Duration::from_secs(10), "api healthz degraded", || async {
        healthz(api.port).await.0 == 503
    })
    .await;
    let (_, h) = healthz(api.port).await;
    assert_eq!(h["status"], "degraded", "{h}");
    let (_, topic) = api.call("GET", "/api/v1/topics/orders", None, None).await;
    assert_eq!(topic["status"], "overdue", "{topic}");
    assert!(
        h["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("topic orders: 1 jobs overdue by up to"),
        "{h}"
    );
    let (code, text) = doctor(&url, &["--overdue-alert", "500ms"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("topic orders: 1 jobs overdue by up to")
            && text.contains("topic later: 1 jobs waiting or running; no worker alive"),
        "{text}"
    );
}

/// A resident program (docs/RESIDENT.md) that says every job is done.
const RESIDENT: &str = r#"import json, os
jobs = os.fdopen(int(os.environ["PUNCTUAL_JOBS_FD"]), "rb")
replies = os.fdopen(int(os.environ["PUNCTUAL_REPLIES_FD"]), "w")
def send(msg):
    replies.write(json.dumps(msg) + "\n")
    replies.flush()
send({"type": "ready", "protocol": 1, "inflight": 1})
for line in jobs:
    send({"type": "done", "id": json.loads(line)["id"]})
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resident_programs_are_listed_under_their_worker_and_leave_with_it() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut svc = Service::new();
    let program = svc.path("mail.py");
    std::fs::write(&program, RESIDENT).unwrap();
    svc.config(
        &url,
        "workers = 1\nschedulers = 1",
        &format!(
            "[topics.mail]\nresident = [\"python3\", {:?}]\nprocesses = 2",
            program.display().to_string()
        ),
    );
    svc.start();
    eventually(
        Duration::from_secs(20),
        "two resident programs registered",
        || async {
            ps(&url, &[])
                .iter()
                .filter(|p| p["role"] == "resident")
                .count()
                == 2
        },
    )
    .await;
    let procs = ps(&url, &["--topic", "mail"]);
    let worker = procs.iter().find(|p| p["role"] == "worker").unwrap();
    let wid = worker["id"].as_str().unwrap();
    let mut pids = Vec::new();
    for r in procs.iter().filter(|p| p["role"] == "resident") {
        let id = r["id"].as_str().unwrap();
        assert!(id.starts_with(&format!("{wid}/resident-mail-")), "{id}");
        assert_eq!(r["topics"], serde_json::json!(["mail"]));
        let pid = r["pid"].as_i64().unwrap() as i32;
        // The record names the program, not the worker.
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(cmdline.contains("mail.py"), "{cmdline}");
        pids.push(pid);
    }
    // The worker dies at once: its programs' records go with its own.
    kill(
        Pid::from_raw(worker["pid"].as_i64().unwrap() as i32),
        Signal::SIGKILL,
    )
    .unwrap();
    eventually(
        Duration::from_secs(5),
        "the old programs' records are gone",
        || async {
            !ps(&url, &[])
                .iter()
                .any(|p| pids.contains(&(p["pid"].as_i64().unwrap() as i32)))
        },
    )
    .await;
    // A clean stop removes every record.
    eventually(
        Duration::from_secs(20),
        "the new worker's programs registered",
        || async {
            ps(&url, &[])
                .iter()
                .filter(|p| p["role"] == "resident")
                .count()
                == 2
        },
    )
    .await;
    svc.signal(Signal::SIGTERM);
    assert!(svc.wait(Duration::from_secs(20)).success(), "{}", svc.log());
    assert!(ps(&url, &[]).is_empty());
}
