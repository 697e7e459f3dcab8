//! The audit trail end to end: replay, purge, cancel, pause and resume
//! through the real binary (CLI and `punctual api`) append who, what and
//! when to the capped LIST `punctual:audit`; `punctual audit` and
//! `GET /api/v1/audit` show it; a failed audit write hides nothing.

mod support;

use std::process::Command;
use std::time::Duration;

use punctual::raw::{self, FailKind, Failed};
use punctual::{Job, Queue};
use punctual_testkit::RedisServer;
use serde_json::Value;
use support::{output_text, punctual, Server, TOKEN};

/// The name of the OS user running the tests (what the CLI must record).
fn os_user() -> String {
    let out = Command::new("id").arg("-un").output().expect("run id -un");
    assert!(out.status.success(), "{}", output_text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Pushes jobs with these ids and kills them (claimed, failed permanently).
async fn make_dead(q: &Queue, topic: &str, ids: &[&str]) {
    for id in ids {
        q.enqueue(topic, Job::new("x").id(*id)).await.unwrap();
    }
    let claimed = raw::claim(
        q,
        &topic.parse().unwrap(),
        ids.len(),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), ids.len());
    for d in claimed {
        let r = raw::fail(
            q,
            &topic.parse().unwrap(),
            &d.lease(),
            "boom",
            FailKind::Permanent,
        )
        .await
        .unwrap();
        assert_eq!(r, Failed::Dead);
    }
}

fn audit_json(url: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["audit", "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = punctual(url, &args);
    assert_eq!(code, 0, "audit failed: {out}{err}");
    serde_json::from_str::<Value>(&out)
        .unwrap_or_else(|e| panic!("audit --json is not JSON ({e}): {out}"))
        .as_array()
        .unwrap_or_else(|| panic!("audit --json is not an array: {out}"))
        .clone()
}

#[tokio::test]
async fn cli_cancel_replay_and_purge_are_recorded_with_the_os_user() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.as_str()).await.unwrap();
    // First the dead ones: a claim takes any ready job.
    make_dead(&q, "orders", &["d1", "d2"]).await;
    q.enqueue("orders", Job::new("x").id("order:1"))
        .await
        .unwrap();

    let (code, out, err) = punctual(&url, &["cancel", "orders", "order:1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = punctual(&url, &["dead", "replay", "orders", "d1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = punctual(&url, &["dead", "purge", "orders", "d2"]);
    assert_eq!(code, 0, "{out}{err}");
    // A read and a cancel that found nothing change nothing: not recorded.
    let (code, _, _) = punctual(&url, &["get", "orders", "d1"]);
    assert_eq!(code, 0);
    let (code, _, _) = punctual(&url, &["cancel", "orders", "nope"]);
    assert_eq!(code, 1);

    let entries = audit_json(&url, &[]);
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        actions,
        ["dead.purge", "dead.replay", "cancel"],
        "newest first: {entries:#?}"
    );
    let user = os_user();
    for e in &entries {
        assert_eq!(e["who"], "cli", "{e}");
        assert_eq!(e["from"], user.as_str(), "{e}");
        assert_eq!(e["topic"], "orders", "{e}");
        let at = e["at_ms"].as_i64().unwrap_or(0);
        assert!(at > 1_700_000_000_000, "at_ms is epoch ms: {e}");
        assert!(e["at"].as_str().is_some_and(|s| s.contains('T')), "{e}");
    }
    assert_eq!(entries[2]["detail"]["id"], "order:1", "{:#}", entries[2]);
    assert_eq!(entries[2]["detail"]["was"], "ready", "{:#}", entries[2]);
    assert_eq!(entries[1]["detail"]["ids"][0], "d1", "{:#}", entries[1]);
    assert_eq!(entries[0]["detail"]["purged"], 1, "{:#}", entries[0]);

    // --limit, and the text form.
    assert_eq!(audit_json(&url, &["--limit", "1"]).len(), 1);
    let (code, text, err) = punctual(&url, &["audit"]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("WHO"), "{text}");
    assert!(text.contains(&format!("cli ({user})")), "{text}");
    assert!(text.contains("dead.replay"), "{text}");
}

#[tokio::test]
async fn api_changes_are_recorded_with_the_client_address() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.as_str()).await.unwrap();
    // First the dead ones: a claim takes any ready job.
    make_dead(&q, "orders", &["d1", "d2"]).await;
    q.enqueue("orders", Job::new("x").id("order:1"))
        .await
        .unwrap();
    let api = Server::api(&url, Some(TOKEN), &[]).await;

    for (method, path, body) in [
        ("POST", "/api/v1/topics/orders/pause", None),
        ("POST", "/api/v1/topics/orders/resume", None),
        ("DELETE", "/api/v1/topics/orders/jobs/order:1", None),
        (
            "POST",
            "/api/v1/topics/orders/dead/replay",
            Some(r#"{"ids": ["d1"], "rate": "50/10s"}"#),
        ),
        (
            "POST",
            "/api/v1/topics/orders/dead/purge",
            Some(r#"{"all": true}"#),
        ),
    ] {
        let (status, v) = api.authed(method, path, body).await;
        assert_eq!(status, 200, "{method} {path}: {v}");
    }
    // Refused calls and enqueues are not audited.
    let (status, _) = api
        .call("POST", "/api/v1/topics/orders/pause", None, None)
        .await;
    assert_eq!(status, 401);
    let (status, _) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/jobs",
            Some(r#"{"payload": 1}"#),
        )
        .await;
    assert_eq!(status, 201);

    let (status, v) = api.call("GET", "/api/v1/audit", None, None).await;
    assert_eq!(status, 200, "{v}");
    let entries = v["entries"].as_array().unwrap_or_else(|| panic!("{v}"));
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        actions,
        ["dead.purge", "dead.replay", "cancel", "resume", "pause"],
        "{v:#}"
    );
    for e in entries {
        assert_eq!(e["who"], "api", "{e}");
        let from = e["from"].as_str().unwrap_or("");
        assert!(from.starts_with("127.0.0.1:"), "client address: {e}");
        assert_eq!(e["topic"], "orders", "{e}");
    }
    assert_eq!(entries[0]["detail"]["purged"], 1, "{v:#}");
    assert_eq!(entries[2]["detail"]["id"], "order:1", "{v:#}");
    assert_eq!(entries[1]["detail"]["rate"], "50/10s", "{v:#}");

    let (status, v) = api.call("GET", "/api/v1/audit?limit=2", None, None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["entries"].as_array().map(Vec::len), Some(2), "{v}");
    let (status, v) = api.call("GET", "/api/v1/audit?limit=0", None, None).await;
    assert_eq!(status, 400, "{v}");

    // The CLI reads what the API wrote.
    assert_eq!(audit_json(&url, &[]).len(), 5);
}

#[tokio::test]
async fn a_failed_audit_write_does_not_hide_the_result() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.as_str()).await.unwrap();
    for id in ["a", "b"] {
        q.enqueue("orders", Job::new("x").id(id)).await.unwrap();
    }
    // The audit key holds something else: every LPUSH fails (WRONGTYPE).
    redis.cli(&["SET", "punctual:audit", "not a list"]).unwrap();

    let (code, out, err) = punctual(&url, &["cancel", "orders", "a"]);
    assert_eq!(code, 0, "the cancel itself worked: {out}{err}");
    assert!(out.contains("cancelled"), "{out}");
    assert!(err.contains("audit"), "a warning says so: {err}");
    assert!(q.get("orders", "a").await.unwrap().is_none());

    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let (status, v) = api
        .authed("DELETE", "/api/v1/topics/orders/jobs/b", None)
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["cancelled"], true, "{v}");
    assert!(q.get("orders", "b").await.unwrap().is_none());
    punctual_testkit::eventually(Duration::from_secs(5), "a warning in the log", || async {
        api.log().contains("audit")
    })
    .await;

    // Reading a trail that is not a list is an error that says what to do.
    let (code, out, err) = punctual(&url, &["audit"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("punctual:audit"), "{err}");
}

#[tokio::test]
async fn the_trail_keeps_the_newest_10000_entries() {
    let redis = RedisServer::start();
    let url = redis.url();
    // 10,000 old entries already there.
    let mut args = vec!["RPUSH".to_string(), "punctual:audit".to_string()];
    for i in 0..10_000 {
        args.push(format!(
            r#"{{"at_ms":{},"who":"cli","from":"old","action":"cancel","topic":"t","detail":{{}}}}"#,
            1_700_000_000_000i64 + i
        ));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    redis.cli(&refs).unwrap();
    let q = Queue::connect(url.as_str()).await.unwrap();
    q.enqueue("orders", Job::new("x").id("a")).await.unwrap();

    let (code, out, err) = punctual(&url, &["cancel", "orders", "a"]);
    assert_eq!(code, 0, "{out}{err}");
    let len = redis.cli(&["LLEN", "punctual:audit"]).unwrap();
    assert_eq!(len.trim(), "10000");
    let newest = audit_json(&url, &["--limit", "1"]);
    assert_eq!(newest[0]["from"], os_user().as_str(), "{newest:?}");
    assert_eq!(audit_json(&url, &["--limit", "10000"]).len(), 10_000);
}

#[tokio::test]
async fn a_paced_replay_is_recorded_and_reported_as_its_rate_or_spread() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.as_str()).await.unwrap();
    make_dead(&q, "orders", &["r1", "r2", "s1"]).await;

    let (code, out, err) = punctual(
        &url,
        &["dead", "replay", "orders", "r1", "r2", "--rate", "100/s"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("due from now until 10ms from now (100/s"),
        "the message names the pacing: {out}"
    );
    // One job paced: due now, not "from now until 0ms from now".
    let (code, out, err) = punctual(&url, &["dead", "replay", "orders", "s1", "--spread", "10m"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("0ms from now"), "{out}");
    assert!(out.contains("due now"), "{out}");

    let entries = audit_json(&url, &[]);
    assert_eq!(entries[0]["detail"]["spread"], "10m", "{:#}", entries[0]);
    assert_eq!(entries[1]["detail"]["rate"], "100/s", "{:#}", entries[1]);
    for e in &entries {
        assert!(e["detail"].get("pace").is_none(), "no debug text: {e}");
    }
    let (code, text, err) = punctual(&url, &["audit"]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("rate=100/s"), "{text}");
    assert!(text.contains("spread=10m"), "{text}");
    assert!(!text.contains("Rate {"), "{text}");
}
