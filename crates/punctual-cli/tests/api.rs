//! The HTTP API end to end: the real `punctual api` and `punctual serve`
//! binaries, a private redis-server, and plain HTTP calls. "Changes nothing"
//! is checked with Redis's `DEBUG DIGEST` of the whole dataset.

mod support;

use std::process::Command;
use std::time::Duration;

use punctual::raw::{self, FailKind};
use punctual::{Job, Queue, State};
use punctual_testkit::eventually;
use punctual_testkit::RedisServer;
use serde_json::{json, Value};
use support::{Server, BIN, TOKEN};

fn redis() -> RedisServer {
    RedisServer::start_with(&["--enable-debug-command", "local"])
}

/// A digest of everything in Redis: equal digests, equal data.
fn digest(redis: &RedisServer) -> String {
    let d = redis.cli(&["DEBUG", "DIGEST"]).unwrap().trim().to_string();
    assert!(
        d.len() == 40 && d.bytes().all(|b| b.is_ascii_hexdigit()),
        "DEBUG DIGEST answered {d:?}"
    );
    d
}

/// Every route that changes something, with a body that would be valid.
const MUTATING: &[(&str, &str, Option<&str>)] = &[
    (
        "POST",
        "/api/v1/topics/orders/jobs",
        Some(r#"{"payload": "x", "id": "new"}"#),
    ),
    ("DELETE", "/api/v1/topics/orders/jobs/order:1", None),
    (
        "POST",
        "/api/v1/topics/orders/jobs/order:1/reschedule",
        Some(r#"{"delay_ms": 0}"#),
    ),
    (
        "POST",
        "/api/v1/topics/orders/dead/replay",
        Some(r#"{"all": true}"#),
    ),
    (
        "POST",
        "/api/v1/topics/orders/dead/purge",
        Some(r#"{"all": true}"#),
    ),
    ("POST", "/api/v1/topics/orders/pause", None),
    ("POST", "/api/v1/topics/orders/resume", None),
];

/// Puts one job in pool (`order:1`) and one in dead (`dead:1`).
async fn seed(q: &Queue) {
    q.enqueue(
        "orders",
        Job::new("one").id("order:1").delay(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    make_dead(q, "orders", "dead:1", "boom").await;
}

/// Enqueues `id` due now with one attempt, claims it and fails it: dead.
async fn make_dead(q: &Queue, topic: &str, id: &str, error: &str) {
    q.enqueue(
        topic,
        Job::new(format!("payload of {id}")).id(id).max_attempts(1),
    )
    .await
    .unwrap();
    let claimed = raw::claim(q, &topic.parse().unwrap(), 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "claimed {id}");
    let d = &claimed[0];
    raw::fail(
        q,
        &topic.parse().unwrap(),
        &d.lease(),
        error,
        FailKind::Permanent,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_without_the_right_token_get_401_and_change_nothing() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    seed(&q).await;
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let before = digest(&redis);

    let client = reqwest::Client::new();
    for (method, path, body) in MUTATING {
        for auth in [
            None,
            Some("Bearer wrong-token-0123456789abcdef".to_string()),
            // The right token, cut short or padded: still wrong.
            Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
            Some(format!("Bearer {TOKEN}x")),
            Some(format!("Basic {TOKEN}")),
        ] {
            let mut req = client.request(method.parse().unwrap(), api.url(path));
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            if let Some(b) = body {
                req = req.header("Content-Type", "application/json").body(*b);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status().as_u16(), 401, "{method} {path} with {auth:?}");
            assert_eq!(
                resp.headers()["www-authenticate"],
                "Bearer realm=\"punctual\""
            );
            let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
            assert_eq!(v["error"]["code"], "unauthorized", "{v}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains("token"),
                "{v}"
            );
        }
    }
    assert_eq!(digest(&redis), before, "refused calls changed Redis");

    // Reading needs no token.
    let (status, v) = api.call("GET", "/api/v1/topics", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(v["topics"][0]["topic"], "orders");
    // And the right token is accepted.
    assert_eq!(api.authed("GET", "/api/v1/auth", None).await.0, 200);
    assert_eq!(
        api.call("GET", "/api/v1/auth", Some("nope-nope-nope-nope"), None)
            .await
            .0,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_api_only_reads() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    seed(&q).await;
    let api = Server::api(&redis.url(), None, &[]).await;
    let before = digest(&redis);
    for (method, path, body) in MUTATING {
        let (status, v) = api.call(method, path, Some(TOKEN), *body).await;
        assert_eq!(status, 403, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "read_only");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("PUNCTUAL_API_TOKEN"));
    }
    assert_eq!(digest(&redis), before);
    let (status, info) = api.call("GET", "/api/v1/info", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(info["changes_allowed"], false);
    assert_eq!(info["mode"], "api");
    // No supervisor, so no resident programs: an empty object.
    let (status, resident) = api.call("GET", "/api/v1/resident", None, None).await;
    assert_eq!((status, resident), (200, json!({})));
    let (status, job) = api
        .call("GET", "/api/v1/topics/orders/jobs/order:1", None, None)
        .await;
    assert_eq!((status, job["state"].as_str()), (200, Some("pool")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_get_reschedule_and_cancel_by_id() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let jobs = "/api/v1/topics/orders/jobs";

    // Create, duplicate, replace.
    let one = r#"{"payload": {"order": 10086}, "delay_ms": 1800000, "id": "order:10086"}"#;
    let (status, v) = api.authed("POST", jobs, Some(one)).await;
    assert_eq!(
        (status, &v),
        (201, &json!({"id": "order:10086", "status": "created"}))
    );
    let (status, v) = api.authed("POST", jobs, Some(one)).await;
    assert_eq!((status, &v["status"]), (200, &json!("duplicate")));
    let replacement = r#"{"payload": "closed", "delay_ms": 600000, "id": "order:10086", "max_attempts": 3, "backoff_ms": [1000, 5000]}"#;
    let (status, v) = api
        .authed("POST", &format!("{jobs}?replace=true"), Some(replacement))
        .await;
    assert_eq!((status, &v["status"]), (200, &json!("replaced")));

    // Get: what the library sees, as JSON.
    let (status, v) = api
        .authed("GET", "/api/v1/topics/orders/jobs/order:10086", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(v["state"], "pool");
    assert_eq!(
        v["payload"], "closed",
        "a string payload is sent as its text"
    );
    assert_eq!(v["max_attempts"], 3);
    let due = v["due_ms"].as_i64().unwrap();
    let lib = q.get("orders", "order:10086").await.unwrap().unwrap();
    assert_eq!((lib.due_ms, lib.payload), (due, b"closed".to_vec()));
    assert!((due - v["created_ms"].as_i64().unwrap() - 600_000).abs() < 1000);

    // A generated id, due now: straight to ready; a JSON payload keeps its JSON text.
    let (status, v) = api
        .authed("POST", jobs, Some(r#"{"payload": {"a": [1, 2]}}"#))
        .await;
    assert_eq!(status, 201);
    let generated = v["id"].as_str().unwrap().to_string();
    let lib = q.get("orders", &generated).await.unwrap().unwrap();
    assert_eq!(lib.state, State::Ready);
    assert_eq!(lib.payload, br#"{"a":[1,2]}"#.to_vec());

    // Absolute due times: RFC 3339 and epoch ms.
    let (status, _) = api
        .authed(
            "POST",
            jobs,
            Some(r#"{"payload": "x", "id": "at:1", "at": "2031-01-01T00:00:00Z"}"#),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        q.get("orders", "at:1").await.unwrap().unwrap().due_ms,
        1_924_992_000_000
    );
    let (status, _) = api
        .authed(
            "POST",
            jobs,
            Some(r#"{"payload": "x", "id": "at:2", "at_ms": 1924992000123}"#),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        q.get("orders", "at:2").await.unwrap().unwrap().due_ms,
        1_924_992_000_123
    );

    // The next due jobs, in due order; the ready ones.
    let (status, v) = api
        .authed("GET", &format!("{jobs}?state=pool&limit=2"), None)
        .await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["order:10086", "at:1"]);
    assert_eq!(v["jobs"][0]["at_ms"], due);
    let (_, v) = api
        .authed("GET", &format!("{jobs}?state=ready"), None)
        .await;
    assert_eq!(v["jobs"][0]["id"], generated.as_str());

    // Stats of one topic and of all.
    let (status, v) = api.authed("GET", "/api/v1/topics/orders", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        (v["pool"].as_u64(), v["ready"].as_u64()),
        (Some(3), Some(1))
    );
    let (_, all) = api.authed("GET", "/api/v1/topics", None).await;
    assert_eq!(all["topics"].as_array().unwrap().len(), 1);
    assert_eq!(all["topics"][0]["counters"]["enqueued"], 5);

    // Reschedule to now: pool -> ready.
    let path = "/api/v1/topics/orders/jobs/order:10086/reschedule";
    let (status, v) = api.authed("POST", path, Some(r#"{"delay_ms": 0}"#)).await;
    assert_eq!((status, &v["was"]), (200, &json!("pool")));
    assert_eq!(
        q.get("orders", "order:10086").await.unwrap().unwrap().state,
        State::Ready
    );
    let (status, v) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/jobs/nope/reschedule",
            Some(r#"{"delay_ms": 0}"#),
        )
        .await;
    assert_eq!((status, &v["error"]["code"]), (404, &json!("not_found")));

    // A running job cannot be rescheduled: 409, and it stays running.
    let claimed = raw::claim(&q, &"orders".parse().unwrap(), 2, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let running = &claimed[0].id;
    let before = digest(&redis);
    let (status, v) = api
        .authed(
            "POST",
            &format!("/api/v1/topics/orders/jobs/{running}/reschedule"),
            Some(r#"{"delay_ms": 5000}"#),
        )
        .await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (409, &json!("not_waiting")),
        "{v}"
    );
    assert_eq!(digest(&redis), before);

    // Cancel, whatever the state; a second cancel finds nothing.
    let (status, v) = api
        .authed("DELETE", "/api/v1/topics/orders/jobs/at:1", None)
        .await;
    assert_eq!((status, &v["was"]), (200, &json!("pool")));
    let (status, v) = api
        .authed(
            "DELETE",
            &format!("/api/v1/topics/orders/jobs/{running}"),
            None,
        )
        .await;
    assert_eq!((status, &v["was"]), (200, &json!("running")));
    let (status, v) = api
        .authed("DELETE", "/api/v1/topics/orders/jobs/at:1", None)
        .await;
    assert_eq!((status, &v["error"]["code"]), (404, &json!("not_found")));
    let (status, _) = api
        .authed("GET", "/api/v1/topics/orders/jobs/at:1", None)
        .await;
    assert_eq!(status, 404);
    assert!(q.check("orders").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_enqueued_whole_or_not_at_all() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let jobs = "/api/v1/topics/orders/jobs";

    let batch: Vec<Value> = (0..1500)
        .map(|i| json!({"payload": {"n": i}, "id": format!("b:{i}"), "delay_ms": 60_000 + i}))
        .collect();
    let (status, v) = api
        .authed("POST", jobs, Some(&Value::Array(batch).to_string()))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["created"].as_u64(), v["duplicate"].as_u64()),
        (Some(1500), Some(0))
    );
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1500);
    assert_eq!(v["jobs"][7], json!({"id": "b:7", "status": "created"}));
    assert_eq!(q.stats("orders").await.unwrap().pool, 1500);

    // One bad job refuses the whole batch; the error names it.
    let before = digest(&redis);
    let bad = r#"[{"payload": 1, "id": "c:1"}, {"payload": 2, "delay_ms": -5}, {"payload": 3}]"#;
    let (status, v) = api.authed("POST", jobs, Some(bad)).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (400, &json!("invalid_input"))
    );
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("job 2: ") && msg.contains("negative"),
        "{msg}"
    );
    let bad = r#"[{"payload": 1}, {"payload": 2, "id": "x", "oops": 1}]"#;
    let (status, v) = api.authed("POST", jobs, Some(bad)).await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("job 2: unknown field `oops`"));
    let too_many = Value::Array(vec![json!({"payload": 1}); 10_001]).to_string();
    let (status, v) = api.authed("POST", jobs, Some(&too_many)).await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("over the limit of 10000"));
    assert_eq!(digest(&redis), before, "a refused batch wrote something");

    // Duplicates in a batch are reported one by one.
    let (status, v) = api
        .authed(
            "POST",
            jobs,
            Some(r#"[{"payload": 1, "id": "b:0"}, {"payload": 1, "id": "d:1"}]"#),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (v["created"].as_u64(), v["duplicate"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["jobs"][0]["status"], "duplicate");
    // An empty batch does nothing.
    let (status, v) = api.authed("POST", jobs, Some("[]")).await;
    assert_eq!((status, &v["created"]), (200, &json!(0)));
}

/// A bad request: method, path, body, then the expected status, error code
/// and a part of the message.
type Case = (
    &'static str,
    String,
    Option<String>,
    u16,
    &'static str,
    &'static str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_4xx_with_a_stable_code_and_changes_nothing() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    seed(&q).await;
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let before = digest(&redis);

    let jobs = "/api/v1/topics/orders/jobs";
    let big = format!(r#"{{"payload": "{}"}}"#, "x".repeat(64 * 1024 + 1));
    let long_id = format!(r#"{{"payload": 1, "id": "{}"}}"#, "i".repeat(201));
    let cases: Vec<Case> = vec![
        // (method, path, body, status, code, part of the message)
        (
            "POST",
            jobs.into(),
            Some("{\"payload\": ".into()),
            400,
            "invalid_json",
            "not valid JSON",
        ),
        (
            "POST",
            jobs.into(),
            Some("".into()),
            400,
            "invalid_json",
            "empty",
        ),
        (
            "POST",
            jobs.into(),
            Some("\"text\"".into()),
            400,
            "invalid_input",
            "JSON object",
        ),
        (
            "POST",
            jobs.into(),
            Some("{}".into()),
            400,
            "invalid_input",
            "missing field `payload`",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "delay": 5}"#.into()),
            400,
            "invalid_input",
            "unknown field `delay`",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "delay_ms": -1}"#.into()),
            400,
            "invalid_input",
            "negative",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "delay_ms": "5s"}"#.into()),
            400,
            "invalid_input",
            "invalid type",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "delay_ms": 400000000000}"#.into()),
            400,
            "invalid_input",
            "ten years",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "delay_ms": 5, "at_ms": 5}"#.into()),
            400,
            "invalid_input",
            "at most one",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "at": "tomorrow"}"#.into()),
            400,
            "invalid_input",
            "at: ",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "id": ""}"#.into()),
            400,
            "invalid_input",
            "may not be empty",
        ),
        (
            "POST",
            jobs.into(),
            Some(long_id),
            400,
            "invalid_input",
            "200",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "max_attempts": 0}"#.into()),
            400,
            "invalid_input",
            "at least 1",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "backoff_ms": []}"#.into()),
            400,
            "invalid_input",
            "backoff_ms",
        ),
        (
            "POST",
            jobs.into(),
            Some(big),
            400,
            "invalid_input",
            "over the 65536-byte limit",
        ),
        (
            "POST",
            format!("{jobs}?replace=maybe"),
            Some(r#"{"payload": 1}"#.into()),
            400,
            "invalid_input",
            "query",
        ),
        (
            "POST",
            "/api/v1/topics/a%7Bb%7D/jobs".into(),
            Some(r#"{"payload": 1}"#.into()),
            400,
            "invalid_input",
            "braces",
        ),
        (
            "POST",
            "/api/v1/topics/a%23b/jobs".into(),
            Some(r#"{"payload": 1}"#.into()),
            400,
            "invalid_input",
            "partitions",
        ),
        (
            "GET",
            "/api/v1/topics/orders/jobs/a%01b".into(),
            None,
            400,
            "invalid_input",
            "invalid id",
        ),
        (
            "GET",
            format!("{jobs}?state=nope"),
            None,
            400,
            "invalid_input",
            "pool, ready, running or dead",
        ),
        // A state the library parses, but no set to list.
        (
            "GET",
            format!("{jobs}?state=orphan"),
            None,
            400,
            "invalid_input",
            "pool, ready, running or dead",
        ),
        (
            "GET",
            format!("{jobs}?limit=0"),
            None,
            400,
            "invalid_input",
            "1 to 1000",
        ),
        (
            "GET",
            format!("{jobs}?limit=ten"),
            None,
            400,
            "invalid_input",
            "query",
        ),
        (
            "GET",
            format!("{jobs}?color=red"),
            None,
            400,
            "invalid_input",
            "query",
        ),
        (
            "GET",
            "/api/v1/topics/orders/dead?offset=1000000000000000001".into(),
            None,
            400,
            "invalid_input",
            "offset",
        ),
        (
            "POST",
            jobs.into(),
            Some(r#"{"payload": 1, "id": null}"#.into()),
            400,
            "invalid_input",
            "invalid type: null",
        ),
        (
            "GET",
            "/api/v1/topics/orders/dead?limit=5000".into(),
            None,
            400,
            "invalid_input",
            "1 to 1000",
        ),
        // A change to a topic answers in one order: the topic of the path
        // first, then the body.
        (
            "POST",
            "/api/v1/topics/a%7Bb%7D/dead/purge".into(),
            Some("{\"all\": ".into()),
            400,
            "invalid_input",
            "braces",
        ),
        (
            "PUT",
            "/api/v1/topics/orders/limits".into(),
            Some("{\"rate\": ".into()),
            400,
            "invalid_json",
            "not valid JSON",
        ),
        (
            "POST",
            "/api/v1/topics/orders/cancel".into(),
            Some(r#"{"id_prefix": "order:", "color": 1}"#.into()),
            400,
            "invalid_input",
            "unknown field",
        ),
        (
            "GET",
            "/api/v1/topics/orders/jobs/nope".into(),
            None,
            404,
            "not_found",
            "no live job",
        ),
        (
            "DELETE",
            "/api/v1/topics/orders/jobs/nope".into(),
            None,
            404,
            "not_found",
            "no live job",
        ),
        (
            "POST",
            "/api/v1/topics/orders/jobs/order:1/reschedule".into(),
            Some("{}".into()),
            400,
            "invalid_input",
            "new due time",
        ),
        (
            "POST",
            "/api/v1/topics/orders/jobs/order:1/reschedule".into(),
            Some(r#"{"delay_ms": -1}"#.into()),
            400,
            "invalid_input",
            "negative",
        ),
        (
            "POST",
            "/api/v1/topics/orders/jobs/dead:1/reschedule".into(),
            Some(r#"{"delay_ms": 0}"#.into()),
            409,
            "not_waiting",
            "replay it first",
        ),
        (
            "POST",
            "/api/v1/topics/orders/dead/replay".into(),
            Some("{}".into()),
            400,
            "invalid_input",
            "exactly one of",
        ),
        (
            "POST",
            "/api/v1/topics/orders/dead/replay".into(),
            Some(r#"{"ids": []}"#.into()),
            400,
            "invalid_input",
            "at least one id",
        ),
        (
            "POST",
            "/api/v1/topics/orders/dead/replay".into(),
            Some(r#"{"ids": ["a"], "all": true}"#.into()),
            400,
            "invalid_input",
            "exactly one of",
        ),
        (
            "POST",
            "/api/v1/topics/orders/dead/purge".into(),
            Some(r#"{"oldest": 1}"#.into()),
            400,
            "invalid_input",
            "exactly one of",
        ),
        (
            "POST",
            "/api/v1/topics/orders/dead/purge".into(),
            Some("[1]".into()),
            400,
            "invalid_input",
            "invalid type",
        ),
        (
            "GET",
            "/api/v1/nope".into(),
            None,
            404,
            "not_found",
            "no such API route",
        ),
        (
            "GET",
            "/api/v2/topics".into(),
            None,
            404,
            "not_found",
            "no such API route",
        ),
        (
            "PUT",
            "/api/v1/topics/orders/jobs/order:1".into(),
            None,
            405,
            "method_not_allowed",
            "method",
        ),
    ];
    for (method, path, body, status, code, part) in &cases {
        let (got, v) = api.authed(method, path, body.as_deref()).await;
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            (got, v["error"]["code"].as_str().unwrap_or_default()),
            (*status, *code),
            "{method} {path} {:?}: {v}",
            body.as_deref().map(|b| &b[..b.len().min(80)])
        );
        assert!(
            msg.contains(part),
            "{method} {path}: {msg:?} lacks {part:?}"
        );
    }

    // A body over 16 MiB is refused before it is read.
    let huge = format!(r#"[{{"payload": "{}"}}]"#, "x".repeat(17 << 20));
    let (status, v) = api.authed("POST", jobs, Some(&huge)).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (413, &json!("body_too_large"))
    );

    assert_eq!(digest(&redis), before, "bad input changed Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_replayed_and_purged() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    for i in 1..=4 {
        make_dead(&q, "orders", &format!("d:{i}"), &format!("HTTP 50{i}")).await;
    }
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;

    let (status, v) = api
        .authed("GET", "/api/v1/topics/orders/dead?limit=3", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(v["total"], 4);
    let page = v["jobs"].as_array().unwrap();
    assert_eq!(page.len(), 3);
    assert_eq!(page[0]["id"], "d:4", "most recent death first");
    assert_eq!(page[0]["last_error"], "HTTP 504");
    assert_eq!(page[0]["payload"], "payload of d:4");
    assert_eq!(page[0]["state"], "dead");
    let (_, v) = api
        .authed("GET", "/api/v1/topics/orders/dead?offset=3&limit=3", None)
        .await;
    assert_eq!(v["jobs"][0]["id"], "d:1");
    let (_, v) = api
        .authed("GET", "/api/v1/topics/orders/jobs?state=dead", None)
        .await;
    assert_eq!(v["jobs"].as_array().unwrap().len(), 4);

    // Replay by id, then the oldest one.
    let (status, v) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/dead/replay",
            Some(r#"{"ids": ["d:3", "not-dead"]}"#),
        )
        .await;
    assert_eq!((status, &v), (200, &json!({"replayed": 1, "ids": ["d:3"]})));
    let job = q.get("orders", "d:3").await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (State::Ready, 0));
    let (_, v) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/dead/replay",
            Some(r#"{"oldest": 1}"#),
        )
        .await;
    assert_eq!(v["ids"], json!(["d:1"]));

    // Purge one, then all.
    let (_, v) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/dead/purge",
            Some(r#"{"ids": ["d:2"]}"#),
        )
        .await;
    assert_eq!(v["purged"], 1);
    assert!(q.get("orders", "d:2").await.unwrap().is_none());
    let (_, v) = api
        .authed(
            "POST",
            "/api/v1/topics/orders/dead/purge",
            Some(r#"{"all": true}"#),
        )
        .await;
    assert_eq!(v["purged"], 1);
    let s = q.stats("orders").await.unwrap();
    assert_eq!((s.dead, s.ready), (0, 2));
    assert!(q.check("orders").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_series_turns_counters_into_rates() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    q.enqueue("orders", Job::new("first")).await.unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &["--sample-interval", "200ms"]).await;
    // Wait for a first reading, then enqueue, then wait for the rate.
    eventually(Duration::from_secs(10), "a first sample", || async {
        let (_, v) = api
            .authed("GET", "/api/v1/topics/orders/series", None)
            .await;
        !v["points"].as_array().unwrap().is_empty()
    })
    .await;
    let batch: Vec<Job> = (0..50).map(|i| Job::new(format!("{i}"))).collect();
    q.enqueue_batch("orders", batch).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "a point with enqueued_per_s > 0",
        || async {
            let (_, v) = api
                .authed("GET", "/api/v1/topics/orders/series", None)
                .await;
            v["points"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["enqueued_per_s"].as_f64().unwrap() > 0.0 && p["ready"] == 51)
        },
    )
    .await;
    let (_, v) = api
        .authed("GET", "/api/v1/topics/orders/series", None)
        .await;
    assert_eq!(v["interval_ms"], 200);
    assert_eq!(
        v["lateness_measured"], false,
        "standalone api has no lateness source"
    );
    // The rates, times each interval's real length, add up to the 50 jobs
    // enqueued (in one atomic call, so in one interval, which is not the
    // first: two readings existed before).
    let points = v["points"].as_array().unwrap();
    let total: f64 = points
        .windows(2)
        .map(|w| {
            let secs =
                (w[1]["t_ms"].as_i64().unwrap() - w[0]["t_ms"].as_i64().unwrap()) as f64 / 1000.0;
            w[1]["enqueued_per_s"].as_f64().unwrap() * secs
        })
        .sum();
    assert!(
        (49.9..=50.1).contains(&total),
        "{total} jobs from the rates"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_http_serves_the_api_and_consumes_what_it_enqueues() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records");
    let handler = Server::script(
        dir.path(),
        "handler.sh",
        &format!("cat > /dev/null\necho \"$PUNCTUAL_TOPIC $PUNCTUAL_JOB_ID\" >> {records:?}"),
    );
    let topics = format!(
        "[topics.orders]\nexec = [{h:?}]\n[topics.other]\nexec = [{h:?}]\n",
        h = handler.display().to_string()
    );
    // The token from the config file (no PUNCTUAL_API_TOKEN).
    let mut svc = Server::serve(
        &redis.url(),
        None,
        &format!("workers = 1\nconcurrency = 2\napi_token = {TOKEN:?}"),
        &topics,
    )
    .await;
    let ran = |topic: &str, id: &str| {
        let line = format!("{topic} {id}");
        std::fs::read_to_string(&records)
            .unwrap_or_default()
            .lines()
            .any(|l| l == line)
    };

    // /healthz and /metrics are still there, next to the API and dashboard.
    eventually(Duration::from_secs(20), "healthz ok", || async {
        let r = reqwest::get(svc.url("/healthz")).await.unwrap();
        r.status() == 200
    })
    .await;
    let metrics = reqwest::get(svc.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("punctual_child_up"), "{metrics}");
    let page = reqwest::get(svc.url("/")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    let (_, info) = svc.call("GET", "/api/v1/info", None, None).await;
    assert_eq!(
        (info["mode"].as_str(), info["changes_allowed"].as_bool()),
        (Some("serve"), Some(true))
    );
    let (_, series) = svc
        .call("GET", "/api/v1/topics/orders/series", None, None)
        .await;
    assert_eq!(series["lateness_measured"], true);
    // Exec topics only: no resident programs, here or in /healthz.
    let (status, resident) = svc.call("GET", "/api/v1/resident", None, None).await;
    assert_eq!((status, resident), (200, json!({})));
    let health: Value = serde_json::from_str(
        &reqwest::get(svc.url("/healthz"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(health["resident"], json!({}), "{health}");

    // Enqueued over HTTP, consumed by the workers.
    let (status, _) = svc
        .authed(
            "POST",
            "/api/v1/topics/orders/jobs",
            Some(r#"{"payload": {"order": 1}, "id": "order:1", "delay_ms": 300}"#),
        )
        .await;
    assert_eq!(status, 201);
    eventually(Duration::from_secs(20), "order:1 handled", || async {
        ran("orders", "order:1")
    })
    .await;

    // Paused: workers stop claiming from the topic, not from others.
    let (status, v) = svc
        .authed("POST", "/api/v1/topics/orders/pause", None)
        .await;
    assert_eq!((status, &v["paused"]), (200, &json!(true)));
    let (_, v) = svc.call("GET", "/api/v1/topics/orders", None, None).await;
    assert_eq!(v["paused"], true);
    svc.authed(
        "POST",
        "/api/v1/topics/orders/jobs",
        Some(r#"{"payload": 2, "id": "order:2"}"#),
    )
    .await;
    svc.authed(
        "POST",
        "/api/v1/topics/other/jobs",
        Some(r#"{"payload": 3, "id": "other:1"}"#),
    )
    .await;
    eventually(Duration::from_secs(20), "other:1 handled", || async {
        ran("other", "other:1")
    })
    .await;
    // The worker went round both topics since order:2 was enqueued; give
    // it a few more rounds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!ran("orders", "order:2"), "a paused topic's job ran");
    let (_, v) = svc
        .call("GET", "/api/v1/topics/orders/jobs/order:2", None, None)
        .await;
    assert_eq!(v["state"], "ready");

    // Resumed: it runs.
    let (status, v) = svc
        .authed("POST", "/api/v1/topics/orders/resume", None)
        .await;
    assert_eq!((status, &v["paused"]), (200, &json!(false)));
    eventually(
        Duration::from_secs(20),
        "order:2 handled after resume",
        || async { ran("orders", "order:2") },
    )
    .await;
    svc.stop();
}

#[test]
fn short_or_malformed_tokens_are_refused_at_start() {
    let redis = RedisServer::start();
    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "api", "--listen", "127.0.0.1:1"])
        .env("PUNCTUAL_API_TOKEN", "short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PUNCTUAL_API_TOKEN") && err.contains("at least 16"),
        "{err}"
    );

    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "api", "--listen", "nowhere"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an address"));

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(
        &config,
        "api_token = \"has spaces in it, more than 16\"\n[topics.a]\nexec = [\"true\"]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "serve", "--config"])
        .arg(&config)
        .env_remove("PUNCTUAL_API_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("api_token") && err.contains("visible ASCII"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_name_in_the_topic_set_is_listed_as_skipped_not_a_500() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    seed(&q).await;
    let mut con = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: i64 = redis::cmd("SADD")
        .arg("punctual:topics")
        .arg(&b"bad\xff"[..])
        .arg("a{b}")
        .query_async(&mut con)
        .await
        .unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let (status, v) = api.call("GET", "/api/v1/topics", None, None).await;
    assert_eq!(status, 200, "{v}");
    let topics = v["topics"].as_array().unwrap();
    assert_eq!(topics.len(), 1, "{v}");
    assert_eq!(topics[0]["topic"], "orders");
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{v}");
    assert_eq!(skipped[0]["name"], "a{b}");
    assert!(
        skipped[0]["reason"].as_str().unwrap().contains("braces"),
        "{v}"
    );
    assert_eq!(skipped[1]["name"], "bad\\xff");
    assert_eq!(skipped[1]["reason"], "not valid UTF-8");
}

/// Redis's clock (epoch ms) on `redis`.
fn redis_now_ms(redis: &RedisServer) -> i64 {
    let t = redis.cli(&["TIME"]).unwrap();
    let mut it = t.split_whitespace().map(|v| v.parse::<i64>().unwrap());
    it.next().unwrap() * 1000 + it.next().unwrap() / 1000
}

/// Waits, if needed, until Redis's clock has `need` seconds left in its
/// minute; returns the minute.
async fn fresh_minute(redis: &RedisServer, need: i64) -> i64 {
    let left = 60_000 - redis_now_ms(redis) % 60_000;
    if left < need * 1000 {
        tokio::time::sleep(Duration::from_millis(left as u64 + 50)).await;
    }
    redis_now_ms(redis) / 60_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_route_returns_per_minute_figures_with_gaps() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    let m = fresh_minute(&redis, 15).await;
    q.snapshot_history("orders").await.unwrap();
    q.enqueue_batch("orders", vec![Job::new("a"), Job::new("b")])
        .await
        .unwrap();
    let api = Server::api(&redis.url(), None, &[]).await;

    let (status, v) = api
        .call("GET", "/api/v1/topics/orders/history?minutes=3", None, None)
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["topic"], "orders");
    assert_eq!(
        v["bucket_bounds_ms"],
        json!([1, 10, 100, 1000, 10000, 60000])
    );
    let minutes = v["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 3, "{v}");
    assert_eq!(minutes[2]["minute"], m);
    assert_eq!(minutes[2]["partial"], true);
    assert_eq!(minutes[2]["counters"]["enqueued"], 2, "{v}");
    assert!(
        minutes[0]["counters"].is_null(),
        "a gap is null, not zeros: {v}"
    );
    assert_eq!(minutes[0]["lateness"]["count"], 0);

    let (_, v) = api
        .call("GET", "/api/v1/topics/orders/history", None, None)
        .await;
    assert_eq!(
        v["minutes"].as_array().unwrap().len(),
        60,
        "default: an hour"
    );
    for bad in ["minutes=0", "minutes=10081", "minutes=x", "hours=2"] {
        let (status, v) = api
            .call(
                "GET",
                &format!("/api/v1/topics/orders/history?{bad}"),
                None,
                None,
            )
            .await;
        assert_eq!(status, 400, "{bad}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_survives_a_restart_of_serve() {
    let redis = redis();
    let dir = tempfile::tempdir().unwrap();
    let handler = Server::script(dir.path(), "handler.sh", "cat > /dev/null");
    let topics = format!(
        "[topics.orders]\nexec = [{:?}]\n",
        handler.display().to_string()
    );
    let settings = "workers = 1\nconcurrency = 2";
    fresh_minute(&redis, 30).await;
    let mut svc = Server::serve(&redis.url(), None, settings, &topics).await;
    let history = |svc: &Server| {
        let url = svc.url("/api/v1/topics/orders/history?minutes=5");
        async move {
            let text = reqwest::get(url).await.unwrap().text().await.unwrap();
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            v
        }
    };
    // Totals over the minutes that have figures.
    let totals = |v: &Value| {
        let mut done = 0;
        let mut started = 0;
        for m in v["minutes"].as_array().unwrap() {
            done += m["counters"]["done"].as_u64().unwrap_or(0);
            started += m["lateness"]["count"].as_u64().unwrap();
        }
        (done, started)
    };
    eventually(
        Duration::from_secs(20),
        "serve's scheduler took a snapshot",
        || async {
            let v = history(&svc).await;
            v["minutes"][4]["counters"].is_object()
        },
    )
    .await;
    let q = Queue::connect(redis.url()).await.unwrap();
    let jobs: Vec<Job> = (0..5).map(|i| Job::new(format!("{i}"))).collect();
    q.enqueue_batch("orders", jobs).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "5 done and 5 starts measured",
        || async { totals(&history(&svc).await) == (5, 5) },
    )
    .await;
    let before = history(&svc).await;
    svc.stop();

    let svc = Server::serve(&redis.url(), None, settings, &topics).await;
    // (Should the minute have turned while serve was down, the new
    // scheduler's first snapshot ends that minute.)
    eventually(
        Duration::from_secs(20),
        "the same totals after the restart",
        || async { totals(&history(&svc).await) == (5, 5) },
    )
    .await;
    let after = history(&svc).await;
    assert_eq!(totals(&after), (5, 5), "after the restart: {after}");
    // The minutes before the restart are the same figures.
    let figures = |v: &Value| {
        v["minutes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["partial"] == false)
            .map(|m| {
                (
                    m["minute"].clone(),
                    m["counters"].clone(),
                    m["lateness"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    for f in figures(&after) {
        if let Some(b) = figures(&before).into_iter().find(|b| b.0 == f.0) {
            assert_eq!(b, f, "a complete minute changed across the restart");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_with_expiry_timeout_and_group() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let jobs = "/api/v1/topics/orders/jobs";
    // Per-job options: expiry, timeout, group, shown by get.
    let opts = r#"{"payload": "o", "id": "opts", "delay_ms": 60000, "expire_ms": 5000, "timeout_ms": 250, "group": "acme"}"#;
    let (status, _) = api.authed("POST", jobs, Some(opts)).await;
    assert_eq!(status, 201);
    let (_, v) = api
        .authed("GET", "/api/v1/topics/orders/jobs/opts", None)
        .await;
    let opt_due = v["due_ms"].as_i64().unwrap();
    assert_eq!(v["deadline_ms"].as_i64(), Some(opt_due + 5000));
    assert_eq!(
        (&v["timeout_ms"], &v["group"]),
        (&json!(250), &json!("acme"))
    );
    let lib = q.get("orders", "opts").await.unwrap().unwrap();
    assert_eq!(lib.group.as_deref(), Some("acme"));
    let (status, v) = api
        .authed("POST", jobs, Some(r#"{"payload": "o", "group": "a b"}"#))
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("group"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_traceparent_header_goes_with_the_jobs_it_enqueues() {
    let redis = redis();
    let q = Queue::connect(redis.url()).await.unwrap();
    let api = Server::api(&redis.url(), Some(TOKEN), &[]).await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let post = |body: &'static str, headers: Vec<(&'static str, &'static str)>| {
        let url = api.url("/api/v1/topics/orders/jobs");
        async move {
            let mut req = reqwest::Client::new()
                .post(url)
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            (status, serde_json::from_str::<Value>(&text).unwrap())
        }
    };
    // The header's context, for a job without one of its own.
    let (status, _) = post(
        r#"[{"payload": 1, "id": "a"}, {"payload": 2, "id": "b", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}]"#,
        vec![("traceparent", tp), ("tracestate", "rojo=1,congo=2")],
    )
    .await;
    assert_eq!(status, 200);
    let a = q.get("orders", "a").await.unwrap().unwrap();
    assert_eq!(
        (a.traceparent.as_deref(), a.tracestate.as_deref()),
        (Some(tp), Some("rojo=1,congo=2"))
    );
    let b = q.get("orders", "b").await.unwrap().unwrap();
    assert_eq!(
        (b.traceparent.as_deref(), b.tracestate),
        (Some(own), None),
        "a job's own traceparent wins, without the header's tracestate"
    );
    // GET shows it.
    let (status, v) = api
        .authed("GET", "/api/v1/topics/orders/jobs/a", None)
        .await;
    assert_eq!((status, v["traceparent"].as_str()), (200, Some(tp)));
    assert_eq!(v["tracestate"], "rojo=1,congo=2");

    // An invalid header is ignored (W3C Trace Context); an invalid field
    // is refused, saying why.
    let (status, _) = post(
        r#"{"payload": 3, "id": "c"}"#,
        vec![(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        )],
    )
    .await;
    assert_eq!(status, 201);
    let c = q.get("orders", "c").await.unwrap().unwrap();
    assert_eq!(c.traceparent, None);
    let before = digest(&redis);
    let (status, v) = post(
        r#"{"payload": 4, "id": "d", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}"#,
        vec![],
    )
    .await;
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
        + &v.to_string();
    assert!(msg.contains("span id is all zeros"), "{v}");
    assert_eq!(digest(&redis), before);
}
