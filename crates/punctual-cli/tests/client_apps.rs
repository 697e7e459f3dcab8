//! Apps written the way another tool's users write them, unchanged but for
//! their import lines, run under the real `punctual serve` with the client
//! installed as a user installs it:
//!
//! - Python: an RQ-style module of plain functions (clients/python/tests/
//!   apps/shop), enqueued with `Queue.enqueue_in`/`enqueue_at`/`Retry`, plus
//!   one `@punctual.task`; the client `pip install`ed into a venv that
//!   serve's config names (`python -m punctual shop.tasks`, `cwd`).
//! - Node: a BullMQ-style app (clients/node/test/apps/shop.js), `Queue.add`/
//!   `addBulk`/`getJob`/`changeDelay` and `new Worker(name, processor,
//!   {concurrency})` on an ioredis connection; the client `npm pack`ed and
//!   installed from the tarball.
//!
//! Each: every job runs once, never early (Redis's clock at the start
//! against the due time), retries and dead as the app configured them, a
//! crash of the program mid-job retried at once (not after the timeout).

#[path = "support/provision.rs"]
mod provision;
mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use punctual::{Queue, State};
use punctual_testkit::{eventually, RedisServer};
use serde_json::Value;
use support::{output_text, Service};

/// The JSON lines a list holds.
fn list(rc: &redis::Client, key: &str) -> Vec<Value> {
    let mut conn = rc.get_connection().unwrap();
    let items: Vec<String> = redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    items
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect()
}

/// serve with one resident topic `shop` running `argv` in `cwd`.
fn serve(url: &str, argv: &[String], cwd: &Path, env: &str) -> Service {
    let mut svc = Service::new();
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "redis = {url:?}\nworkers = 1\n\n[topics.shop]\nresident = [{}]\ncwd = {:?}\n\
         processes = 2\ntimeout = \"120s\"\nbackoff = [\"100ms\"]\nmax_attempts = 4\n\
         env = {{ SHOP_REDIS_URL = {url:?}{env} }}\n",
        argv.join(", "),
        cwd.display().to_string(),
    );
    std::fs::write(svc.path("punctual.toml"), text).unwrap();
    svc.start();
    svc
}

/// Every run recorded on `shop:ran`: never early, and per job id the runs.
fn runs_by_id(rc: &redis::Client) -> HashMap<String, Vec<Value>> {
    let mut by: HashMap<String, Vec<Value>> = HashMap::new();
    for r in list(rc, "shop:ran") {
        let (now, due) = (r["now_ms"].as_i64().unwrap(), r["due_ms"].as_i64().unwrap());
        assert!(now >= due, "{r}: started {} ms early", due - now);
        by.entry(r["id"].as_str().unwrap().to_string())
            .or_default()
            .push(r);
    }
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_rq_style_app_under_serve() {
    if provision::skipped("python") {
        return;
    }
    let venv = provision::python_app_venv().unwrap_or_else(|e| panic!("{e}"));
    let py = venv.join("bin/python");
    let app = provision::clients_dir().join("python/tests/apps");
    let server = RedisServer::start();
    let url = server.url();
    let rc = redis::Client::open(url.as_str()).unwrap();
    let q = Queue::connect(url.as_str()).await.unwrap();
    let argv = [
        py.display().to_string(),
        "-m".into(),
        "punctual".into(),
        "shop.tasks".into(),
        "shop.native".into(),
    ];
    let svc = serve(&url, &argv, &app, "");

    // The app's own enqueue script, with the venv's python, as the app runs it.
    let out = Command::new(&py)
        .arg("shop/enqueue.py")
        .current_dir(&app)
        .env("SHOP_REDIS_URL", &url)
        .env("PYTHONPATH", &app)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let enqueued: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(enqueued.len(), 27);
    let statuses: Vec<&str> = enqueued
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.iter().filter(|s| **s == "created").count(), 26);
    assert_eq!(enqueued[24]["id"], "at:2000");
    assert_eq!(enqueued[24]["status"], "duplicate", "the same job id again");
    let ids: HashSet<String> = enqueued
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 26);

    let wait = Duration::from_secs(60);
    eventually(wait, "every job reaches its end", || async {
        let by = runs_by_id(&rc);
        let mut settled = true;
        for id in &ids {
            let job = q.get("shop", id).await.unwrap();
            settled &= match id.as_str() {
                "refund:8" => job.is_some_and(|j| j.state == State::Dead),
                _ => job.is_none() && by.contains_key(id),
            };
        }
        settled
    })
    .await;
    let by = runs_by_id(&rc);
    for e in &enqueued {
        let id = e["id"].as_str().unwrap();
        let runs = &by[id];
        let want = match id {
            "charge:7" => 3, // ConnectionError twice, then done
            "refund:8" => 2, // Retry(max=1): two attempts, then dead
            "crash:9" => 2,  // the interpreter died in the first
            "remind:flaky" => 2,
            _ => 1,
        };
        assert_eq!(runs.len(), want, "{id}: {runs:?}");
        let attempts: Vec<i64> = runs
            .iter()
            .map(|r| r["attempt"].as_i64().unwrap())
            .collect();
        assert_eq!(attempts, (1..=want as i64).collect::<Vec<_>>(), "{id}");
        if let Some(delay) = e["delay_ms"].as_i64() {
            // Due when asked: the delay from enqueue on, by Redis's clock
            // (rounded up to the ms: the delay, or 1 ms more).
            let measured =
                runs[0]["due_ms"].as_i64().unwrap() - runs[0]["created_ms"].as_i64().unwrap();
            assert!(
                measured == delay || measured == delay + 1,
                "{id}: due - created = {measured}, asked {delay}"
            );
        }
    }
    // Arguments as the app passed them (JSON).
    let orders: HashSet<i64> = list(&rc, "shop:ran")
        .iter()
        .filter(|r| r["what"] == "close_order")
        .map(|r| r["arg"].as_i64().unwrap())
        .collect();
    assert_eq!(orders, (1000..1020).chain([2000]).collect());
    assert_eq!(
        by["remind:flaky"][0]["arg"],
        serde_json::json!(["flaky", "mail"])
    );
    let remind_u1: Vec<&Value> = by
        .values()
        .flatten()
        .filter(|r| r["arg"] == serde_json::json!(["u1", "sms"]))
        .collect();
    assert_eq!(remind_u1.len(), 1);
    // Retry(max=1, interval=0.1): dead after 2 attempts, with the cause.
    let dead = q.get("shop", "refund:8").await.unwrap().unwrap();
    assert_eq!(dead.attempts, 2);
    assert_eq!(
        dead.last_error.as_deref(),
        Some("ValueError: card declined")
    );
    // Retry intervals as given: 0.1 s, then 0.2 s (Redis's clock).
    let charge = &by["charge:7"];
    let gap1 = charge[1]["due_ms"].as_i64().unwrap() - charge[0]["now_ms"].as_i64().unwrap();
    let gap2 = charge[2]["due_ms"].as_i64().unwrap() - charge[1]["now_ms"].as_i64().unwrap();
    assert!(gap1 >= 100, "first retry due {gap1} ms after the failure");
    assert!(gap2 >= 200, "second retry due {gap2} ms after the failure");
    // A crash (os._exit mid-job) is retried at once, not after the 120 s
    // timeout: the second attempt's due time is the crash plus the backoff.
    let crash = &by["crash:9"];
    let redo = crash[1]["due_ms"].as_i64().unwrap() - crash[0]["now_ms"].as_i64().unwrap();
    assert!(redo < 60_000, "the crashed job came back after {redo} ms");
    drop(svc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_bullmq_style_app_under_serve() {
    if provision::skipped("node") {
        return;
    }
    // The client as a user installs it: npm pack, npm install of the tarball.
    let app = provision::node_app_dir().unwrap_or_else(|e| panic!("{e}"));
    for f in ["shop-queue.js", "shop-worker.js"] {
        std::fs::copy(
            provision::clients_dir().join("node/test/apps").join(f),
            app.join(f),
        )
        .unwrap();
    }
    let server = RedisServer::start();
    let url = server.url();
    let rc = redis::Client::open(url.as_str()).unwrap();
    let q = Queue::connect(url.as_str()).await.unwrap();
    let svc = serve(&url, &["node".into(), "shop-worker.js".into()], &app, "");

    let out = Command::new("node")
        .arg("shop-queue.js")
        .current_dir(&app)
        .env("SHOP_REDIS_URL", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let enqueued: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(enqueued.len(), 29);
    let status = |id: &str| -> Vec<&str> {
        enqueued
            .iter()
            .filter(|e| e["id"] == id)
            .map(|e| e["status"].as_str().unwrap())
            .collect()
    };
    assert_eq!(status("later:2000"), ["created", "duplicate"]);
    assert_eq!(status("gone:3000"), ["removed"]);
    let ids: HashSet<String> = enqueued
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .filter(|id| id != "gone:3000")
        .collect();
    assert_eq!(ids.len(), 27);

    let wait = Duration::from_secs(60);
    eventually(wait, "every job reaches its end", || async {
        let by = runs_by_id(&rc);
        let mut settled = true;
        for id in &ids {
            let job = q.get("shop", id).await.unwrap();
            settled &= match id.as_str() {
                "refund:8" | "fatal:12" => job.is_some_and(|j| j.state == State::Dead),
                _ => job.is_none() && by.contains_key(id),
            };
        }
        settled
    })
    .await;
    assert!(q.get("shop", "gone:3000").await.unwrap().is_none());
    let by = runs_by_id(&rc);
    assert!(!by.contains_key("gone:3000"), "a removed job never runs");
    for e in &enqueued {
        let id = e["id"].as_str().unwrap();
        if id == "gone:3000" || e["status"] == "duplicate" {
            continue;
        }
        let runs = &by[id];
        let attempts: Vec<i64> = runs
            .iter()
            .map(|r| r["attempt"].as_i64().unwrap())
            .collect();
        match id {
            "charge:7" => assert_eq!(attempts, [1, 2, 3], "fixed backoff, 3 attempts"),
            "refund:8" => assert_eq!(attempts, [1, 2], "attempts: 2, then dead"),
            "fatal:12" => assert_eq!(attempts, [1], "UnrecoverableError: dead at once"),
            // The crash may be recorded or not before the program died; it
            // ends done on a later attempt.
            id if id.starts_with("crash:") => {
                assert!(
                    attempts.len() <= 3 && attempts.windows(2).all(|w| w[1] == w[0] + 1),
                    "{id}: {attempts:?}"
                )
            }
            _ => assert_eq!(attempts, [1], "{id} runs once"),
        }
        assert_eq!(runs[0]["name"], e["name"], "{id}: the job name is kept");
        if let Some(delay) = e["delay"].as_i64() {
            let measured =
                runs[0]["due_ms"].as_i64().unwrap() - runs[0]["created_ms"].as_i64().unwrap();
            assert!(
                measured == delay || measured == delay + 1,
                "{id}: due - created = {measured}, asked {delay}"
            );
        }
    }
    let orders: HashSet<i64> = list(&rc, "shop:ran")
        .iter()
        .filter(|r| r["name"] == "close-order")
        .map(|r| r["data"]["orderId"].as_i64().unwrap())
        .collect();
    assert_eq!(orders, (1000..1020).chain([2000]).collect());
    // changeDelay: due 400 ms after the change, not 10 minutes.
    let later = &by["later:2000"][0];
    assert!(later["due_ms"].as_i64().unwrap() - later["created_ms"].as_i64().unwrap() < 60_000);
    let refund = q.get("shop", "refund:8").await.unwrap().unwrap();
    assert_eq!(refund.last_error.as_deref(), Some("Error: card declined"));
    assert_eq!(refund.attempts, 2);
    let fatal = q.get("shop", "fatal:12").await.unwrap().unwrap();
    assert_eq!(fatal.last_error.as_deref(), Some("order does not exist"));
    // Fixed backoff of 100 ms between the charge's attempts (Redis's clock).
    let charge = &by["charge:7"];
    for w in charge.windows(2) {
        let gap = w[1]["due_ms"].as_i64().unwrap() - w[0]["now_ms"].as_i64().unwrap();
        assert!(
            gap >= 100,
            "retry due {gap} ms after the failure, backoff 100 ms"
        );
    }
    // The crashes (process.exit, an uncaught exception, an unhandled
    // rejection) ended their programs and were retried at once: every job is
    // done well inside the topic's 120 s timeout, which a hung program would
    // have waited out (issue 29, item 14).
    drop(svc);
}

/// The clients carry the project's version, and package as users install
/// them: `pip wheel ./clients/python` builds punctual-VERSION's wheel,
/// `npm pack` makes punctual-VERSION.tgz (installed by the Node app test).
#[test]
fn client_packages_carry_the_project_version_and_build() {
    let version = env!("CARGO_PKG_VERSION");
    let dir = provision::clients_dir();
    let pyproject = std::fs::read_to_string(dir.join("python/pyproject.toml")).unwrap();
    assert!(
        pyproject.contains(&format!("\nversion = \"{version}\"\n")),
        "clients/python/pyproject.toml's version is not {version}"
    );
    let init = std::fs::read_to_string(dir.join("python/punctual/__init__.py")).unwrap();
    assert!(init.contains(&format!("__version__ = \"{version}\"")));
    let package: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("node/package.json")).unwrap())
            .unwrap();
    assert_eq!(package["version"], version, "clients/node/package.json");
    let lock: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("node/package-lock.json")).unwrap())
            .unwrap();
    assert_eq!(lock["version"], version, "clients/node/package-lock.json");
    let composer: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("php/composer.json")).unwrap())
            .unwrap();
    if let Some(v) = composer.get("version") {
        assert_eq!(v, version, "clients/php/composer.json");
    }

    if !provision::skipped("python") {
        let venv = provision::python_app_venv().unwrap_or_else(|e| panic!("{e}"));
        let out_dir = tempfile::tempdir().unwrap();
        let out = Command::new(venv.join("bin/pip"))
            .args(["wheel", "--quiet", "--no-deps", "--wheel-dir"])
            .arg(out_dir.path())
            .arg(dir.join("python"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", output_text(&out));
        let wheel = out_dir
            .path()
            .join(format!("punctual-{version}-py3-none-any.whl"));
        assert!(wheel.exists(), "no {}", wheel.display());
    }
    if !provision::skipped("node") {
        let app = provision::node_app_dir().unwrap_or_else(|e| panic!("{e}"));
        assert!(app.join(format!("punctual-{version}.tgz")).exists());
        // Installed from the tarball: a copy with its dependency, not a symlink.
        let installed = app.join("node_modules/punctual");
        assert!(!installed
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(installed.join("bullmq.js").exists() && installed.join("lua/enqueue.lua").exists());
    }
}

/// The README's Django recipe: `python -m punctual --django SETTINGS APP`
/// sets Django up before importing the tasks and closes the connections
/// Django would close between requests (CONN_MAX_AGE = 0 here) after each
/// job: three jobs, three connections opened, the settings read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_django_recipe_under_serve() {
    if provision::skipped("python") {
        return;
    }
    let venv = provision::django_venv().unwrap_or_else(|e| panic!("{e}"));
    let app = provision::clients_dir().join("python/tests/apps");
    let server = RedisServer::start();
    let url = server.url();
    let rc = redis::Client::open(url.as_str()).unwrap();
    let db = tempfile::tempdir().unwrap();
    let argv = [
        venv.join("bin/python").display().to_string(),
        "-m".into(),
        "punctual".into(),
        "--django".into(),
        "djshop.settings".into(),
        "djshop.tasks".into(),
    ];
    let db_env = format!(
        ", DJSHOP_DB = {:?}",
        db.path().join("db.sqlite3").display().to_string()
    );
    let mut svc = Service::new();
    let text = format!(
        "redis = {url:?}\nworkers = 1\n\n[topics.shop]\nresident = [{}]\ncwd = {:?}\n\
         processes = 1\nenv = {{ SHOP_REDIS_URL = {url:?}{db_env} }}\n",
        argv.iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        app.display().to_string(),
    );
    std::fs::write(svc.path("punctual.toml"), text).unwrap();
    svc.start();
    let q = Queue::connect(url.as_str()).await.unwrap();
    for n in 1..=3 {
        let payload = format!(r#"{{"task":"djshop.tasks.count_rows","args":[{n}],"kwargs":{{}}}}"#);
        q.enqueue("shop", punctual::Job::new(payload))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(60), "three jobs run", || async {
        list(&rc, "djshop:ran").len() == 3
    })
    .await;
    let ran = list(&rc, "djshop:ran");
    let mut ns: Vec<i64> = ran.iter().map(|r| r["n"].as_i64().unwrap()).collect();
    ns.sort_unstable();
    assert_eq!(ns, [1, 2, 3]);
    assert!(ran.iter().all(|r| r["shop"] == "djshop"), "{ran:?}");
    let mut conn = rc.get_connection().unwrap();
    let opened: i64 = redis::cmd("GET")
        .arg("djshop:connections")
        .query(&mut conn)
        .unwrap();
    assert_eq!(opened, 3, "a connection per job: closed after each");
    drop(svc);
}
