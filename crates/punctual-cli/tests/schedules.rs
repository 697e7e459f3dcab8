//! `punctual schedule` and `[schedules.NAME]` end to end: the real binary
//! against a private redis-server; `serve` fires a schedule from its config
//! and one added with the CLI, and a restart keeps both (no occurrence runs
//! twice).

mod support;

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use punctual::Queue;
use punctual_testkit::{eventually, RedisServer};
use serde_json::Value;
use support::{punctual, Service};

fn json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = punctual(url, &all);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

#[test]
fn schedule_add_list_pause_resume_rm_and_the_audit_trail() {
    let redis = RedisServer::start();
    let url = redis.url();
    let added = json(
        &url,
        &[
            "schedule",
            "add",
            "orders",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Berlin",
            "--payload",
            r#"{"kind":"close"}"#,
            "--catch-up",
            "latest",
        ],
    );
    assert_eq!(added["name"], "nightly");
    assert_eq!(added["catch_up"], "latest");
    assert_eq!(added["tz"], "Europe/Berlin");
    assert!(added["next_ms"].as_i64().unwrap() > added["created_ms"].as_i64().unwrap());
    // 03:00 in Berlin is 01:00 or 02:00 UTC.
    let next = added["next"].as_str().unwrap();
    assert!(
        next.contains("T01:00:00") || next.contains("T02:00:00"),
        "{next}"
    );

    let (code, out, err) = punctual(
        &url,
        &[
            "schedule",
            "add",
            "orders",
            "sweep",
            "--every",
            "5m",
            "--catch-up",
            "spread",
            "--spread",
            "10m",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("added schedule \"sweep\""), "{out}");

    let (code, out, _) = punctual(&url, &["schedule", "list", "orders"]);
    assert_eq!(code, 0);
    assert!(out.contains("NAME") && out.contains("NEXT"), "{out}");
    assert!(
        out.contains("nightly") && out.contains("0 3 * * *") && out.contains("Europe/Berlin"),
        "{out}"
    );
    assert!(
        out.contains("every 5m") && out.contains("spread 10m"),
        "{out}"
    );

    let (code, out, _) = punctual(&url, &["schedule", "pause", "orders", "nightly"]);
    assert_eq!(code, 0);
    assert!(out.contains("paused"), "{out}");
    let list = json(&url, &["schedule", "list", "orders"]);
    let nightly = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "nightly")
        .unwrap();
    assert_eq!(nightly["paused"], true);
    assert!(nightly["next_ms"].is_null());
    assert_eq!(
        punctual(&url, &["schedule", "resume", "orders", "nightly"]).0,
        0
    );
    let list = json(&url, &["schedule", "list", "orders"]);
    assert_eq!(list[0]["name"], "nightly");
    assert_eq!(list[0]["paused"], false);

    // Replacing keeps the creation time.
    let again = json(
        &url,
        &[
            "schedule",
            "add",
            "orders",
            "nightly",
            "--cron",
            "0 4 * * *",
            "--tz",
            "Europe/Berlin",
        ],
    );
    assert_eq!(again["created_ms"], added["created_ms"]);
    assert_eq!(again["cron"], "0 4 * * *");

    assert_eq!(
        punctual(&url, &["schedule", "rm", "orders", "nightly"]).0,
        0
    );
    let (code, _, err) = punctual(&url, &["schedule", "rm", "orders", "nightly"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no schedule \"nightly\""), "{err}");
    assert_eq!(
        json(&url, &["schedule", "list", "orders"])
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Bad input: exit 2, a message naming what is wrong, nothing written.
    for (args, says) in [
        (vec!["--cron", "61 * * * *"], "invalid cron expression"),
        (
            vec!["--cron", "* * * * *", "--tz", "Mars/Base"],
            "unknown time zone",
        ),
        (vec!["--every", "500ms"], "at least 1 s"),
        (
            vec!["--every", "1m", "--catch-up", "spread"],
            "needs a window",
        ),
    ] {
        let mut all = vec!["schedule", "add", "orders", "bad"];
        all.extend(args);
        let (code, out, err) = punctual(&url, &all);
        assert_eq!(code, 2, "{all:?}: {out}{err}");
        assert!(err.contains(says), "{all:?}: {err}");
    }
    assert_eq!(
        json(&url, &["schedule", "list", "orders"])
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let (code, out, _) = punctual(&url, &["audit"]);
    assert_eq!(code, 0);
    for action in [
        "schedule.add",
        "schedule.update",
        "schedule.pause",
        "schedule.resume",
        "schedule.rm",
    ] {
        assert!(out.contains(action), "audit lacks {action}:\n{out}");
    }
}

/// `serve` fires the config's schedule and one added with the CLI; after a
/// restart both are still there (same creation time) and keep firing; no
/// occurrence ran twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_fires_schedules_and_a_restart_keeps_them() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut svc = Service::new();
    let handler = svc.script(
        "handler.sh",
        r#"payload=$(cat)
echo "$PUNCTUAL_JOB_ID $payload" >> "$(dirname "$0")/records""#,
    );
    svc.config(
        &url,
        "workers = 1\nconcurrency = 4\nschedulers = 2",
        &format!(
            "[topics.t]\nexec = [{:?}]\n\n[schedules.tick]\ntopic = \"t\"\ncron = \"* * * * * *\"\npayload = \"from-config\"\n",
            handler.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(url.clone()).await.unwrap();
    eventually(
        Duration::from_secs(20),
        "the config's schedule stored",
        async || q.schedule("t", "tick").await.unwrap().is_some(),
    )
    .await;
    let created = q
        .schedule("t", "tick")
        .await
        .unwrap()
        .unwrap()
        .schedule
        .created_ms;
    let (code, out, err) = punctual(
        &url,
        &[
            "schedule",
            "add",
            "t",
            "every2",
            "--every",
            "2s",
            "--payload",
            "from-cli",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let count = |svc: &Service, prefix: &str| {
        svc.records()
            .iter()
            .filter(|r| r[0].starts_with(prefix))
            .count()
    };
    eventually(
        Duration::from_secs(20),
        "both schedules fired",
        async || count(&svc, "tick@") >= 3 && count(&svc, "every2@") >= 1,
    )
    .await;
    svc.signal(Signal::SIGTERM);
    assert!(svc.wait(Duration::from_secs(30)).success(), "{}", svc.log());
    let before = svc.records().len();

    svc.start();
    eventually(
        Duration::from_secs(30),
        "firing again after the restart",
        async || svc.records().len() >= before + 4 && count(&svc, "every2@") >= 2,
    )
    .await;
    svc.signal(Signal::SIGTERM);
    assert!(svc.wait(Duration::from_secs(30)).success(), "{}", svc.log());

    let info = q.schedule("t", "tick").await.unwrap().unwrap();
    assert_eq!(
        info.schedule.created_ms, created,
        "the restart kept the schedule"
    );
    assert!(q.schedule("t", "every2").await.unwrap().is_some());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in svc.records() {
        let want = if r[0].starts_with("tick@") {
            "from-config"
        } else {
            "from-cli"
        };
        assert_eq!(r[1], want, "{r:?}");
        *seen.entry(r[0].clone()).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "occurrences that ran twice: {twice:?}");
    // The audit trail names the config's schedule once (unchanged on restart).
    let (_, out, _) = punctual(&url, &["audit", "--json"]);
    let trail: Value = serde_json::from_str(&out).unwrap();
    let adds = trail
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "schedule.add" && e["who"] == "serve")
        .count();
    assert_eq!(adds, 1, "{out}");
}
