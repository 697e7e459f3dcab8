//! What `serve` and `api` keep from people who should not have it, and what
//! they stand up to: secrets out of handlers' reach, passwords out of
//! messages and pages, reads behind a token, foreign Host headers refused,
//! slow clients cut off, retry delays capped, a loading Redis waited for,
//! ambiguous JSON refused. The real binary against a private redis-server.

mod support;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use punctual::{Job, Queue, State};
use punctual_testkit::eventually;
use punctual_testkit::RedisServer;
use support::{output_text, Server, BIN, TOKEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REDIS_PW: &str = "redis-pw-7e3f9a1c";
const HEADER_SECRET: &str = "hook-secret-5b2d8c4e";

/// A redis-server that wants `REDIS_PW` (set after start: the testkit pings
/// without one), and its URL with the password.
fn redis_with_password(extra: &[&str]) -> (RedisServer, String) {
    let redis = RedisServer::start_with(extra);
    redis
        .cli(&["CONFIG", "SET", "requirepass", REDIS_PW])
        .unwrap();
    let url = format!("redis://:{REDIS_PW}@127.0.0.1:{}", redis.port());
    (redis, url)
}

/// Sends `request` as it is and reads until the server closes the
/// connection (at most 20 s; `None` when it stays open).
async fn raw(port: u16, request: &[u8]) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    match tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

fn get(path: &str, host: &str, auth: Option<&str>) -> Vec<u8> {
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n").into_bytes()
}

fn status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn handlers_find_no_secret_in_their_environment_or_their_parents() {
    let (_redis, url) = redis_with_password(&[]);
    let dir = tempfile::tempdir().unwrap();
    // The handler looks where a curious handler would: its own environment,
    // and its parent's (the worker's) environment and command line. It
    // records how much it could read, so a check that read nothing fails.
    let spy = Server::script(
        dir.path(),
        "spy.sh",
        &format!(
            r#"cat > /dev/null
out="$(dirname "$0")/found"
for f in /proc/$PPID/environ /proc/$PPID/cmdline; do
  echo "read $f $(tr '\0' '\n' < $f | wc -c)" >> "$out"
  if tr '\0' '\n' < $f | grep -q -e {REDIS_PW} -e {TOKEN} -e {HEADER_SECRET}; then
    echo "LEAK in $f" >> "$out"
  fi
done
if env | grep -q -e {REDIS_PW} -e {TOKEN} -e {HEADER_SECRET}; then
  echo "LEAK in the handler's own environment" >> "$out"
fi
echo done >> "$out""#
        ),
    );
    let topics = format!(
        "[topics.spy]\nexec = [{spy:?}]\n\
         [topics.hook]\nhttp = {{ url = \"http://127.0.0.1:9/x\", headers = {{ X-Secret = \"{HEADER_SECRET}\" }} }}\n"
    );
    let srv = Server::serve(&url, Some(TOKEN), "workers = 1", &topics).await;
    let q = Queue::connect(url.as_str()).await.unwrap();
    q.enqueue("spy", Job::new("look")).await.unwrap();
    let found = dir.path().join("found");
    eventually(Duration::from_secs(20), "the handler ran", || async {
        std::fs::read_to_string(&found).is_ok_and(|t| t.contains("done"))
    })
    .await;
    let report = std::fs::read_to_string(&found).unwrap();
    let environ_bytes: usize = report
        .lines()
        .find(|l| l.starts_with("read /proc/") && l.contains("/environ"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        environ_bytes > 0,
        "the handler could not read its parent's environment, so the check proves nothing:\n{report}"
    );
    assert!(!report.contains("LEAK"), "{report}\nlog:\n{}", srv.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn unix_socket_passwords_are_hidden_in_errors_and_in_info() {
    let sockdir = tempfile::tempdir().unwrap();
    let sock = sockdir.path().join("r.sock");
    let sock = sock.to_str().unwrap();
    let (_redis, _) = redis_with_password(&["--unixsocket", sock, "--unixsocketperm", "700"]);

    // A failed connection names the URL without its password.
    for bad in [
        format!("unix:///nonexistent/r.sock?pass={REDIS_PW}"),
        format!("redis+unix:///nonexistent/r.sock?db=0&pass={REDIS_PW}"),
        format!("redis://{REDIS_PW}@127.0.0.1:1"),
    ] {
        let out = Command::new(BIN)
            .args(["--redis", &bad, "topics"])
            .env_remove("PUNCTUAL_REDIS_URL")
            .output()
            .unwrap();
        let text = output_text(&out);
        assert!(!out.status.success(), "{bad}: {text}");
        assert!(
            text.contains("***") && !text.contains(REDIS_PW),
            "{bad}: {text}"
        );
    }

    // The unauthenticated info route, which the dashboard shows.
    let url = format!("unix://{sock}?pass={REDIS_PW}");
    let srv = Server::api(&url, None, &[]).await;
    let (code, info) = srv.call("GET", "/api/v1/info", None, None).await;
    assert_eq!(code, 200);
    let shown = info["redis"].as_str().unwrap();
    assert!(
        !shown.contains(REDIS_PW) && shown.contains("pass=***"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_naming_a_foreign_host_are_refused() {
    let redis = RedisServer::start();
    let srv = Server::api(&redis.url(), None, &[]).await;
    // What a DNS-rebinding page sends: its own name for our address.
    for host in ["evil.example", &format!("evil.example:{}", srv.port)] {
        for path in ["/api/v1/topics", "/", "/healthz"] {
            let r = raw(srv.port, &get(path, host, None)).await.unwrap();
            assert_eq!(status(&r), 421, "{host} {path}: {r}");
            assert!(r.contains("host_not_allowed"), "{r}");
        }
    }
    for host in [
        format!("127.0.0.1:{}", srv.port),
        format!("localhost:{}", srv.port),
        "[::1]".to_string(),
    ] {
        let r = raw(srv.port, &get("/api/v1/topics", &host, None))
            .await
            .unwrap();
        assert_eq!(status(&r), 200, "{host}: {r}");
    }
    drop(srv);

    // A name the operator lists is answered.
    let srv = Server::api(&redis.url(), None, &["--allowed-host", "queue.example"]).await;
    let r = raw(srv.port, &get("/api/v1/topics", "queue.example", None))
        .await
        .unwrap();
    assert_eq!(status(&r), 200, "{r}");
    let r = raw(srv.port, &get("/api/v1/topics", "evil.example", None))
        .await
        .unwrap();
    assert_eq!(status(&r), 421, "{r}");
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_can_require_the_token() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("orders", Job::new("card 4242").id("o1"))
        .await
        .unwrap();
    // The token from api_token_file, the way the docs recommend.
    let secrets = tempfile::tempdir().unwrap();
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let srv = Server::serve(
        &redis.url(),
        None,
        &format!("workers = 0\nrequire_token_for_reads = true\napi_token_file = {token_file:?}"),
        "[topics.orders]\nexec = [\"true\"]\n",
    )
    .await;
    for path in [
        "/api/v1/topics",
        "/api/v1/topics/orders",
        "/api/v1/topics/orders/jobs/o1",
        "/api/v1/topics/orders/jobs?state=ready",
        "/api/v1/topics/orders/dead",
        "/api/v1/topics/orders/series",
    ] {
        let (code, body) = srv.call("GET", path, None, None).await;
        assert_eq!(code, 401, "{path}: {body}");
        assert!(!body.to_string().contains("4242"), "{body}");
        let (code, body) = srv
            .call("GET", path, Some("wrong-token-0123456789"), None)
            .await;
        assert_eq!(code, 401, "{path}: {body}");
        let (code, body) = srv.authed("GET", path, None).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    // What the dashboard needs to ask for the token stays open, and says so.
    let (code, info) = srv.call("GET", "/api/v1/info", None, None).await;
    assert_eq!(code, 200);
    assert_eq!(info["reads_need_token"], true);
    assert!(info["redis"].is_null(), "{info}");
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_and_idle_clients_are_disconnected() {
    let redis = RedisServer::start();
    let srv = Server::api(
        &redis.url(),
        Some(TOKEN),
        &["--header-timeout", "1s", "--body-timeout", "1s"],
    )
    .await;
    // Idle: connects and sends nothing.
    assert!(
        raw(srv.port, b"").await.is_some(),
        "an idle connection stayed open"
    );
    // Slowloris: half the headers, then silence.
    assert!(
        raw(
            srv.port,
            b"GET /api/v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        )
        .await
        .is_some(),
        "a connection with half its headers stayed open"
    );
    // Slow body: headers promise 1000 bytes, 10 come.
    let req = format!(
        "POST /api/v1/topics/t/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"payload\""
    );
    let r = raw(srv.port, req.as_bytes()).await;
    assert!(r.is_some(), "a connection with half its body stayed open");
    let r = r.unwrap();
    assert!(r.is_empty() || status(&r) >= 400, "{r}");
    // Nothing half-sent was enqueued, and the server still answers.
    let (code, stats) = srv.call("GET", "/api/v1/topics/t", None, None).await;
    assert_eq!(code, 200);
    assert_eq!(stats["ready"], 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_huge_retry_after_is_capped() {
    use axum::http::StatusCode;
    use axum::routing::post;

    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let c = calls.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move || async move {
            c.lock().unwrap().push(Instant::now());
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [("retry-after", "315360000")],
                "come back in ten years",
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let topic = format!("[topics.hook]\nhttp = {{ url = \"http://127.0.0.1:{port}/hook\" }}\n");

    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    // The default cap: one day.
    let mut srv = Server::serve(&redis.url(), None, "workers = 1", &topic).await;
    q.enqueue("hook", Job::new("{}").id("h1")).await.unwrap();
    eventually(Duration::from_secs(20), "the first call failed", || async {
        q.get("hook", "h1")
            .await
            .unwrap()
            .is_some_and(|j| j.state == State::Pool && j.attempts == 1)
    })
    .await;
    let j = q.get("hook", "h1").await.unwrap().unwrap();
    let wait = Duration::from_millis((j.due_ms - j.now_ms) as u64);
    assert!(
        wait <= Duration::from_secs(24 * 3600 + 60) && wait >= Duration::from_secs(23 * 3600),
        "Retry-After: 315360000 parked the job for {wait:?}"
    );
    srv.stop();

    // A configured cap: the retry comes after 2 s.
    q.cancel("hook", "h1").await.unwrap();
    calls.lock().unwrap().clear();
    let _srv = Server::serve(
        &redis.url(),
        None,
        "workers = 1\nmax_retry_delay = \"2s\"",
        &topic,
    )
    .await;
    q.enqueue("hook", Job::new("{}").id("h2")).await.unwrap();
    eventually(Duration::from_secs(30), "the retry", || async {
        calls.lock().unwrap().len() >= 2
    })
    .await;
    let c = calls.lock().unwrap().clone();
    assert!(
        c[1] - c[0] >= Duration::from_millis(1900),
        "{:?}",
        c[1] - c[0]
    );
}

/// A redis-server reloading a dataset that takes about `keys` × 4 ms to
/// load (`DEBUG RELOAD` with `key-load-delay`), answering LOADING
/// meanwhile; and the `redis-cli` running the reload (it returns when the
/// load is done).
async fn redis_loading(keys: u32) -> (RedisServer, std::process::Child) {
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    redis
        .cli(&["DEBUG", "POPULATE", &keys.to_string()])
        .unwrap();
    redis
        .cli(&["CONFIG", "SET", "key-load-delay", "4000"])
        .unwrap();
    redis
        .cli(&[
            "CONFIG",
            "SET",
            "loading-process-events-interval-bytes",
            "1024",
        ])
        .unwrap();
    let reload = Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "DEBUG", "RELOAD"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(10), "Redis says LOADING", || async {
        redis.cli(&["PING"]).is_ok_and(|o| o.contains("LOADING"))
    })
    .await;
    (redis, reload)
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_started_while_redis_loads_waits_for_it() {
    // Seconds of loading: 1000 keys, 4 ms each.
    let (redis, mut reload) = redis_loading(1000).await;
    let srv = Server::serve(&redis.url(), None, "", "[topics.t]\nexec = [\"true\"]\n").await;
    assert!(
        srv.log().contains("loading its dataset"),
        "serve did not start while Redis loaded; log:\n{}",
        srv.log()
    );
    let _ = reload.wait();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("after")).await.unwrap();
    eventually(Duration::from_secs(20), "the job ran", || async {
        q.get("t", "after").await.unwrap().is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_with_a_key_given_twice_is_refused() {
    let redis = RedisServer::start();
    let srv = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    for body in [
        r#"{"payload":"a","payload":"b"}"#,
        r#"{"payload":{"amount":1,"amount":1000}}"#,
        r#"[{"payload":"a","id":"x","id":"y"}]"#,
    ] {
        let (code, e) = srv
            .authed("POST", "/api/v1/topics/t/jobs", Some(body))
            .await;
        assert_eq!(code, 400, "{body}: {e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains("twice"), "{body}: {msg}");
    }
    let q = Queue::connect(redis.url()).await.unwrap();
    assert_eq!(q.stats("t").await.unwrap().ready, 0);

    let mut push = Command::new(BIN)
        .args(["--redis", &redis.url(), "push", "t", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    push.stdin
        .take()
        .unwrap()
        .write_all(b"{\"payload\":{\"amount\":1,\"amount\":1000}}\n")
        .unwrap();
    let out = push.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("\"amount\"") && err.contains("twice"), "{err}");
    assert_eq!(q.stats("t").await.unwrap().ready, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bearer_scheme_is_case_insensitive() {
    let redis = RedisServer::start();
    let srv = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let r = raw(
            srv.port,
            &get(
                "/api/v1/auth",
                "127.0.0.1",
                Some(&format!("{scheme} {TOKEN}")),
            ),
        )
        .await
        .unwrap();
        assert_eq!(status(&r), 200, "{scheme}: {r}");
    }
    let r = raw(
        srv.port,
        &get("/api/v1/auth", "127.0.0.1", Some(&format!("Basic {TOKEN}"))),
    )
    .await
    .unwrap();
    assert_eq!(status(&r), 401, "{r}");
}

#[tokio::test(flavor = "multi_thread")]
async fn push_while_redis_loads_waits_for_it_and_a_producer_waits_a_bounded_time() {
    // About 4 s of loading: 1000 keys, 4 ms each.
    let (redis, mut reload) = redis_loading(1000).await;

    // The library's producer path, with a wait shorter than the load: it
    // retries, then gives up saying why, having written nothing.
    let short = Queue::builder(redis.url())
        .loading_wait(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let t0 = Instant::now();
    let err = short
        .enqueue("t", Job::new("x").id("early"))
        .await
        .unwrap_err();
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "gave up after {:?}, before its wait",
        t0.elapsed()
    );
    assert!(err.to_string().contains("loading"), "{err}");
    assert!(err.is_passing(), "{err}");

    // The CLI waits (default: up to 30 s) and says so on stderr.
    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "push", "t", "x", "--id", "p1"])
        .env_remove("PUNCTUAL_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loading its dataset"), "{stderr}");
    let _ = reload.wait();
    let q = Queue::connect(redis.url()).await.unwrap();
    assert!(
        q.get("t", "p1").await.unwrap().is_some(),
        "the job was pushed"
    );
    assert!(q.get("t", "early").await.unwrap().is_none());
}
