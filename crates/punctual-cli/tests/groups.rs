//! Fair groups through the binary: `punctual groups TOPIC` and
//! `GET /api/v1/topics/{topic}/groups`; group limits: `punctual topic limits
//! --group-*`, `punctual groups TOPIC limit GROUP`, and
//! `/api/v1/topics/{topic}/group-limits`.

mod support;

use std::time::Duration;

use punctual::{raw, Job, Limits, Queue};
use punctual_testkit::RedisServer;
use serde_json::{json, Value};
use support::{punctual, Server, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_listed_by_the_cli_and_the_api() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    let (code, out, err) = punctual(&url, &["groups", "mail"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "topic \"mail\": no active groups (no grouped job is ready)\n"
    );
    q.enqueue("mail", Job::new("u")).await.unwrap();
    for _ in 0..3 {
        q.enqueue("mail", Job::new("x").group("shop-1"))
            .await
            .unwrap();
    }
    let (code, out, err) = punctual(&url, &["groups", "mail"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        vec![
            vec!["GROUP", "INDEXED", "VTIME", "RUNNING", "HELD", "LIMITS"],
            vec!["(none)", "1", "0", "0", "-", "none"],
            vec!["shop-1", "3", "0", "0", "-", "none"],
        ]
    );
    let (code, out, err) = punctual(&url, &["groups", "mail", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let none = json!({"rate": null, "burst": null, "max_running": null});
    let want = json!({"topic": "mail", "groups": [
        {"group": "", "indexed": 1, "vtime": 0.0, "running": 0, "held": null, "limits": none},
        {"group": "shop-1", "indexed": 3, "vtime": 0.0, "running": 0, "held": null, "limits": none},
    ]});
    assert_eq!(v, want);
    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let (status, v) = api.authed("GET", "/api/v1/topics/mail/groups", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, want);
    let (status, _) = api.authed("GET", "/api/v1/topics/a%7Bb/groups", None).await;
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_limits_are_set_and_shown_by_the_cli_and_the_api() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    // The default of every group.
    let (code, out, err) = punctual(
        &url,
        &[
            "topic",
            "limits",
            "mail",
            "--group-rate",
            "10/s",
            "--group-max-running",
            "1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "mail: none\nmail: each group: rate 10/s, burst 1 (default), max running 1\n"
    );
    let every = Limits::default()
        .rate("10/s".parse().unwrap())
        .max_running(1);
    assert_eq!(q.group_limits("mail").await.unwrap().default, every);
    // One group's own.
    let (code, out, err) = punctual(
        &url,
        &["groups", "mail", "limit", "shop-2", "--max-running", "3"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "mail group \"shop-2\": rate 10/s, burst 1 (default), max running 3 (its own)\n"
    );
    assert_eq!(
        q.group_limits("mail").await.unwrap().of("shop-2"),
        every.max_running(3)
    );
    let (code, _, _) = punctual(
        &url,
        &["groups", "mail", "limit", "bad name", "--max-running", "3"],
    );
    assert_eq!(code, 2);
    // Listed with its running jobs and why it is held back.
    for g in ["shop-1", "shop-1", "shop-2"] {
        q.enqueue("mail", Job::new("x").group(g)).await.unwrap();
    }
    let got = raw::claim(&q, &"mail".parse().unwrap(), 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    let (code, out, err) = punctual(&url, &["groups", "mail"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[1][0..5],
        ["shop-1", "1", "0", "1", "max_running"],
        "{out}"
    );
    assert_eq!(lines[2][0..4], ["shop-2", "0", "0", "1"], "{out}");
    let (_, out, _) = punctual(&url, &["groups", "mail", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["groups"][0]["held"], json!({"running_ends": true}));
    assert_eq!(v["groups"][1]["limits"]["max_running"], 3);
    // Through the API.
    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let (status, v) = api
        .authed("GET", "/api/v1/topics/mail/group-limits", None)
        .await;
    assert_eq!(status, 200, "{v}");
    let lim = |r: Value, b: Value, m: Value| json!({"rate": r, "burst": b, "max_running": m});
    assert_eq!(
        v,
        json!({"topic": "mail", "default": lim(json!("10/s"), Value::Null, json!(1)),
               "groups": {"shop-2": lim(json!("10/s"), Value::Null, json!(3))}})
    );
    let body = json!({"max_running": 2}).to_string();
    let (status, v) = api
        .authed(
            "PUT",
            "/api/v1/topics/mail/group-limits/shop-3",
            Some(&body),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["groups"]["shop-3"],
        lim(Value::Null, Value::Null, json!(2))
    );
    let (status, v) = api
        .authed("DELETE", "/api/v1/topics/mail/group-limits/shop-2", None)
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["groups"].get("shop-2").is_none(), "{v}");
    let (status, v) = api
        .authed("PUT", "/api/v1/topics/mail/group-limits", Some("{}"))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["default"], lim(Value::Null, Value::Null, Value::Null));
    let (status, _) = api
        .authed(
            "PUT",
            "/api/v1/topics/mail/group-limits",
            Some(r#"{"burst": 3}"#),
        )
        .await;
    assert_eq!(status, 400);
    let (code, out, _) = punctual(&url, &["groups", "mail", "limit", "shop-3", "--clear"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "mail group \"shop-3\": none (the defaults)\n")
    );
}
