//! The PHP package's Laravel connector (`Punctual\Laravel`), driven through
//! the minimal app in `clients/php/tests/laravel-app` (Debian's
//! php-laravel-framework, the package from `clients/php/src`) against a
//! private redis-server:
//!
//! - under the real `punctual serve` with
//!   `resident = ["php", "artisan", "punctual:work"]`: a `ShouldQueue` job
//!   dispatched with `->delay(now()->addMilliseconds(1500))` runs once and
//!   never early by Redis's clock; `$this->release(1)` comes back after at
//!   least 1 s; `$this->fail()` and an exception past `$tries` land in
//!   punctual's dead set with `failed()` called and the failed-jobs
//!   provider told; job middleware and the JobProcessing, JobProcessed and
//!   JobFailed events fire; a job delivered past its `retryUntil()`, and a
//!   job without `$tries` whose runs crash or time out, are failed by
//!   Laravel too (`failed()` called) before they land in the dead set;
//! - an operator's cancel of a running job reaches it
//!   (`$this->job->cancelled()`), and the program keeps its place;
//! - `php artisan queue:work punctual` (pop) runs, acks and fails jobs;
//! - the PHP producer waits for a Redis that is loading its dataset;
//! - composer.json carries a stable version the README's require names.
//!
//! php, phpredis or Laravel missing: the test fails, naming what is missing
//! (.ci/run installs them).

mod support;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual::{Queue, State};
use punctual_testkit::{eventually, eventually_every, RedisServer};
use serde_json::Value;
use support::{a_client_loop_tells_its_handler, Service, BIN};

fn php_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/php")
}

fn app_dir() -> PathBuf {
    php_dir().join("tests/laravel-app")
}

/// Fails, naming it, when php, phpredis or Laravel is missing.
fn require_laravel() {
    let probe = |code: &str| {
        Command::new("php")
            .args(["-r", code])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    };
    let missing = match probe("exit(0);") {
        Err(_) => Some("php (Debian: php-cli)"),
        Ok(_) if !probe("exit(extension_loaded('redis') ? 0 : 1);")
            .is_ok_and(|s| s.success()) =>
        {
            Some("php's redis extension (Debian: php-redis)")
        }
        Ok(_) if !probe(
            "exit(is_file(__DIR__ . '/vendor/autoload.php') || stream_resolve_include_path('Illuminate/autoload.php') !== false ? 0 : 1);",
        )
        .is_ok_and(|s| s.success()) =>
        {
            Some("Laravel (Debian: apt-get install php-laravel-framework)")
        }
        Ok(_) => None,
    };
    if let Some(what) = missing {
        panic!(
            "{what} is not installed: the Laravel connector's tests cannot run{}",
            if std::env::var_os("CI").is_some() {
                " (CI is set; .ci/run installs it)"
            } else {
                ""
            }
        );
    }
}

/// The environment the test app needs: this test's Redis, its own
/// bootstrap caches (tests run in parallel), the event recording on, and a
/// needle to find its processes by.
fn app_env(redis: &RedisServer, scratch: &Path, needle: &str) -> Vec<(String, String)> {
    vec![
        ("REDIS_HOST".into(), "127.0.0.1".into()),
        ("REDIS_PORT".into(), redis.port().to_string()),
        ("LT_RECORD_EVENTS".into(), "1".into()),
        (
            "APP_SERVICES_CACHE".into(),
            scratch.join("services.php").display().to_string(),
        ),
        (
            "APP_PACKAGES_CACHE".into(),
            scratch.join("packages.php").display().to_string(),
        ),
        ("LT_NEEDLE".into(), needle.into()),
    ]
}

/// `php artisan ARGS` in the test app; its stdout, after checking it succeeded.
fn artisan(env: &[(String, String)], args: &[&str]) -> String {
    let out = Command::new("php")
        .arg("artisan")
        .args(args)
        .current_dir(app_dir())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "php artisan {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Dispatches a Probe job; returns Redis's clock (ms) read before the dispatch.
fn dispatch(env: &[(String, String)], args: &[&str]) -> i64 {
    let mut all = vec!["test:dispatch"];
    all.extend_from_slice(args);
    let out = artisan(env, &all);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    v["t0_ms"].as_i64().unwrap()
}

/// What the app recorded (`lt:log`): middleware, handle, failed, event,
/// failer entries, each with Redis's clock.
fn log(redis: &redis::Client) -> Vec<Value> {
    let mut conn = redis.get_connection().unwrap();
    let items: Vec<String> = redis::cmd("LRANGE")
        .arg("lt:log")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    items
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect()
}

fn entries<'a>(log: &'a [Value], what: &str, tag: &str) -> Vec<&'a Value> {
    log.iter()
        .filter(|e| e["what"] == what && e["tag"] == tag)
        .collect()
}

fn events(log: &[Value], tag: &str) -> Vec<String> {
    entries(log, "event", tag)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// The live processes whose environment holds `needle`.
fn processes_with(needle: &str) -> HashSet<i32> {
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

/// `punctual serve` running `php artisan punctual:work` for topic `default`.
struct Serve {
    svc: Service,
    needle: String,
}

impl Serve {
    fn start(redis: &RedisServer, env: &[(String, String)], needle: &str) -> Serve {
        Serve::start_with(redis, env, needle, "")
    }

    /// With `extra` lines in the topic's table (e.g. `max_attempts = 3`).
    fn start_with(
        redis: &RedisServer,
        env: &[(String, String)],
        needle: &str,
        extra: &str,
    ) -> Serve {
        Serve::start_in(Service::new(), redis, env, needle, "", extra)
    }

    /// In `svc`, with `top` lines among serve's own settings and `extra`
    /// lines in the topic's table.
    fn start_in(
        mut svc: Service,
        redis: &RedisServer,
        env: &[(String, String)],
        needle: &str,
        top: &str,
        extra: &str,
    ) -> Serve {
        let env_toml = env
            .iter()
            .map(|(k, v)| format!("{k} = {v:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            "redis = {:?}\nworkers = 1\n{top}\n\n[topics.default]\n\
             resident = [\"php\", \"artisan\", \"punctual:work\"]\n\
             cwd = {:?}\nprocesses = 1\ntimeout = \"60s\"\nbackoff = [\"0s\"]\n\
             env = {{ {env_toml} }}\n{extra}\n",
            redis.url(),
            app_dir().display().to_string(),
        );
        std::fs::write(svc.path("punctual.toml"), text).unwrap();
        svc.start();
        Serve {
            svc,
            needle: format!("LT_NEEDLE={needle}"),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.svc.kill();
        for pid in processes_with(&self.needle) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn laravel_jobs_under_serve_with_artisan_punctual_work() {
    require_laravel();
    let redis = RedisServer::start();
    let rc = redis::Client::open(redis.url()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let needle = format!("serve-{}", std::process::id());
    let env = app_env(&redis, scratch.path(), &needle);
    let q = Queue::connect(redis.url()).await.unwrap();
    let serve = Serve::start(&redis, &env, &needle);
    let wait = Duration::from_secs(60);
    eventually(wait, "serve starts php artisan punctual:work", || async {
        !processes_with(&serve.needle).is_empty()
    })
    .await;

    // Dispatched as an app does, through the app's own Redis connection
    // (OPT_PREFIX laravel_database_ and a serializer: config/database.php).
    let t_late = dispatch(&env, &["late", "ok", "--delay-ms=1500"]);
    dispatch(&env, &["rel", "release"]);
    dispatch(&env, &["failnow", "fail"]);
    dispatch(&env, &["throw", "throw", "--tries=2"]);

    eventually(wait, "every job done or dead", || async {
        let l = log(&rc);
        let s = q.stats("default").await.unwrap();
        entries(&l, "handle", "late").len() == 1
            && entries(&l, "handle", "rel").len() == 2
            && entries(&l, "failer", "failnow").len() == 1
            && entries(&l, "failer", "throw").len() == 1
            && s.pool + s.ready + s.running == 0
            && s.dead == 2
    })
    .await;
    let l = log(&rc);
    let dump = serde_json::to_string_pretty(&l).unwrap();

    // The delayed job: once, never before 1.5 s after the dispatch by Redis's clock.
    let late = entries(&l, "handle", "late");
    assert_eq!(late.len(), 1, "{dump}");
    let started = late[0]["redis_ms"].as_i64().unwrap();
    assert!(
        started >= t_late + 1500,
        "started {} ms after the dispatch, before its 1500 ms delay:\n{dump}",
        started - t_late
    );
    assert_eq!(late[0]["attempt"], 1);
    assert_eq!(
        events(&l, "late"),
        ["JobProcessing", "JobProcessed"],
        "{dump}"
    );
    assert_eq!(entries(&l, "middleware", "late").len(), 1, "{dump}");

    // release(1): back after at least 1 s, on attempt 2.
    let rel = entries(&l, "handle", "rel");
    assert_eq!(
        rel.iter()
            .map(|e| e["attempt"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2]
    );
    let gap = rel[1]["redis_ms"].as_i64().unwrap() - rel[0]["redis_ms"].as_i64().unwrap();
    assert!(gap >= 1000, "release(1) came back after {gap} ms:\n{dump}");
    assert_eq!(entries(&l, "middleware", "rel").len(), 2, "{dump}");

    // $this->fail(): dead at once, failed() called, the provider told.
    let id = entries(&l, "handle", "failnow")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let info = q.get("default", &id).await.unwrap().expect("in dead");
    assert_eq!(info.state, State::Dead);
    assert_eq!(info.attempts, 1);
    assert!(
        info.last_error
            .as_deref()
            .is_some_and(|e| e.contains("RuntimeException: bad order failnow")),
        "{:?}",
        info.last_error
    );
    let failed = entries(&l, "failed", "failnow");
    assert_eq!(failed.len(), 1, "{dump}");
    assert_eq!(failed[0]["error"], "RuntimeException: bad order failnow");
    assert_eq!(
        entries(&l, "failer", "failnow")[0]["connection"],
        "punctual"
    );
    assert!(
        events(&l, "failnow").contains(&"JobFailed".to_string()),
        "{dump}"
    );

    // An exception past $tries = 2: two runs, then dead with failed() called once.
    let throws = entries(&l, "handle", "throw");
    assert_eq!(
        throws
            .iter()
            .map(|e| e["attempt"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2],
        "{dump}"
    );
    let info = q
        .get("default", throws[0]["id"].as_str().unwrap())
        .await
        .unwrap()
        .expect("in dead");
    assert_eq!(info.state, State::Dead);
    assert!(
        info.last_error
            .as_deref()
            .is_some_and(|e| e.contains("DomainException: boom throw")),
        "{:?}",
        info.last_error
    );
    assert_eq!(entries(&l, "failed", "throw").len(), 1, "{dump}");
    assert_eq!(
        entries(&l, "failer", "throw")[0]["error"],
        "DomainException: boom throw"
    );
    assert_eq!(
        events(&l, "throw"),
        ["JobProcessing", "JobProcessing", "JobFailed"],
        "{dump}"
    );
    assert_eq!(entries(&l, "middleware", "throw").len(), 2, "{dump}");

    // The app's connection prefix did not leak into punctual's keys.
    assert_eq!(
        redis.cli(&["KEYS", "laravel_database_*"]).unwrap().trim(),
        ""
    );
    drop(serve);
}

/// Laravel calls `failed()` (and tells the failed-jobs provider, and
/// raises JobFailed) whenever a job fails for good, also where punctual
/// alone would have moved it to dead: a job whose `retryUntil()` passed
/// before it could start is failed by Laravel's pipeline at that delivery
/// (not expired unseen by punctual), and a job without `$tries` whose runs
/// crash or overrun their timeout gets one delivery more than Laravel's
/// limit, on which Laravel fails it.
#[tokio::test(flavor = "multi_thread")]
async fn failed_is_called_past_retry_until_and_after_runs_that_crashed_or_timed_out() {
    require_laravel();
    let redis = RedisServer::start();
    let rc = redis::Client::open(redis.url()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let needle = format!("gaps-{}", std::process::id());
    let env = app_env(&redis, scratch.path(), &needle);
    let q = Queue::connect(redis.url()).await.unwrap();
    let serve = Serve::start_with(&redis, &env, &needle, "max_attempts = 3");
    let wait = Duration::from_secs(90);

    // retryUntil() 1 s ahead, while the topic is paused (its workers busy
    // or down): it is past retryUntil() when it can first be delivered.
    q.pause("default").await.unwrap();
    let t0 = dispatch(&env, &["until", "ok", "--retry-until-s=1"]);
    let redis_ms = || -> i64 {
        let t = redis.cli(&["TIME"]).unwrap();
        let mut it = t.split_whitespace().map(|v| v.parse::<i64>().unwrap());
        it.next().unwrap() * 1000 + it.next().unwrap() / 1000
    };
    eventually_every(
        Duration::from_millis(100),
        wait,
        "retryUntil() passed",
        || async { redis_ms() >= t0 + 2100 },
    )
    .await;
    q.resume("default").await.unwrap();
    // No $tries, the topic's max_attempts = 3: each run dies, or overruns
    // its 1 s $timeout and is killed by punctual serve.
    dispatch(&env, &["crash", "crash"]);
    dispatch(&env, &["hang", "hang", "--timeout=1"]);

    eventually(wait, "the three jobs dead", || async {
        let s = q.stats("default").await.unwrap();
        s.pool + s.ready + s.running == 0 && s.dead == 3
    })
    .await;
    let l = log(&rc);
    let dump = serde_json::to_string_pretty(&l).unwrap();
    let dead: Vec<punctual::JobInfo> = {
        let mut v = Vec::new();
        for id in redis
            .cli(&["ZRANGE", "punctual:{default}:dead", "0", "-1"])
            .unwrap()
            .lines()
            .filter(|l| !l.is_empty())
        {
            v.push(q.get("default", id).await.unwrap().expect("in dead"));
        }
        v
    };
    let errors: Vec<&str> = dead
        .iter()
        .map(|i| i.last_error.as_deref().unwrap_or(""))
        .collect();

    // retryUntil() passed: never run, failed by Laravel at its delivery.
    assert_eq!(entries(&l, "handle", "until").len(), 0, "{dump}");
    let failed = entries(&l, "failed", "until");
    assert_eq!(failed.len(), 1, "failed() once: {dump}\n{errors:?}");
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap()
            .contains("MaxAttemptsExceededException"),
        "{dump}"
    );
    assert_eq!(entries(&l, "failer", "until").len(), 1, "{dump}");
    assert!(
        events(&l, "until").contains(&"JobFailed".to_string()),
        "{dump}"
    );

    // Runs that crashed or timed out: two runs (Laravel's limit, one less
    // than punctual's 3 attempts), then failed by Laravel at the third
    // delivery, without running.
    for tag in ["crash", "hang"] {
        assert_eq!(
            entries(&l, "handle", tag)
                .iter()
                .map(|e| e["attempt"].as_i64().unwrap())
                .collect::<Vec<_>>(),
            [1, 2],
            "{tag}: {dump}"
        );
        assert_eq!(
            entries(&l, "failed", tag).len(),
            1,
            "{tag}: failed() once: {dump}\n{errors:?}"
        );
        assert_eq!(entries(&l, "failer", tag).len(), 1, "{tag}: {dump}");
        assert!(
            events(&l, tag).contains(&"JobFailed".to_string()),
            "{tag}: {dump}"
        );
    }
    for info in &dead {
        assert!(
            info.last_error.as_deref().is_some_and(
                |e| e.starts_with("failed: ") && e.contains("MaxAttemptsExceededException")
            ),
            "{:?}",
            info.last_error
        );
    }
    drop(serve);
}

/// An operator's cancel of a running Laravel job reaches it under
/// `artisan punctual:work`: `$this->job->cancelled()` (the connector's
/// PunctualJob) turns true while the job runs, the job returns, and the
/// program keeps its place (a grace of an hour: only its reply can end the
/// run within the test). The Probe job `wait` looks between steps; each
/// Probe appends `job TAG PID` to LT_RECORDS, dispatched with `--id` its
/// uuid (the punctual id) is its tag.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_laravel_job_is_told_and_the_program_keeps_its_place() {
    require_laravel();
    let redis = RedisServer::start();
    let scratch = tempfile::tempdir().unwrap();
    let needle = format!("cancel-{}", std::process::id());
    let svc = Service::new();
    let mut env = app_env(&redis, scratch.path(), &needle);
    env.push((
        "LT_RECORDS".into(),
        svc.path("records").display().to_string(),
    ));
    let top = format!(
        "http = \"127.0.0.1:{}\"\nlease = \"60s\"\ncancel_grace = \"1h\"",
        svc.http
    );
    let serve = Serve::start_in(svc, &redis, &env, &needle, &top, "");
    a_client_loop_tells_its_handler(&serve.svc, &redis.url(), "default", |id, what| {
        dispatch(&env, &[id, what, &format!("--id={id}")]);
    })
    .await;
    drop(serve);
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_work_punctual_pops_acks_and_fails() {
    require_laravel();
    let redis = RedisServer::start();
    let rc = redis::Client::open(redis.url()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let env = app_env(&redis, scratch.path(), "pop");
    let q = Queue::connect(redis.url()).await.unwrap();
    dispatch(&env, &["p-ok", "ok", "--queue=popq"]);
    dispatch(&env, &["p-fail", "fail", "--queue=popq"]);
    dispatch(&env, &["p-throw", "throw", "--tries=1", "--queue=popq"]);
    let s = q.stats("popq").await.unwrap();
    assert_eq!(s.ready + s.pool, 3);

    artisan(
        &env,
        &[
            "queue:work",
            "punctual",
            "--queue=popq",
            "--stop-when-empty",
        ],
    );
    let l = log(&rc);
    let dump = serde_json::to_string_pretty(&l).unwrap();
    for tag in ["p-ok", "p-fail", "p-throw"] {
        let h = entries(&l, "handle", tag);
        assert_eq!(h.len(), 1, "{tag}: {dump}");
        assert_eq!(h[0]["attempt"], 1, "{tag}: punctual's attempt counter");
        assert_eq!(h[0]["queue"], "popq");
    }
    assert_eq!(events(&l, "p-ok"), ["JobProcessing", "JobProcessed"]);
    assert_eq!(entries(&l, "failed", "p-fail").len(), 1, "{dump}");
    assert_eq!(entries(&l, "failer", "p-throw").len(), 1, "{dump}");
    let s = q.stats("popq").await.unwrap();
    assert_eq!(
        (s.pool, s.ready, s.running, s.dead),
        (0, 0, 0, 2),
        "p-ok acked, the other two dead"
    );
    let info = q
        .get(
            "popq",
            entries(&l, "handle", "p-fail")[0]["id"].as_str().unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.state, State::Dead);
    assert!(info
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("bad order p-fail")));
    // punctual's own check agrees the topic is consistent.
    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "check", "popq"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "punctual check popq: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tries_backoff_timeout_and_retry_until_become_punctual_options() {
    require_laravel();
    let redis = RedisServer::start();
    let scratch = tempfile::tempdir().unwrap();
    let env = app_env(&redis, scratch.path(), "opts");
    let q = Queue::connect(redis.url()).await.unwrap();
    let rc = redis::Client::open(redis.url()).unwrap();
    let mut conn = rc.get_connection().unwrap();
    let record = |conn: &mut redis::Connection, id: &str| -> String {
        redis::cmd("HGET")
            .arg("punctual:{opts}:jobs")
            .arg(id)
            .query(conn)
            .unwrap()
    };
    let ids = |conn: &mut redis::Connection| -> HashSet<String> {
        redis::cmd("HKEYS")
            .arg("punctual:{opts}:jobs")
            .query::<Vec<String>>(conn)
            .unwrap()
            .into_iter()
            .collect()
    };

    let t0 = dispatch(
        &env,
        &[
            "a",
            "ok",
            "--queue=opts",
            "--tries=3",
            "--backoff=1,5",
            "--timeout=30",
            "--delay-ms=60000",
        ],
    );
    let a = ids(&mut conn).into_iter().next().unwrap();
    let info = q.get("opts", &a).await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    assert_eq!(
        info.max_attempts, 4,
        "$tries = 3: three tries and the attempt Laravel fails on"
    );
    assert_eq!(info.timeout_ms, Some(30_000));
    assert!(
        info.due_ms >= t0 + 60_000,
        "due {} ms after the dispatch",
        info.due_ms - t0
    );
    assert!(
        record(&mut conn, &a).split(':').nth(3) == Some("1000,5000"),
        "the backoff ladder in ms: {}",
        record(&mut conn, &a)
    );

    dispatch(&env, &["b", "ok", "--queue=opts", "--retry-until-s=120"]);
    let b = ids(&mut conn).into_iter().find(|id| *id != a).unwrap();
    let info = q.get("opts", &b).await.unwrap().unwrap();
    assert_eq!(info.max_attempts, 10_000, "retryUntil() without $tries");
    assert_eq!(
        info.deadline_ms, None,
        "retryUntil() is Laravel's to enforce (failed() called), not punctual's expiry"
    );
}

#[test]
fn artisan_punctual_work_run_by_hand_says_so_and_fails() {
    require_laravel();
    let redis = RedisServer::start();
    let scratch = tempfile::tempdir().unwrap();
    let env = app_env(&redis, scratch.path(), "by-hand");
    let out = Command::new("php")
        .args(["artisan", "punctual:work"])
        .current_dir(app_dir())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env_remove("PUNCTUAL_PROTOCOL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains("PUNCTUAL_PROTOCOL is not set: this is a resident handler, run it under `punctual serve`"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_php_producer_waits_while_redis_loads_its_dataset() {
    require_laravel();
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    // A dataset that takes seconds to load, the server answering LOADING meanwhile.
    redis.cli(&["DEBUG", "POPULATE", "1000"]).unwrap();
    redis
        .cli(&["CONFIG", "SET", "key-load-delay", "3000"])
        .unwrap();
    redis
        .cli(&[
            "CONFIG",
            "SET",
            "loading-process-events-interval-bytes",
            "1024",
        ])
        .unwrap();
    let mut reload = Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "DEBUG", "RELOAD"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(10), "Redis says LOADING", || async {
        redis.cli(&["PING"]).is_ok_and(|o| o.contains("LOADING"))
    })
    .await;
    let mut child = Command::new("php")
        .arg(php_dir().join("tests/e2e_produce.php"))
        .arg("t")
        .env("PUNCTUAL_TEST_REDIS_URL", redis.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(
        child.stdin.take().unwrap(),
        r#"{{"payload": "x", "id": "while-loading"}}"#
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = reload.wait();
    assert!(
        out.status.success(),
        "the PHP producer gave up while Redis loaded: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "created");
    let q = Queue::connect(redis.url()).await.unwrap();
    assert_eq!(
        q.get("t", "while-loading").await.unwrap().unwrap().state,
        State::Ready
    );
}

#[test]
fn composer_json_carries_a_stable_version_that_the_readme_requires() {
    let composer: Value =
        serde_json::from_str(&std::fs::read_to_string(php_dir().join("composer.json")).unwrap())
            .unwrap();
    let version = composer["version"]
        .as_str()
        .expect("composer.json has a \"version\"");
    let parts: Vec<&str> = version.split('.').collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
        "composer.json version {version:?} is not a stable X.Y.Z: Composer's minimum-stability stable refuses it"
    );
    let readme = std::fs::read_to_string(php_dir().join("README.md")).unwrap();
    let want = format!(
        "composer require punctual/punctual:^{}.{}",
        parts[0], parts[1]
    );
    assert!(
        readme.contains(&want),
        "clients/php/README.md should show `{want}`"
    );
    assert_eq!(
        composer["extra"]["laravel"]["providers"][0],
        "Punctual\\Laravel\\PunctualServiceProvider"
    );
}
