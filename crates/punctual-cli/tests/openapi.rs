//! The API's JSON against docs/openapi.yaml: every route is called on a
//! real `punctual serve --http` (a private redis-server, a live worker and
//! scheduler, so processes, stats and history are not empty), and each
//! reply is validated against the schema the document gives for its path,
//! method and status.
//!
//! The schemas are read strictly: an object schema that lists its
//! `properties` admits no others (as if it said `additionalProperties:
//! false`), so a field renamed or added in the API without the document
//! fails here. OpenAPI 3.0's `nullable: true` is read as JSON Schema's
//! `type: [T, "null"]`.

mod support;

use std::time::Duration;

use punctual::raw::{self, FailKind, Partition};
use punctual::{Job, Queue};
use punctual_testkit::{eventually, RedisServer};
use serde_json::{json, Map, Value};
use support::{Server, TOKEN};

/// docs/openapi.yaml as JSON, with the schemas made strict (see the top).
fn document() -> Value {
    let text = include_str!("../../../docs/openapi.yaml");
    let mut doc: Value = serde_yaml_ng::from_str(text).expect("docs/openapi.yaml is YAML");
    strict(&mut doc);
    doc
}

/// Rewrites OpenAPI 3.0 schema forms into JSON Schema, strictly.
fn strict(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.remove("nullable") == Some(Value::Bool(true)) {
                if let Some(Value::String(t)) = o.get("type").cloned() {
                    o.insert("type".into(), json!([t, "null"]));
                }
            }
            let is_schema_object = o.get("type") == Some(&json!("object"))
                || o.get("type") == Some(&json!(["object", "null"]));
            if is_schema_object
                && o.get("properties").is_some_and(Value::is_object)
                && !o.contains_key("additionalProperties")
            {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            o.values_mut().for_each(strict);
        }
        Value::Array(a) => a.iter_mut().for_each(strict),
        _ => {}
    }
}

/// Follows a `$ref` within the document (`#/components/...`).
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("a local $ref");
            doc.pointer(pointer)
                .unwrap_or_else(|| panic!("docs/openapi.yaml: {r} not found"))
        }
        None => v,
    }
}

/// Checks `body` against the schema of `route` (as written in the
/// document, e.g. `/api/v1/topics/{topic}`), `method` and `status`; returns
/// the problems found.
fn problems(doc: &Value, route: &str, method: &str, status: u16, body: &Value) -> Vec<String> {
    let Some(op) = doc["paths"].get(route).and_then(|p| p.get(method)) else {
        return vec![format!("the document has no {method} {route}")];
    };
    let Some(response) = op["responses"].get(status.to_string()) else {
        return vec![format!(
            "the document gives no {status} response for {method} {route}"
        )];
    };
    let response = resolve(doc, response);
    let Some(schema) = response.pointer("/content/application~1json/schema") else {
        return vec![format!(
            "the document gives no JSON schema for {status} of {method} {route}"
        )];
    };
    // The schema with the components beside it, so its `$ref`s resolve.
    let mut root = Map::new();
    root.insert("allOf".into(), json!([schema]));
    root.insert("components".into(), doc["components"].clone());
    let validator = jsonschema::validator_for(&Value::Object(root))
        .unwrap_or_else(|e| panic!("the schema of {method} {route} {status}: {e}"));
    validator
        .iter_errors(body)
        .map(|e| format!("{method} {route} {status}: at {}: {e}", e.instance_path()))
        .collect()
}

/// One call: the real path, the route as the document names it, method,
/// body, and the status expected.
struct Call {
    method: &'static str,
    path: String,
    route: &'static str,
    body: Option<String>,
    status: u16,
}

fn call(method: &'static str, path: &str, route: &'static str, status: u16) -> Call {
    Call {
        method,
        path: path.into(),
        route,
        body: None,
        status,
    }
}

fn with_body(
    method: &'static str,
    path: &str,
    route: &'static str,
    body: Value,
    status: u16,
) -> Call {
    Call {
        body: Some(body.to_string()),
        ..call(method, path, route, status)
    }
}

/// Enqueues `id` due now with one attempt, claims it and fails it: dead.
async fn make_dead(q: &Queue, topic: &str, id: &str) {
    q.enqueue(topic, Job::new("doomed").id(id).max_attempts(1))
        .await
        .unwrap();
    let part: Partition = topic.parse().unwrap();
    let claimed = raw::claim(q, &part, 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "claimed {id}");
    let d = &claimed[0];
    raw::fail(q, &part, &d.lease(), "boom", FailKind::Permanent)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reply_matches_the_openapi_document() {
    let doc = document();
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url()).await.unwrap();
    // `dead` is not served (nothing claims there but this test).
    make_dead(&q, "dead", "d:1").await;
    make_dead(&q, "dead", "d:2").await;
    let dir = tempfile::tempdir().unwrap();
    let handler = Server::script(dir.path(), "handler.sh", "cat > /dev/null");
    // A schedule from the config, upserted by serve at start.
    let topics = format!(
        "[topics.orders]\nexec = [{:?}]\n[schedules.nightly]\ntopic = \"orders\"\ncron = \"0 3 * * *\"\ntz = \"Europe/Berlin\"\ncatch_up = \"latest\"\n",
        handler.display().to_string()
    );
    let settings = format!("workers = 1\nconcurrency = 2\napi_token = {TOKEN:?}");
    let svc = Server::serve(&redis.url(), None, &settings, &topics).await;
    // Work done, so that stats, counters, history and lateness are not empty.
    for i in 0..3 {
        q.enqueue("orders", Job::new("x").id(format!("o:{i}")))
            .await
            .unwrap();
    }
    q.enqueue(
        "orders",
        Job::new("later")
            .id("later:1")
            .delay(Duration::from_secs(600)),
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(20),
        "the jobs done and a worker listed",
        || async {
            let s = q.stats("orders").await.unwrap();
            s.counters.get("done").copied().unwrap_or(0) >= 3
                && !q.processes().await.unwrap().is_empty()
        },
    )
    .await;

    let t = "/api/v1/topics/{topic}";
    let calls = vec![
        call("get", "/api/v1/info", "/api/v1/info", 200),
        call("get", "/api/v1/auth", "/api/v1/auth", 200),
        call("get", "/api/v1/resident", "/api/v1/resident", 200),
        call("get", "/api/v1/processes", "/api/v1/processes", 200),
        call("get", "/api/v1/topics", "/api/v1/topics", 200),
        call("get", "/api/v1/topics/orders", t, 200),
        call(
            "get",
            "/api/v1/topics/orders/jobs",
            "/api/v1/topics/{topic}/jobs",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/jobs?id_prefix=later&limit=5",
            "/api/v1/topics/{topic}/jobs",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/jobs/later:1",
            "/api/v1/topics/{topic}/jobs/{id}",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/jobs/nothing",
            "/api/v1/topics/{topic}/jobs/{id}",
            404,
        ),
        call(
            "get",
            "/api/v1/topics/dead/dead",
            "/api/v1/topics/{topic}/dead",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/series",
            "/api/v1/topics/{topic}/series",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/history?minutes=5",
            "/api/v1/topics/{topic}/history",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/history?minutes=0",
            "/api/v1/topics/{topic}/history",
            400,
        ),
        with_body(
            "post",
            "/api/v1/topics/orders/jobs",
            "/api/v1/topics/{topic}/jobs",
            json!({"payload": {"n": 1}, "id": "new:1", "delay_ms": 600000}),
            201,
        ),
        with_body(
            "post",
            "/api/v1/topics/orders/jobs",
            "/api/v1/topics/{topic}/jobs",
            json!([{"payload": "a", "id": "new:1"}, {"payload": "b", "delay_ms": 600000}]),
            200,
        ),
        with_body(
            "post",
            "/api/v1/topics/orders/jobs/new:1/reschedule",
            "/api/v1/topics/{topic}/jobs/{id}/reschedule",
            json!({"delay_ms": 900000}),
            200,
        ),
        call(
            "delete",
            "/api/v1/topics/orders/jobs/new:1",
            "/api/v1/topics/{topic}/jobs/{id}",
            200,
        ),
        with_body(
            "post",
            "/api/v1/topics/orders/cancel",
            "/api/v1/topics/{topic}/cancel",
            json!({"id_prefix": "later", "dry_run": true}),
            200,
        ),
        call(
            "post",
            "/api/v1/topics/orders/pause",
            "/api/v1/topics/{topic}/pause",
            200,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/limits",
            "/api/v1/topics/{topic}/limits",
            json!({"rate": "200/s", "burst": 20, "max_running": 50}),
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/limits",
            "/api/v1/topics/{topic}/limits",
            200,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/group-limits",
            "/api/v1/topics/{topic}/group-limits",
            json!({"rate": "10/s", "max_running": 2}),
            200,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/group-limits/shop-1",
            "/api/v1/topics/{topic}/group-limits/{group}",
            json!({"max_running": 5}),
            200,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/group-limits/shop-1",
            "/api/v1/topics/{topic}/group-limits/{group}",
            json!({"burst": 5}),
            400,
        ),
        call(
            "get",
            "/api/v1/topics/orders/group-limits",
            "/api/v1/topics/{topic}/group-limits",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/groups",
            "/api/v1/topics/{topic}/groups",
            200,
        ),
        call(
            "delete",
            "/api/v1/topics/orders/group-limits/shop-1",
            "/api/v1/topics/{topic}/group-limits/{group}",
            200,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/group-limits",
            "/api/v1/topics/{topic}/group-limits",
            json!({}),
            200,
        ),
        call("get", "/api/v1/topics/orders", t, 200),
        with_body(
            "put",
            "/api/v1/topics/orders/limits",
            "/api/v1/topics/{topic}/limits",
            json!({"rate": "fast"}),
            400,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/limits",
            "/api/v1/topics/{topic}/limits",
            json!({}),
            200,
        ),
        call(
            "post",
            "/api/v1/topics/orders/resume",
            "/api/v1/topics/{topic}/resume",
            200,
        ),
        with_body(
            "post",
            "/api/v1/topics/dead/dead/replay",
            "/api/v1/topics/{topic}/dead/replay",
            json!({"ids": ["d:1"], "spread_ms": 600000}),
            200,
        ),
        with_body(
            "post",
            "/api/v1/topics/dead/dead/purge",
            "/api/v1/topics/{topic}/dead/purge",
            json!({"all": true}),
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/schedules",
            "/api/v1/topics/{topic}/schedules",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/schedules/nightly",
            "/api/v1/topics/{topic}/schedules/{name}",
            200,
        ),
        call(
            "get",
            "/api/v1/topics/orders/schedules/none",
            "/api/v1/topics/{topic}/schedules/{name}",
            404,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/schedules/sweep",
            "/api/v1/topics/{topic}/schedules/{name}",
            json!({"every_ms": 3600000, "payload": {"kind": "sweep"}, "catch_up": "spread", "spread_ms": 60000}),
            201,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/schedules/sweep",
            "/api/v1/topics/{topic}/schedules/{name}",
            json!({"cron": "*/5 * * * *", "options": "3"}),
            200,
        ),
        with_body(
            "put",
            "/api/v1/topics/orders/schedules/sweep",
            "/api/v1/topics/{topic}/schedules/{name}",
            json!({"cron": "*/5 * * * *", "every_ms": 1000}),
            400,
        ),
        call(
            "post",
            "/api/v1/topics/orders/schedules/sweep/pause",
            "/api/v1/topics/{topic}/schedules/{name}/pause",
            200,
        ),
        call(
            "post",
            "/api/v1/topics/orders/schedules/sweep/resume",
            "/api/v1/topics/{topic}/schedules/{name}/resume",
            200,
        ),
        call(
            "delete",
            "/api/v1/topics/orders/schedules/sweep",
            "/api/v1/topics/{topic}/schedules/{name}",
            200,
        ),
        call(
            "delete",
            "/api/v1/topics/orders/schedules/sweep",
            "/api/v1/topics/{topic}/schedules/{name}",
            404,
        ),
        call("get", "/api/v1/audit", "/api/v1/audit", 200),
        call("delete", "/api/v1/topics/nothing-here", t, 404),
        call("delete", "/api/v1/topics/orders", t, 409),
    ];
    let mut found = Vec::new();
    for c in &calls {
        let method = c.method.to_uppercase();
        let (status, body) = svc.authed(&method, &c.path, c.body.as_deref()).await;
        assert_eq!(status, c.status, "{method} {}: {body}", c.path);
        found.extend(problems(&doc, c.route, c.method, status, &body));
    }
    assert!(
        found.is_empty(),
        "replies that docs/openapi.yaml does not describe:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_field_the_document_does_not_name_is_refused() {
    let doc = document();
    let route = "/api/v1/topics/{topic}/jobs/{id}";
    let job = json!({
        "id": "a", "state": "pool", "attempts": 0, "max_attempts": 6,
        "due_ms": 1, "created_ms": 1, "state_since_ms": null,
        "last_error": null, "payload": "x", "now_ms": 1,
    });
    assert_eq!(
        problems(&doc, route, "get", 200, &job),
        Vec::<String>::new()
    );
    let mut renamed = job.clone();
    let v = renamed.as_object_mut().unwrap().remove("due_ms").unwrap();
    renamed["due_at_ms"] = v;
    assert_eq!(problems(&doc, route, "get", 200, &renamed).len(), 1);
    let mut wrong = job;
    wrong["state"] = json!("waiting");
    assert_eq!(problems(&doc, route, "get", 200, &wrong).len(), 1);
}
