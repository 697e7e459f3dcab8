//! The dashboard end to end in a real headless Chromium (Debian's chromium
//! and chromium-driver, which `.ci/run` installs), driven over chromedriver's
//! WebDriver HTTP API: the page loads, its counts follow jobs pushed by a
//! producer without a reload, the Replay button replays a dead job, a
//! screenshot is saved to `target/test-artifacts/dashboard.png`, and the
//! dashboard of `punctual serve` shows its resident handlers; the schedules
//! panel (listing, pause and resume) and the "limited" marker of a topic
//! held back by its limits.

mod support;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use punctual::raw::{self, FailKind};
use punctual::{Job, Queue, State};
use punctual_testkit::{free_port, RedisServer};
use serde_json::{json, Value};
use support::{Server, TOKEN};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The key of an element reference in WebDriver replies.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process (in its own process group, with the browsers it
/// starts) and one browser session.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

#[derive(Debug)]
struct WebDriverError {
    error: String,
    message: String,
}

impl std::fmt::Display for WebDriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.error, self.message)
    }
}

impl Browser {
    async fn start() -> Browser {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: install Debian's chromium and chromium-driver (.ci/run does: apt-get install chromium chromium-driver)"
            );
        }
        let port = free_port();
        let profile = tempfile::tempdir().unwrap();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await {
                let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
                if v["value"]["ready"] == true {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-quic", "--no-first-run", "--no-default-browser-check",
                    "--window-size=1400,1600", "--hide-scrollbars",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let mut b = Browser {
            driver,
            base,
            session: String::new(),
            http,
            _profile: profile,
        };
        let v = b
            .raw("POST", "/session", caps)
            .await
            .unwrap_or_else(|e| panic!("chromium did not start: {e}"));
        b.session = v["sessionId"].as_str().unwrap().to_string();
        b
    }

    /// One WebDriver command; `value` of the reply.
    async fn raw(&self, method: &str, path: &str, body: Value) -> Result<Value, WebDriverError> {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self
                .http
                .post(url)
                .header("Content-Type", "application/json")
                .body(body.to_string()),
        };
        let resp = req.send().await.expect("chromedriver answers");
        let ok = resp.status().is_success();
        let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        if ok {
            Ok(v["value"].clone())
        } else {
            Err(WebDriverError {
                error: v["value"]["error"].as_str().unwrap_or("?").to_string(),
                message: v["value"]["message"].as_str().unwrap_or("?").to_string(),
            })
        }
    }

    async fn cmd(&self, method: &str, path: &str, body: Value) -> Result<Value, WebDriverError> {
        let path = format!("/session/{}{path}", self.session);
        self.raw(method, &path, body).await
    }

    async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", json!({ "url": url }))
            .await
            .unwrap();
    }

    /// The element matching `css`, if any.
    async fn find(&self, css: &str) -> Option<String> {
        match self
            .cmd(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await
        {
            Ok(v) => Some(v[ELEMENT].as_str().unwrap().to_string()),
            Err(e) if e.error == "no such element" => None,
            Err(e) => panic!("find {css}: {e}"),
        }
    }

    /// The text of `css`, or `None` while it does not exist. The page
    /// re-renders, so a stale element is looked up again.
    async fn text(&self, css: &str) -> Option<String> {
        for _ in 0..5 {
            let id = self.find(css).await?;
            match self
                .cmd("GET", &format!("/element/{id}/text"), Value::Null)
                .await
            {
                Ok(v) => return Some(v.as_str().unwrap().to_string()),
                Err(e) if e.error == "stale element reference" => continue,
                Err(e) => panic!("text of {css}: {e}"),
            }
        }
        None
    }

    /// Waits until `css` exists and its text satisfies `ok`.
    async fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(t) = self.text(css).await {
                if ok(&t) {
                    return t;
                }
            }
            if Instant::now() > deadline {
                let shot = self.screenshot().await;
                let path = artifact("dashboard-timeout.png");
                std::fs::write(&path, shot).unwrap();
                panic!(
                    "timed out waiting for {what} ({css}: {:?}); screenshot at {}",
                    self.text(css).await,
                    path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_gone(&self, css: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.find(css).await.is_some() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks `css` as a user would (retrying when the page re-rendered it).
    async fn click(&self, css: &str) {
        for _ in 0..10 {
            let id = self
                .find(css)
                .await
                .unwrap_or_else(|| panic!("nothing to click at {css}"));
            match self
                .cmd("POST", &format!("/element/{id}/click"), json!({}))
                .await
            {
                Ok(_) => return,
                Err(e) if e.error == "stale element reference" => continue,
                Err(e) => panic!("click {css}: {e}"),
            }
        }
        panic!("{css} kept going stale");
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await.unwrap();
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        )
        .await
        .unwrap();
    }

    async fn script(&self, js: &str) -> Value {
        self.cmd("POST", "/execute/sync", json!({"script": js, "args": []}))
            .await
            .unwrap()
    }

    async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let v = self.cmd("GET", "/screenshot", Value::Null).await.unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    }

    async fn quit(&self) {
        let _ = self.cmd("DELETE", "", Value::Null).await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the browsers it started share its process group.
        let _ = killpg(Pid::from_raw(self.driver.id() as i32), Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

/// `target/test-artifacts/NAME`.
fn artifact(name: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Enqueues `id` due now with one attempt, claims it and fails it: dead.
async fn make_dead(q: &Queue, topic: &str, id: &str, error: &str) {
    q.enqueue(
        topic,
        Job::new(format!(r#"{{"order": "{id}"}}"#))
            .id(id)
            .max_attempts(1),
    )
    .await
    .unwrap();
    let d = raw::claim(q, &topic.parse().unwrap(), 1, Duration::from_secs(30))
        .await
        .unwrap();
    raw::fail(
        q,
        &topic.parse().unwrap(),
        &d[0].lease(),
        error,
        FailKind::Permanent,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_live_counts_and_replays_a_dead_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    for i in 0..3 {
        q.enqueue(
            "orders",
            Job::new(format!(r#"{{"order": {i}}}"#))
                .id(format!("order:{i}"))
                .delay(Duration::from_secs(60 * (i + 1))),
        )
        .await
        .unwrap();
    }
    make_dead(
        &q,
        "orders",
        "order:900",
        "HTTP 503 from the payment gateway",
    )
    .await;
    make_dead(
        &q,
        "orders",
        "order:901",
        "exit status 65: unknown customer",
    )
    .await;
    q.enqueue_batch(
        "coupons",
        (0..5)
            .map(|i| Job::new("expire").delay(Duration::from_secs(3600 + i)))
            .collect(),
    )
    .await
    .unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &["--sample-interval", "1s"]).await;

    let browser = Browser::start().await;
    browser.goto(&api.url("/")).await;
    let orders = r#"#topics tr[data-topic="orders"]"#;
    browser
        .wait_text(&format!("{orders} td.pool"), "3 pooled orders", |t| {
            t == "3"
        })
        .await;
    assert_eq!(
        browser.text(&format!("{orders} td.dead")).await.as_deref(),
        Some("2")
    );
    assert_eq!(browser.script("return document.title").await, "punctual");

    // The token, as a user types it.
    browser.type_into("#token", TOKEN).await;
    browser.click("#token-save").await;
    browser
        .wait_text("#token-state", "the token accepted", |t| t == "accepted")
        .await;

    // A producer pushes jobs: the counts change without a reload.
    browser.script("window.notReloaded = true").await;
    let more: Vec<Job> = (10..14)
        .map(|i| {
            Job::new("more")
                .id(format!("order:{i}"))
                .delay(Duration::from_secs(600))
        })
        .collect();
    q.enqueue_batch("orders", more).await.unwrap();
    browser
        .wait_text(&format!("{orders} td.pool"), "7 pooled orders", |t| {
            t == "7"
        })
        .await;
    assert_eq!(browser.script("return window.notReloaded").await, true);

    // Open the topic and replay one dead job with its button.
    browser.click(&format!("{orders} td.topic")).await;
    browser
        .wait_text("#detail-topic", "the orders detail", |t| t == "orders")
        .await;
    let dead_row = r#"#dead tr[data-id="order:900"]"#;
    let err = browser
        .wait_text(&format!("{dead_row} td.err"), "the dead job's error", |t| {
            !t.is_empty()
        })
        .await;
    assert_eq!(err, "HTTP 503 from the payment gateway");
    browser.click(&format!("{dead_row} button.replay")).await;
    browser
        .wait_gone(dead_row, "the replayed job to leave the dead list")
        .await;
    browser
        .wait_text(&format!("{orders} td.dead"), "one dead order left", |t| {
            t == "1"
        })
        .await;
    browser
        .wait_text("#flash", "the replay message", |t| t.contains("Replayed 1"))
        .await;
    let job = q.get("orders", "order:900").await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (State::Ready, 0));
    browser
        .wait_text(
            r#"#ready tr[data-id="order:900"] td.id"#,
            "it in the ready list",
            |t| t == "order:900",
        )
        .await;

    // Pause another topic from its row.
    browser
        .click(r#"#topics tr[data-topic="coupons"] button.pause"#)
        .await;
    browser
        .wait_text(
            r#"#topics tr[data-topic="coupons"] td.status"#,
            "coupons paused",
            |t| t == "paused",
        )
        .await;
    assert!(q.stats("coupons").await.unwrap().paused);

    // Look a job up by id.
    browser.type_into("#lookup-topic", "orders").await;
    browser.type_into("#lookup-id", "order:1").await;
    browser.click("#lookup-form button").await;
    let found = browser
        .wait_text("#lookup-result dl", "the job found", |t| {
            t.contains("order:1")
        })
        .await;
    assert!(
        found.contains("pool") && found.contains("0 of 6"),
        "{found}"
    );

    // The charts read the history in Redis: no scheduler ran here, so the
    // throughput chart has no figures and says why (the history with
    // figures is checked below, in its own test).
    browser
        .wait_text("#chart-throughput", "the throughput chart", |t| {
            t.contains("no scheduler took snapshots")
        })
        .await;
    let updated = browser.text("#refreshed").await.unwrap();
    assert!(updated.starts_with("updated "), "{updated}");
    // `punctual api` runs no resident handler: no such panel.
    assert_eq!(
        browser
            .script("return document.querySelector('#resident').hidden")
            .await,
        true
    );

    let png = browser.screenshot().await;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let path = artifact("dashboard.png");
    std::fs::write(&path, &png).unwrap();
    eprintln!("screenshot: {}", path.display());

    // The dashboard of `punctual serve` shows its resident programs.
    let dir = tempfile::tempdir().unwrap();
    let handler = dir.path().join("mail.py");
    std::fs::write(&handler, RESIDENT).unwrap();
    let svc = Server::serve(
        &redis.url(),
        None,
        "workers = 1",
        &format!(
            "[topics.mail]\nresident = [\"python3\", {:?}]\nprocesses = 2",
            handler.display().to_string()
        ),
    )
    .await;
    for i in 0..3 {
        q.enqueue("mail", Job::new("hi").id(format!("mail:{i}")))
            .await
            .unwrap();
    }
    browser.goto(&svc.url("/")).await;
    let mail = r#"#resident tr[data-topic="mail"]"#;
    browser
        .wait_text(&format!("{mail} td.jobs"), "3 jobs handled", |t| t == "3")
        .await;
    browser
        .wait_text(&format!("{mail} td.alive"), "2 programs alive", |t| {
            t == "2"
        })
        .await;
    assert_eq!(
        browser
            .text(&format!("{mail} td.restarts"))
            .await
            .as_deref(),
        Some("0")
    );
    std::fs::write(
        artifact("dashboard-resident.png"),
        browser.screenshot().await,
    )
    .unwrap();
    browser.quit().await;
}

/// A resident handler (docs/RESIDENT.md) that says every job is done.
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

/// The chart points of the line `name` in the chart `chart`: (minute end in
/// epoch ms, value, y in the SVG).
async fn chart_points(browser: &Browser, chart: &str, name: &str) -> Vec<(i64, f64, f64)> {
    let js = format!(
        "return [...document.querySelectorAll('#{chart} svg circle')]\
         .filter((c) => c.dataset.line === {name:?})\
         .map((c) => [Number(c.dataset.t), Number(c.dataset.v), Number(c.getAttribute('cy'))])"
    );
    browser
        .script(&js)
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_f64().unwrap() as i64,
                p[1].as_f64().unwrap(),
                p[2].as_f64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_charts_the_history_with_gaps_and_lateness_on_a_log_scale() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("orders", Job::new("x")).await.unwrap();
    let cli = |args: &[&str]| redis.cli(args).unwrap();
    let t: Vec<i64> = cli(&["TIME"])
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let m = t[0] / 60;
    // Snapshots of m-6 .. m-3 and of m-1 (m-2 has none: a gap), as
    // schedulers took them: 100 jobs done a minute.
    for (i, minute) in [m - 6, m - 5, m - 4, m - 3, m - 1].into_iter().enumerate() {
        let done = (i as i64 * 100).to_string();
        let key = format!("punctual:{{orders}}:hist:{minute}");
        cli(&[
            "HSET",
            &key,
            "at",
            &(minute * 60_000).to_string(),
            "done",
            &done,
        ]);
    }
    // Lateness: about 5 ms, except a 60 s spike in m-4.
    for (minute, count, sum_us, max_us) in [
        (m - 6, 100, 500_000, 9_000),
        (m - 5, 100, 480_000, 8_000),
        (m - 4, 1, 60_000_000, 60_000_000),
        (m - 3, 100, 520_000, 9_500),
    ] {
        let key = format!("punctual:{{orders}}:late:{minute}");
        cli(&[
            "HSET",
            &key,
            "count",
            &count.to_string(),
            "sum_us",
            &sum_us.to_string(),
            "max_us",
            &max_us.to_string(),
        ]);
    }
    let api = Server::api(&redis.url(), None, &[]).await;
    let browser = Browser::start().await;
    browser.goto(&api.url("/#topic=orders")).await;
    browser
        .wait_text("#detail-topic", "the orders detail", |t| t == "orders")
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while chart_points(&browser, "chart-lateness", "mean").await.len() < 4 {
        assert!(Instant::now() < deadline, "no lateness points after 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Throughput: one point per minute with both snapshots, none for a gap.
    let done = chart_points(&browser, "chart-throughput", "done/min").await;
    let minutes: Vec<i64> = done.iter().map(|p| p.0 / 60_000 - 1).collect();
    assert_eq!(minutes, vec![m - 6, m - 5, m - 4], "{done:?}");
    assert!(done.iter().all(|p| p.1 == 100.0), "{done:?}");

    // Lateness: the 5 ms minutes stay well clear of the axis beside the
    // 60 s spike (on a linear axis they would sit on it, at 1/12,000 of
    // its height).
    let mean = chart_points(&browser, "chart-lateness", "mean").await;
    let spike = mean.iter().find(|p| p.1 == 60_000.0).expect("the spike");
    let calm = mean
        .iter()
        .find(|p| (p.1 - 5.0).abs() < 0.01)
        .expect("a 5 ms minute");
    let bottom: f64 = browser
        .script("return Number(document.querySelector('#chart-lateness svg').dataset.bottom)")
        .await
        .as_f64()
        .unwrap();
    let (h_spike, h_calm) = (bottom - spike.2, bottom - calm.2);
    assert!(
        h_spike > 0.0 && h_calm > 0.1 * h_spike,
        "spike {spike:?}, calm {calm:?}, bottom {bottom}"
    );
    assert!(
        browser
            .text("#chart-lateness")
            .await
            .unwrap()
            .contains("1s"),
        "decade labels on the lateness axis"
    );
    std::fs::write(
        artifact("dashboard-history.png"),
        browser.screenshot().await,
    )
    .unwrap();
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_panel_shows_who_changed_what() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue(
        "orders",
        Job::new("x").id("order:1").delay(Duration::from_secs(600)),
    )
    .await
    .unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    // A cancel through the CLI, then a pause through the API.
    let out = Command::new(support::BIN)
        .args(["--redis", &redis.url(), "cancel", "orders", "order:1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", support::output_text(&out));
    let (status, v) = api
        .authed("POST", "/api/v1/topics/orders/pause", None)
        .await;
    assert_eq!(status, 200, "{v}");

    let browser = Browser::start().await;
    browser.goto(&api.url("/")).await;
    let newest = "#audit tbody tr:first-child";
    browser
        .wait_text(&format!("{newest} td.action"), "the pause, newest", |t| {
            t == "pause"
        })
        .await;
    let who = browser.text(&format!("{newest} td.who")).await.unwrap();
    assert!(who.starts_with("api (127.0.0.1:"), "{who}");
    assert_eq!(
        browser.text(&format!("{newest} td.topic")).await.as_deref(),
        Some("orders")
    );
    let older = "#audit tbody tr:nth-child(2)";
    assert_eq!(
        browser.text(&format!("{older} td.action")).await.as_deref(),
        Some("cancel")
    );
    let who = browser.text(&format!("{older} td.who")).await.unwrap();
    assert!(who.starts_with("cli ("), "{who}");
    let detail = browser.text(&format!("{older} td.detail")).await.unwrap();
    assert!(detail.contains("order:1"), "{detail}");

    // A resume from the dashboard's own button appears without a reload.
    browser.type_into("#token", TOKEN).await;
    browser.click("#token-save").await;
    browser
        .wait_text("#token-state", "the token accepted", |t| t == "accepted")
        .await;
    browser
        .click(r#"#topics tr[data-topic="orders"] button.resume"#)
        .await;
    browser
        .wait_text(&format!("{newest} td.action"), "the resume, newest", |t| {
            t == "resume"
        })
        .await;
    std::fs::write(artifact("dashboard-audit.png"), browser.screenshot().await).unwrap();

    // A trail that cannot be read says so in its panel; the rest of the
    // page keeps refreshing.
    redis.cli(&["DEL", "punctual:audit"]).unwrap();
    redis.cli(&["SET", "punctual:audit", "not a list"]).unwrap();
    browser
        .wait_text("#audit tbody", "the audit error", |t| {
            t.contains("cannot read the audit trail")
        })
        .await;
    q.enqueue("orders", Job::new("y").delay(Duration::from_secs(600)))
        .await
        .unwrap();
    browser
        .wait_text(
            r#"#topics tr[data-topic="orders"] td.pool"#,
            "the new job counted",
            |t| t == "1",
        )
        .await;
    browser.quit().await;
}

/// The schedules panel lists a topic's schedules (timing, catch-up, next
/// occurrence) and pauses and resumes one with its button; a topic whose
/// ready jobs a limit holds back is marked in the topics table, with its
/// limits in the tooltip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_schedules_and_marks_a_limited_topic() {
    use punctual::schedule::{CatchUp, Schedule};
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.schedule_put(
        "orders",
        Schedule::cron("nightly", "0 3 * * *").tz("Europe/Berlin"),
    )
    .await
    .unwrap();
    q.schedule_put(
        "orders",
        Schedule::every("sweep", Duration::from_secs(300))
            .catch_up(CatchUp::Spread)
            .spread(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    // hooks: at most 1 running, 1 running and 2 ready: held back.
    q.set_limits("hooks", &punctual::Limits::default().max_running(1))
        .await
        .unwrap();
    for i in 0..3 {
        q.enqueue("hooks", Job::new("x").id(format!("h{i}")))
            .await
            .unwrap();
    }
    let got = raw::claim(&q, &"hooks".parse().unwrap(), 1, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        q.stats("hooks").await.unwrap().limited,
        Some(punctual::Limited::MaxRunning)
    );

    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let browser = Browser::start().await;
    browser.goto(&api.url("/#topic=orders")).await;
    browser
        .wait_text("#detail-topic", "the orders detail", |t| t == "orders")
        .await;

    // The limited marker, with the limit in its tooltip; none on orders.
    let hooks = r#"#topics tr[data-topic="hooks"] td.ready"#;
    let ready = browser
        .wait_text(hooks, "hooks marked as limited", |t| {
            t.contains("max_running")
        })
        .await;
    assert_eq!(ready, "2 (max_running)");
    let title = browser
        .script(&format!(
            "return document.querySelector('{} span.limited').title",
            hooks.replace('\'', "\\'")
        ))
        .await;
    assert_eq!(title, "held back by its limits: max running 1");
    assert_eq!(
        browser
            .script(r#"return document.querySelectorAll('#topics tr[data-topic="orders"] span.limited').length"#)
            .await,
        0
    );

    // The schedules, by name, with their timing and catch-up.
    let nightly = r#"#schedules tr[data-name="nightly"]"#;
    browser
        .wait_text(
            &format!("{nightly} td:nth-child(2)"),
            "the nightly cron",
            |t| t == "0 3 * * * (Europe/Berlin)",
        )
        .await;
    assert_eq!(
        browser
            .text(&format!("{nightly} td:nth-child(3)"))
            .await
            .as_deref(),
        Some("all")
    );
    let next = browser
        .text(&format!("{nightly} td:nth-child(4)"))
        .await
        .unwrap();
    assert!(next.contains("(in "), "the next occurrence: {next}");
    let sweep = r#"#schedules tr[data-name="sweep"]"#;
    assert_eq!(
        browser
            .text(&format!("{sweep} td:nth-child(2)"))
            .await
            .as_deref(),
        Some("every 5 m 0 s")
    );
    assert_eq!(
        browser
            .text(&format!("{sweep} td:nth-child(3)"))
            .await
            .as_deref(),
        Some("spread over 1 m 0 s")
    );
    let names = browser
        .script("return [...document.querySelectorAll('#schedules tbody tr')].map((r) => r.dataset.name)")
        .await;
    assert_eq!(names, json!(["nightly", "sweep"]));

    // Pause and resume nightly with its button.
    browser.type_into("#token", TOKEN).await;
    browser.click("#token-save").await;
    browser
        .wait_text("#token-state", "the token accepted", |t| t == "accepted")
        .await;
    browser.click(&format!("{nightly} button")).await;
    browser
        .wait_text(
            &format!("{nightly} td:nth-child(4)"),
            "nightly paused",
            |t| t == "paused",
        )
        .await;
    browser
        .wait_text("#flash", "the pause message", |t| {
            t.contains("Paused schedule nightly of orders.")
        })
        .await;
    let info = q.schedule("orders", "nightly").await.unwrap().unwrap();
    assert!(info.schedule.paused);
    assert_eq!(
        browser.text(&format!("{nightly} button")).await.as_deref(),
        Some("Resume")
    );
    std::fs::write(
        artifact("dashboard-schedules.png"),
        browser.screenshot().await,
    )
    .unwrap();
    browser.click(&format!("{nightly} button")).await;
    browser
        .wait_text(
            &format!("{nightly} td:nth-child(4)"),
            "nightly resumed",
            |t| t.contains("(in "),
        )
        .await;
    assert!(
        !q.schedule("orders", "nightly")
            .await
            .unwrap()
            .unwrap()
            .schedule
            .paused
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_processes_and_warns_about_an_overdue_topic() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    // A worker and no scheduler: due jobs of a topic with groups stay in
    // the pool (workers claim due jobs from the pool themselves only on
    // topics without groups).
    let svc = Server::serve(
        &redis.url(),
        None,
        "workers = 1\nschedulers = 0\noverdue_alert = \"1s\"",
        "[topics.orders]\nexec = [\"true\"]",
    )
    .await;
    for i in 0..2 {
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
    let browser = Browser::start().await;
    browser.goto(&svc.url("/")).await;
    browser
        .wait_text(
            r#"#processes tr[data-role="worker"] td.topics"#,
            "the worker in the Processes panel",
            |t| t == "orders",
        )
        .await;
    assert_eq!(
        browser
            .text(r#"#processes tr[data-role="supervisor"] td.role"#)
            .await
            .as_deref(),
        Some("supervisor")
    );
    let warning = browser
        .wait_text("#overdue li", "the overdue warning", |t| {
            t.starts_with("topic orders: 2 jobs overdue by up to")
        })
        .await;
    assert!(warning.ends_with("no scheduler alive"), "{warning}");
    browser
        .wait_text(
            r#"#topics tr[data-topic="orders"] td.status"#,
            "orders overdue",
            |t| t == "overdue",
        )
        .await;
    std::fs::write(
        artifact("dashboard-processes.png"),
        browser.screenshot().await,
    )
    .unwrap();
    browser.quit().await;
}
