//! Topic limits through the binary: `punctual topic limits`, `stats`, the
//! API route, and `[topics.NAME]` rate / burst / max_running applied by
//! `serve` at start (which then holds the rate while running the jobs).

mod support;

use std::time::Duration;

use punctual::{Job, Limited, Limits, Queue};
use punctual_testkit::{eventually, RedisServer};
use serde_json::{json, Value};
use support::{punctual, Server, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_limits_sets_shows_changes_one_and_clears() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    let (code, out, err) = punctual(
        &url,
        &[
            "topic",
            "limits",
            "hooks",
            "--rate",
            "200/s",
            "--burst",
            "20",
            "--max-running",
            "50",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hooks: rate 200/s, burst 20, max running 50\n");
    assert_eq!(
        q.limits("hooks").await.unwrap(),
        Limits::default()
            .rate("200/s".parse().unwrap())
            .burst(20)
            .max_running(50)
    );
    // One option changes that limit only.
    let (code, out, _) = punctual(
        &url,
        &[
            "topic",
            "limits",
            "hooks",
            "--max-running",
            "none",
            "--json",
        ],
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v,
        json!({"topic": "hooks", "rate": "200/s", "burst": 20, "max_running": null})
    );
    // Shown without options.
    let (_, out, _) = punctual(&url, &["topic", "limits", "hooks"]);
    assert_eq!(out, "hooks: rate 200/s, burst 20\n");
    // Bad input: refused, nothing changed.
    for bad in [
        &["--rate", "fast"][..],
        &["--max-running", "0"],
        &["--rate", "0/s"],
        &["--clear", "--rate", "1/s"],
    ] {
        let mut args = vec!["topic", "limits", "hooks"];
        args.extend_from_slice(bad);
        let (code, _, err) = punctual(&url, &args);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
    assert_eq!(q.limits("hooks").await.unwrap().rate.unwrap().n, 200);
    let (code, out, _) = punctual(&url, &["topic", "limits", "hooks", "--clear"]);
    assert_eq!((code, out.as_str()), (0, "hooks: none\n"));
    assert!(q.limits("hooks").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_shows_which_limit_holds_jobs_back() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    q.set_limits("capped", &Limits::default().max_running(1))
        .await
        .unwrap();
    for i in 0..3 {
        q.enqueue("capped", Job::new("x").id(format!("{i}")))
            .await
            .unwrap();
    }
    let got = punctual::raw::claim(&q, &"capped".parse().unwrap(), 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        q.stats("capped").await.unwrap().limited,
        Some(Limited::MaxRunning)
    );
    let (code, out, _) = punctual(&url, &["stats", "capped"]);
    assert_eq!(code, 0);
    let header = out.lines().next().unwrap();
    assert!(header.ends_with("LIMITED"), "{out}");
    assert!(
        out.lines().nth(1).unwrap().ends_with("max_running"),
        "{out}"
    );
    let (_, out, _) = punctual(&url, &["stats", "capped", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["limited"], "max_running");
    assert_eq!(v[0]["limits"]["max_running"], 1);
    assert_eq!(v[0]["ready"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reads_and_sets_limits_and_a_read_only_server_refuses() {
    let redis = RedisServer::start();
    let url = redis.url();
    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let body = json!({"rate": "30/m", "max_running": 4}).to_string();
    let (status, v) = api
        .authed("PUT", "/api/v1/topics/mail/limits", Some(&body))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"topic": "mail", "rate": "30/m", "burst": null, "max_running": 4})
    );
    let (status, v) = api.authed("GET", "/api/v1/topics/mail", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        v["limits"],
        json!({"rate": "30/m", "burst": null, "max_running": 4})
    );
    assert_eq!(v["limited"], Value::Null);
    for bad in [
        json!({"rate": "fast"}),
        json!({"burst": 3}),
        json!({"max_running": 0}),
        json!({"cap": 1}),
    ] {
        let (status, v) = api
            .authed("PUT", "/api/v1/topics/mail/limits", Some(&bad.to_string()))
            .await;
        assert_eq!(status, 400, "{bad}: {v}");
    }
    let ro = Server::api(&url, None, &[]).await;
    let (status, _) = ro
        .call("PUT", "/api/v1/topics/mail/limits", None, Some(&body))
        .await;
    assert_eq!(status, 403);
    let (status, v) = ro
        .call("GET", "/api/v1/topics/mail/limits", None, None)
        .await;
    assert_eq!((status, &v["rate"]), (200, &json!("30/m")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_applies_the_limits_of_its_config_and_holds_the_rate() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("ran");
    let handler = Server::script(
        dir.path(),
        "handler.sh",
        &format!(
            "cat > /dev/null; echo \"$(date +%s%3N)\" >> {:?}",
            record.display().to_string()
        ),
    );
    let topics = format!(
        "[topics.paced]\nexec = [{:?}]\nrate = \"20/s\"\nburst = 2\nmax_running = 3\ngroup_max_running = 5\n",
        handler.display().to_string()
    );
    let n = 30;
    q.enqueue_batch(
        "paced",
        (0..n).map(|i| Job::new("x").id(format!("{i}"))).collect(),
    )
    .await
    .unwrap();
    let _svc = Server::serve(&url, None, "workers = 1\nconcurrency = 8", &topics).await;
    assert_eq!(
        q.limits("paced").await.unwrap(),
        Limits::default()
            .rate("20/s".parse().unwrap())
            .burst(2)
            .max_running(3)
    );
    // The default of every group, from group_max_running.
    assert_eq!(
        q.group_limits("paced").await.unwrap().default,
        Limits::default().max_running(5)
    );
    eventually(Duration::from_secs(20), "every job ran", || async {
        let s = q.stats("paced").await.unwrap();
        s.pool + s.ready + s.running == 0
    })
    .await;
    let ran = std::fs::read_to_string(&record).unwrap();
    let mut at: Vec<i64> = ran.lines().map(|l| l.trim().parse().unwrap()).collect();
    at.sort();
    assert_eq!(at.len(), n);
    assert_eq!(
        q.stats("paced").await.unwrap().counters["claimed"],
        n as u64
    );
    // 30 jobs at 20/s after a burst of 2: the last starts at least 1.4 s
    // after the first (less the handlers' start-up jitter); unlimited,
    // 8 slots run them all within a few hundred ms.
    let span = at[n - 1] - at[0];
    assert!(span >= 1000, "the jobs ran within {span} ms");
}
