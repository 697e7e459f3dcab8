//! Fair groups through the binary: `punctual groups TOPIC` and
//! `GET /api/v1/topics/{topic}/groups`.

mod support;

use std::process::{Command, Stdio};

use punctual::{Job, Queue};
use punctual_testkit::RedisServer;
use serde_json::{json, Value};
use support::{Server, BIN, TOKEN};

/// Runs `punctual --redis URL ARGS`: exit code, stdout, stderr.
fn punctual(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("--redis")
        .arg(url)
        .args(args)
        .env_remove("PUNCTUAL_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run punctual");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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
            vec!["GROUP", "INDEXED", "VTIME"],
            vec!["(none)", "1", "0"],
            vec!["shop-1", "3", "0"],
        ]
    );
    let (code, out, err) = punctual(&url, &["groups", "mail", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let want = json!({"topic": "mail", "groups": [
        {"group": "", "indexed": 1, "vtime": 0.0},
        {"group": "shop-1", "indexed": 3, "vtime": 0.0},
    ]});
    assert_eq!(v, want);
    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let (status, v) = api.authed("GET", "/api/v1/topics/mail/groups", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, want);
    let (status, _) = api.authed("GET", "/api/v1/topics/a%7Bb/groups", None).await;
    assert_eq!(status, 400);
}
