//! End-to-end tests of the admin commands at scale (the binary against a
//! private redis-server): the config file for admin commands, paced dead
//! replay, listing with a cursor, bulk cancel, topic deletion and the
//! `dead` enqueue status.

mod support;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use punctual::raw::{self, FailKind, Failed};
use punctual::{Job, Outcome, Queue, Scheduler, SchedulerConfig, State, Worker, WorkerConfig};
use punctual_testkit::{eventually, free_port, RedisServer};
use serde_json::{json, Value};
use support::{run, Server, TOKEN};
use tokio_util::sync::CancellationToken;

/// Runs `f` with a library queue on `url` under `prefix`.
fn with_queue<T>(url: &str, prefix: &str, f: impl AsyncFnOnce(Queue) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let q = Queue::builder(url).prefix(prefix).connect().await.unwrap();
        f(q).await
    })
}

/// Pushes jobs with these ids, claims them and fails them permanently.
/// The topic's ready set must be empty before (claims take any ready job).
async fn make_dead(q: &Queue, topic: &str, ids: &[String]) {
    for chunk in ids.chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|id| Job::new(format!("payload of {id}")).id(id.as_str()))
            .collect();
        q.enqueue_batch(topic, jobs).await.unwrap();
        let claimed = raw::claim(
            q,
            &topic.parse().unwrap(),
            chunk.len(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        assert_eq!(claimed.len(), chunk.len(), "was ready empty?");
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
}

// ---- the config file -------------------------------------------------------

#[test]
fn admin_commands_take_redis_and_prefix_from_the_config_file() {
    let server = RedisServer::start();
    let url = server.url();
    with_queue(&url, "ops", async |q| {
        q.enqueue(
            "orders",
            Job::new("x").id("o1").delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("punctual.toml");
    std::fs::write(
        &config,
        format!("redis = {url:?}\nprefix = \"ops\"\n[topics.orders]\nexec = [\"true\"]\n"),
    )
    .unwrap();
    let config = config.to_str().unwrap();

    // --config: the file's Redis and prefix.
    let out = run(&["--config", config, "stats", "orders", "--json"], &[]).ok();
    assert_eq!(out.json()[0]["pool"], 1, "{out:?}");
    // After the command name too, and from PUNCTUAL_CONFIG.
    let out = run(&["get", "orders", "o1", "--json", "-c", config], &[]).ok();
    assert_eq!(out.json()["state"], "pool");
    let out = run(&["topics", "--json"], &[("PUNCTUAL_CONFIG", config)]).ok();
    assert_eq!(out.json(), serde_json::json!(["orders"]));

    // An explicit flag or variable wins over the file.
    let out = run(
        &["--config", config, "--prefix", "other", "topics", "--json"],
        &[],
    )
    .ok();
    assert_eq!(out.json(), serde_json::json!([]));
    let out = run(
        &["--config", config, "topics", "--json"],
        &[("PUNCTUAL_PREFIX", "other")],
    )
    .ok();
    assert_eq!(out.json(), serde_json::json!([]));
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let out = run(&["--config", config, "--redis", &nowhere, "topics"], &[]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains(&nowhere), "{out:?}");
    let out = run(
        &["--config", config, "topics"],
        &[("PUNCTUAL_REDIS_URL", &nowhere)],
    );
    assert_eq!(out.code, 3, "{out:?}");

    // A config that cannot be read is an error, never a fallback.
    let missing = dir.path().join("nope.toml");
    let out = run(
        &[
            "--redis",
            &url,
            "--config",
            missing.to_str().unwrap(),
            "topics",
        ],
        &[],
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("nope.toml"), "{out:?}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "redis = \n").unwrap();
    let out = run(&["topics"], &[("PUNCTUAL_CONFIG", bad.to_str().unwrap())]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("bad.toml"), "{out:?}");
}

// ---- paced replay ----------------------------------------------------------

/// `n` ids `j0000`, `j0001`, ...
fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("j{i:04}")).collect()
}

/// The due times of the topic's jobs in pool, sorted, and how many jobs are
/// in ready. A paced job is due start + its offset, exactly, unless that
/// time had passed when the script ran (then it is due now, in ready).
async fn paced(q: &Queue, topic: &str) -> (Vec<i64>, u64) {
    let mut pool: Vec<i64> = q
        .peek(topic, State::Pool, 1000)
        .await
        .unwrap()
        .iter()
        .map(|j| j.at_ms)
        .collect();
    pool.sort();
    (pool, q.stats(topic).await.unwrap().ready)
}

/// Asserts that `n` jobs were paced `step` ms apart: every gap between pool
/// jobs is exactly `step`, and no more than a few are in ready.
#[track_caller]
fn assert_paced((pool, ready): (Vec<i64>, u64), n: usize, step: i64) {
    assert_eq!(pool.len() + ready as usize, n, "{pool:?}, {ready} ready");
    assert!(ready <= 5, "{ready} of {n} were due at once");
    for w in pool.windows(2) {
        assert_eq!(w[1] - w[0], step, "uneven: {pool:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_replay_rate_holds_its_rate_measured_by_when_the_jobs_run() {
    const N: usize = 2000;
    const RATE: f64 = 250.0;
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    make_dead(&q, "orders", &ids(N)).await;

    // A scheduler and a worker that note when each job runs.
    let ran: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let stop = CancellationToken::new();
    let scheduler = Scheduler::new(q.clone(), SchedulerConfig::default())
        .topic("orders")
        .run(stop.clone().cancelled_owned());
    let scheduler = tokio::spawn(scheduler);
    let noted = ran.clone();
    let worker = Worker::new(q.clone(), WorkerConfig::default().concurrency(64))
        .handle("orders", move |_job| {
            let noted = noted.clone();
            async move {
                noted.lock().unwrap().push(Instant::now());
                Outcome::Done
            }
        })
        .run(stop.clone().cancelled_owned());
    let worker = tokio::spawn(worker);

    let u = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(
            &[
                "--redis", &u, "dead", "replay", "orders", "--all", "--rate", "250/s", "--json",
            ],
            &[],
        )
    })
    .await
    .unwrap()
    .ok();
    assert_eq!(out.json()["replayed"], N, "{out:?}");
    // The pacing is in the due times: the command is gone, and jobs are
    // still waiting.
    assert!(q.stats("orders").await.unwrap().pool > 0);

    eventually(
        Duration::from_secs(60),
        "every replayed job ran",
        || async { ran.lock().unwrap().len() >= N },
    )
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    scheduler.await.unwrap().unwrap();

    let ran = ran.lock().unwrap();
    let span = ran
        .iter()
        .max()
        .unwrap()
        .duration_since(*ran.iter().min().unwrap());
    let rate = (N - 1) as f64 / span.as_secs_f64();
    eprintln!("{N} replayed jobs ran over {span:?}: {rate:.1}/s (asked for {RATE}/s)");
    assert!(
        (RATE * 0.8..=RATE * 1.2).contains(&rate),
        "{N} jobs ran over {span:?}: {rate:.0}/s, asked for {RATE}/s"
    );
}

#[tokio::test]
async fn dead_replay_spread_spaces_due_times_evenly_over_the_window() {
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    make_dead(&q, "orders", &ids(100)).await;
    let out = run(
        &[
            "--redis", &url, "dead", "replay", "orders", "--all", "--spread", "2s", "--json",
        ],
        &[],
    )
    .ok();
    assert_eq!(out.json()["replayed"], 100, "{out:?}");
    // The i-th of 100 is due i x 20 ms after the start (Redis's clock).
    assert_paced(paced(&q, "orders").await, 100, 20);
    let s = q.stats("orders").await.unwrap();
    assert_eq!((s.dead, s.pool + s.ready), (0, 100));

    // Bad pacing is refused before anything is written.
    make_dead(&q, "other", &ids(3)).await;
    for args in [
        vec!["--rate", "0/s"],
        vec!["--rate", "fast"],
        vec!["--rate", "10/s", "--spread", "1m"],
        vec!["--spread", "0s"],
    ] {
        let mut all = vec!["--redis", url.as_str(), "dead", "replay", "other", "--all"];
        all.extend(args.iter().copied());
        let out = run(&all, &[]);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
    }
    assert_eq!(q.stats("other").await.unwrap().dead, 3);
}

#[tokio::test]
async fn api_dead_replay_takes_a_rate_or_a_spread() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    make_dead(&q, "orders", &ids(50)).await;
    let api = Server::api(&server.url(), Some(TOKEN), &[]).await;
    let (status, body) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/dead/replay",
            Some(r#"{"all": true, "rate": "10/s"}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replayed"], 50);
    assert_eq!(body["last_due_in_ms"], 4900);
    assert_paced(paced(&q, "orders").await, 50, 100);

    make_dead(&q, "other", &ids(10)).await;
    for bad in [
        r#"{"all": true, "rate": "0/s"}"#,
        r#"{"all": true, "rate": "10/s", "spread_ms": 1000}"#,
        r#"{"all": true, "spread_ms": 0}"#,
    ] {
        let (status, body) = api
            .authed("POST", "/api/v1/topics/other/dead/replay", Some(bad))
            .await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, body) = api
        .authed(
            "POST",
            "/api/v1/topics/other/dead/replay",
            Some(r#"{"all": true, "spread_ms": 900}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_paced(paced(&q, "other").await, 10, 90);
    // Purge takes no pacing.
    let (status, _) = api
        .authed(
            "POST",
            "/api/v1/topics/other/dead/purge",
            Some(r#"{"all": true, "rate": "1/s"}"#),
        )
        .await;
    assert_eq!(status, 400);
}

// ---- re-pushing a dead id --------------------------------------------------

#[tokio::test]
async fn pushing_an_id_that_is_dead_says_dead_in_the_cli_and_the_api() {
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    make_dead(&q, "orders", &["order:1".to_string()]).await;

    let out = run(
        &["--redis", &url, "push", "orders", "x", "--id", "order:1"],
        &[],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stdout, "order:1 dead\n");
    assert!(out.stderr.contains("is dead"), "{out:?}");
    assert!(
        out.stderr.contains("punctual dead replay orders order:1"),
        "{out:?}"
    );
    let out = run(
        &[
            "--redis", &url, "push", "orders", "x", "--id", "order:1", "--json",
        ],
        &[],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.json()["status"], "dead");

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
    let child = cmd
        .args(["--redis", &url, "push", "orders", "--batch", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .as_ref()
        .unwrap()
        .write_all(
            b"{\"payload\": 1, \"id\": \"order:1\"}\n{\"payload\": 2, \"id\": \"order:2\"}\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (s["created"].clone(), s["dead"].clone()),
        (json!(1), json!(1)),
        "{s}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("order:1"));

    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let (status, body) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/jobs",
            Some(r#"{"payload": "x", "id": "order:1"}"#),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("dead")),
        "{body}"
    );
    let (status, body) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/jobs",
            Some(r#"[{"payload": "x", "id": "order:1"}, {"payload": "y", "id": "order:3"}]"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["dead"].clone(), body["created"].clone()),
        (json!(1), json!(1)),
        "{body}"
    );
    assert_eq!(body["jobs"][0]["status"], "dead");
    // Still dead, unchanged.
    assert_eq!(
        q.get("orders", "order:1").await.unwrap().unwrap().state,
        State::Dead
    );
}

// ---- listing, bulk cancel, topic deletion ------------------------------------

/// Enqueues jobs with these ids, due in an hour.
async fn push_later(q: &Queue, topic: &str, ids: &[String]) {
    for chunk in ids.chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|id| {
                Job::new("x")
                    .id(id.as_str())
                    .delay(Duration::from_secs(3600))
            })
            .collect();
        q.enqueue_batch(topic, jobs).await.unwrap();
    }
}

/// Every id `punctual list` shows, page by page; and how many pages.
fn list_all(url: &str, topic: &str, state: &str, extra: &[&str]) -> (Vec<String>, usize) {
    let (mut ids, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let mut args = vec!["--redis", url, "list", topic, state, "--json"];
        args.extend_from_slice(extra);
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let page = run(&args, &[]).ok().json();
        pages += 1;
        for j in page["jobs"].as_array().unwrap() {
            ids.push(j["id"].as_str().unwrap().to_string());
        }
        match page["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
        assert!(pages < 1000, "the cursor never ends");
    }
    ids.sort();
    ids.dedup();
    (ids, pages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_goes_on_from_pool_into_the_cold_pool_minute_by_minute() {
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    // Two jobs in pool; six due two hours ahead, two a minute over three
    // minutes, in the cold pool (PROTOCOL.md "The cold pool").
    let mut jobs = Vec::new();
    let mut ids = Vec::new();
    for i in 0..2 {
        ids.push(format!("warm:{i}"));
        jobs.push(
            Job::new("x")
                .id(format!("warm:{i}"))
                .delay(Duration::from_secs(60)),
        );
    }
    for i in 0..6u64 {
        ids.push(format!("cold:{i}"));
        let delay = Duration::from_secs(7200 + i / 2 * 60);
        jobs.push(Job::new("x").id(format!("cold:{i}")).delay(delay));
    }
    q.enqueue_batch("orders", jobs).await.unwrap();
    server.make_cold("punctual", "orders");
    assert_eq!(
        server.cli(&["ZCARD", "punctual:{orders}:cold"]).unwrap(),
        "3\n"
    );

    // A page for pool, then one per bucket.
    let u = url.clone();
    let (got, pages) =
        tokio::task::spawn_blocking(move || list_all(&u, "orders", "pool", &["--limit", "1"]))
            .await
            .unwrap();
    ids.sort();
    assert_eq!(got, ids);
    assert_eq!(pages, 4);
    // The text footer names a cursor into the first bucket; it goes on.
    let out = run(
        &["--redis", &url, "list", "orders", "pool", "--limit", "1"],
        &[],
    )
    .ok();
    let cursor = out
        .stdout
        .split("--cursor ")
        .nth(1)
        .expect("a next page")
        .trim()
        .to_string();
    assert!(
        cursor.starts_with("0-c") && cursor.ends_with("-0"),
        "{out:?}"
    );
    let out = run(
        &[
            "--redis", &url, "list", "orders", "pool", "--limit", "1", "--json", "--cursor",
            &cursor,
        ],
        &[],
    )
    .ok();
    let page = out.json();
    let mut listed: Vec<String> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, ["cold:0", "cold:1"], "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_through_a_state_with_a_cursor_and_an_id_prefix() {
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    let orders: Vec<String> = (0..2000).map(|i| format!("order:{i:04}")).collect();
    let users: Vec<String> = (0..500).map(|i| format!("user:{i:03}")).collect();
    push_later(&q, "orders", &orders).await;
    push_later(&q, "orders", &users).await;
    push_later(&q, "orders", &["a*b".to_string(), "axb".to_string()]).await;

    let u = url.clone();
    let (ids, pages) = tokio::task::spawn_blocking(move || {
        list_all(
            &u,
            "orders",
            "pool",
            &["--id-prefix", "order:", "--limit", "500"],
        )
    })
    .await
    .unwrap();
    assert_eq!(ids, orders, "every order:, once, nothing else");
    assert!(pages >= 4, "{pages} pages of at most about 500");
    let u = url.clone();
    let (ids, _) = tokio::task::spawn_blocking(move || list_all(&u, "orders", "pool", &[]))
        .await
        .unwrap();
    assert_eq!(ids.len(), 2502);
    // A prefix is matched literally, glob characters included.
    let out = run(
        &[
            "--redis",
            &url,
            "list",
            "orders",
            "pool",
            "--id-prefix",
            "a*",
            "--json",
        ],
        &[],
    )
    .ok();
    assert_eq!(out.json()["jobs"].as_array().unwrap().len(), 1, "{out:?}");
    assert_eq!(out.json()["jobs"][0]["id"], "a*b");
    // Text: a table and how to go on.
    let out = run(
        &["--redis", &url, "list", "orders", "pool", "--limit", "10"],
        &[],
    )
    .ok();
    assert!(out.stdout.starts_with("ID "), "{out:?}");
    assert!(out.stdout.contains("--cursor "), "{out:?}");
    let out = run(
        &[
            "--redis", &url, "list", "orders", "pool", "--cursor", "junk",
        ],
        &[],
    );
    assert_eq!(out.code, 2, "{out:?}");

    // A partitioned topic: every partition, one cursor.
    q.set_partitions("parted", 3).await.unwrap();
    let parted: Vec<String> = (0..300).map(|i| format!("p:{i:03}")).collect();
    push_later(&q, "parted", &parted).await;
    let u = url.clone();
    let (ids, _) =
        tokio::task::spawn_blocking(move || list_all(&u, "parted", "pool", &["--limit", "50"]))
            .await
            .unwrap();
    assert_eq!(ids, parted);

    // The API: the same pages.
    let api = Server::api(&url, None, &[]).await;
    let (mut got, mut cursor) = (Vec::new(), String::new());
    loop {
        let path =
            format!("/api/v1/topics/orders/jobs?state=pool&id_prefix=user:&limit=100{cursor}");
        let (status, body) = api.call("GET", &path, None, None).await;
        assert_eq!(status, 200, "{body}");
        for j in body["jobs"].as_array().unwrap() {
            got.push(j["id"].as_str().unwrap().to_string());
        }
        match body["cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    got.sort();
    got.dedup();
    assert_eq!(got, users);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_id_prefix_with_a_dry_run() {
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    make_dead(&q, "orders", &["a:dead".to_string()]).await;
    push_later(
        &q,
        "orders",
        &["a:1".to_string(), "a:2".to_string(), "b:1".to_string()],
    )
    .await;
    q.enqueue("orders", Job::new("now").id("a:ready"))
        .await
        .unwrap();
    let before = q.stats("orders").await.unwrap();

    let out = run(
        &[
            "--redis",
            &url,
            "cancel",
            "orders",
            "--id-prefix",
            "a:",
            "--dry-run",
            "--json",
        ],
        &[],
    )
    .ok();
    let v = out.json();
    assert_eq!(
        (v["matched"].clone(), v["cancelled"].clone()),
        (json!(4), json!(0)),
        "{v}"
    );
    let after = q.stats("orders").await.unwrap();
    assert_eq!(
        (after.pool, after.ready, after.dead),
        (before.pool, before.ready, before.dead),
        "a dry run changed something"
    );
    let out = run(
        &[
            "--redis",
            &url,
            "cancel",
            "orders",
            "--id-prefix",
            "a:",
            "--dry-run",
        ],
        &[],
    )
    .ok();
    assert!(out.stdout.contains("would cancel 4 jobs"), "{out:?}");

    let out = run(
        &[
            "--redis",
            &url,
            "cancel",
            "orders",
            "--id-prefix",
            "a:",
            "--json",
        ],
        &[],
    )
    .ok();
    assert_eq!(out.json()["cancelled"], 4, "{out:?}");
    let s = q.stats("orders").await.unwrap();
    assert_eq!((s.pool, s.ready, s.dead), (1, 0, 0));
    assert!(q.get("orders", "b:1").await.unwrap().is_some());

    // An id or a prefix is required, a prefix may not be empty, and an id
    // and a prefix together are refused.
    for args in [
        vec!["cancel", "orders", "--id-prefix", ""],
        vec!["cancel", "orders"],
        vec!["cancel", "orders", "b:1", "--id-prefix", "b:"],
    ] {
        let mut all = vec!["--redis", url.as_str()];
        all.extend(args.iter().copied());
        assert_eq!(run(&all, &[]).code, 2, "{args:?}");
    }
    // Cancel by id still works.
    run(&["--redis", &url, "cancel", "orders", "b:1"], &[]).ok();

    // The API.
    push_later(&q, "orders", &["c:1".to_string(), "c:2".to_string()]).await;
    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let (status, body) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/cancel",
            Some(r#"{"id_prefix": "c:", "dry_run": true}"#),
        )
        .await;
    assert_eq!((status, body["matched"].clone()), (200, json!(2)), "{body}");
    assert_eq!(q.stats("orders").await.unwrap().pool, 2);
    let (status, body) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/cancel",
            Some(r#"{"id_prefix": "c:"}"#),
        )
        .await;
    assert_eq!(
        (status, body["cancelled"].clone()),
        (200, json!(2)),
        "{body}"
    );
    assert_eq!(q.stats("orders").await.unwrap().pool, 0);
    let (status, _) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/cancel",
            Some(r#"{"id_prefix": ""}"#),
        )
        .await;
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_topic_is_refused_while_any_job_exists_and_then_removes_every_key() {
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    let keys = |pattern: &str| -> Vec<String> {
        server
            .cli(&["--scan", "--pattern", pattern])
            .unwrap()
            .lines()
            .map(String::from)
            .filter(|l| !l.is_empty())
            .collect()
    };
    make_dead(&q, "orders", &["d".to_string()]).await;
    // A schedule, with the record of an occurrence it fired (as a firer
    // leaves it in P:{T}:fired once the job ran).
    q.schedule_put(
        "orders",
        punctual::schedule::Schedule::every("sweep", Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    server
        .cli(&["ZADD", "punctual:{orders}:fired", "1", "sweep@1"])
        .unwrap();
    let out = run(&["--redis", &url, "topic", "delete", "orders"], &[]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("1 job"), "{out:?}");
    assert!(!keys("punctual:{orders}:*").is_empty());
    assert!(
        q.schedule("orders", "sweep").await.unwrap().is_some(),
        "a refused deletion keeps the schedules"
    );
    q.dead_purge("orders", punctual::DeadSelector::All)
        .await
        .unwrap();
    let out = run(
        &["--redis", &url, "topic", "delete", "orders", "--json"],
        &[],
    )
    .ok();
    assert_eq!(out.json()["deleted"], true, "{out:?}");
    assert_eq!(out.json()["schedules"], json!(["sweep"]), "{out:?}");
    // Every key: the schedules, their watermarks and lock, fired too.
    assert_eq!(keys("punctual:{orders}:*"), Vec::<String>::new());
    let audit = run(&["--redis", &url, "audit", "--json"], &[]).ok();
    let entry = audit.json()[0].clone();
    assert_eq!(
        (entry["action"].clone(), entry["detail"].clone()),
        (json!("topic.delete"), json!({"schedules": ["sweep"]})),
        "{audit:?}"
    );
    assert_eq!(
        server
            .cli(&["SISMEMBER", "punctual:topics", "orders"])
            .unwrap()
            .trim(),
        "0"
    );
    // Again: no such topic.
    let out = run(&["--redis", &url, "topic", "delete", "orders"], &[]);
    assert_eq!(out.code, 1, "{out:?}");

    // Partitioned: a job in any partition refuses; then every partition's
    // keys and the partition count go.
    q.set_partitions("parted", 3).await.unwrap();
    push_later(&q, "parted", &["p:1".to_string()]).await;
    q.schedule_put(
        "parted",
        punctual::schedule::Schedule::every("sweep", Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    for i in 0..3 {
        server
            .cli(&[
                "ZADD",
                &format!("punctual:{{parted#{i}}}:fired"),
                "1",
                "sweep@1",
            ])
            .unwrap();
    }
    let api = Server::api(&url, Some(TOKEN), &[]).await;
    let (status, body) = api.authed("DELETE", "/api/v1/topics/parted", None).await;
    assert_eq!(status, 409, "{body}");
    q.cancel("parted", "p:1").await.unwrap();
    let (status, body) = api.authed("DELETE", "/api/v1/topics/parted", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schedules"], json!(["sweep"]), "{body}");
    assert_eq!(keys("punctual:{parted*"), Vec::<String>::new());
    assert_eq!(
        server
            .cli(&["HEXISTS", "punctual:partitions", "parted"])
            .unwrap()
            .trim(),
        "0"
    );
    assert_eq!(
        server
            .cli(&["SISMEMBER", "punctual:topics", "parted"])
            .unwrap()
            .trim(),
        "0"
    );
}

// ---- pause and resume ------------------------------------------------------

#[tokio::test]
async fn topic_pause_and_resume_stop_and_restart_claims_and_are_audited() {
    let server = RedisServer::start();
    let url = server.url();
    let q = Queue::connect(url.clone()).await.unwrap();
    let topic: raw::Partition = "orders".parse().unwrap();
    q.enqueue("orders", Job::new("x").id("order:1"))
        .await
        .unwrap();

    let out = run(&["--redis", &url, "topic", "pause", "orders"], &[]).ok();
    assert!(out.stdout.contains("paused topic \"orders\""), "{out:?}");
    assert!(q.stats("orders").await.unwrap().paused);
    let claimed = raw::claim(&q, &topic, 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(claimed.is_empty(), "a paused topic hands out nothing");

    let out = run(
        &["--redis", &url, "--json", "topic", "resume", "orders"],
        &[],
    )
    .ok();
    assert_eq!(out.json(), json!({"topic": "orders", "paused": false}));
    assert!(!q.stats("orders").await.unwrap().paused);
    let claimed = raw::claim(&q, &topic, 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "resumed: the job is claimed");

    let trail = run(&["--redis", &url, "audit", "--json"], &[]).ok().json();
    let actions: Vec<&str> = trail
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(actions, ["resume", "pause"], "{trail:#}");
    assert_eq!(trail[0]["who"], "cli", "{trail:#}");

    // A bad topic name changes nothing and says why.
    let out = run(&["--redis", &url, "topic", "pause", "a{b}"], &[]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("brace"), "{out:?}");
}
