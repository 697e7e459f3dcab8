//! Trace context end to end (W3C Trace Context): a producer's traceparent
//! reaches every attempt's handler (exec environment, http headers), and
//! `serve` with `[otel]` exports one span per attempt, the child of that
//! context, to an OTLP/HTTP receiver inside the test.

mod support;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use nix::sys::signal::Signal;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use punctual::{DeadSelector, Job, Queue, State};
use punctual_testkit::{eventually, RedisServer};
use support::{live, Service, BIN};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
/// A tracestate whose value holds ; : and %, which the record escapes.
const STATE: &str = "rojo=00f067aa0ba902b7,congo=a:b;c%d";

fn traceparent() -> String {
    format!("00-{TRACE}-{PARENT}-01")
}

/// Appends "id attempt TRACEPARENT TRACESTATE" (- when unset) to records.
const RECORD: &str = r#"cat > /dev/null
echo "$PUNCTUAL_JOB_ID $PUNCTUAL_ATTEMPT ${TRACEPARENT:--} ${TRACESTATE:--}" >> "$(dirname "$0")/records""#;

/// An OTLP/HTTP receiver (protobuf) on a free port: the spans it got.
async fn receiver() -> (u16, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let got = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| async move {
            let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
            let mut got = got.lock().unwrap();
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    got.extend(ss.spans);
                }
            }
            (
                StatusCode::OK,
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, spans)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's attribute as text.
fn attr(s: &Span, key: &str) -> Option<String> {
    let v = s
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match v {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// A span's status code (Unset when it has no status).
fn code(s: &Span) -> SpanStatus {
    s.status.as_ref().map_or(SpanStatus::Unset, |st| {
        SpanStatus::try_from(st.code).unwrap()
    })
}

fn push(redis: &str, args: &[&str]) {
    let out = Command::new(BIN)
        .args(["--redis", redis, "push"])
        .args(args)
        .env_remove("TRACEPARENT")
        .env_remove("TRACESTATE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "push {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_a_span_per_attempt_as_a_child_of_the_producers_context() {
    let (otlp, spans) = receiver().await;
    let (hook, headers) = hook().await;
    let redis = RedisServer::start();
    let mut svc = Service::new();
    // Fails its first attempt, then succeeds: two spans for one job.
    let flaky = svc.script(
        "flaky.sh",
        &format!("{RECORD}\nif [ \"$PUNCTUAL_ATTEMPT\" = 1 ]; then exit 3; fi"),
    );
    svc.config(
        &redis.url(),
        &format!("workers = 1\n[otel]\nendpoint = \"http://127.0.0.1:{otlp}\"\nservice_name = \"trace-test\""),
        &format!(
            "[topics.t]\nexec = [{:?}]\nmax_attempts = 3\nbackoff = [\"0s\"]\n[topics.h]\nhttp = {{ url = \"http://127.0.0.1:{hook}/hook\" }}",
            flaky.display().to_string()
        ),
    );
    svc.start();
    let tp = traceparent();
    push(
        &redis.url(),
        &[
            "t",
            "x",
            "--id",
            "j1",
            "--traceparent",
            &tp,
            "--tracestate",
            STATE,
        ],
    );
    push(&redis.url(), &["t", "x", "--id", "plain"]);
    push(
        &redis.url(),
        &["h", "x", "--id", "hj", "--traceparent", &tp],
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    eventually(Duration::from_secs(30), "the jobs done", || async {
        live(&q, "t").await == 0 && live(&q, "h").await == 0
    })
    .await;
    // The worker sends what it holds when it stops.
    svc.signal(Signal::SIGTERM);
    svc.wait(Duration::from_secs(20));
    eventually(Duration::from_secs(20), "five spans", || async {
        spans.lock().unwrap().len() >= 5
    })
    .await;
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 5, "one span per attempt: {spans:#?}");

    // The http handler's parent is its attempt's span too.
    let h = spans
        .iter()
        .find(|s| attr(s, "punctual.job_id").as_deref() == Some("hj"))
        .expect("the http job's span");
    assert_eq!(attr(h, "punctual.topic").as_deref(), Some("h"));
    assert_eq!(hex(&h.parent_span_id), PARENT);
    let got = headers.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0]["traceparent"],
        format!("00-{TRACE}-{}-01", hex(&h.span_id)).as_str()
    );
    assert!(got[0].get("tracestate").is_none(), "none was given");

    let mut traced: Vec<&Span> = spans
        .iter()
        .filter(|s| attr(s, "punctual.job_id").as_deref() == Some("j1"))
        .collect();
    traced.sort_by_key(|s| attr(s, "punctual.attempt"));
    assert_eq!(traced.len(), 2, "a retry gives two spans");
    let records = svc.records();
    for (n, s) in traced.iter().enumerate() {
        let attempt = (n + 1).to_string();
        assert_eq!(hex(&s.trace_id), TRACE, "the producer's trace");
        assert_eq!(
            hex(&s.parent_span_id),
            PARENT,
            "the producer's span is the parent"
        );
        assert_eq!(attr(s, "punctual.topic").as_deref(), Some("t"));
        assert_eq!(
            attr(s, "punctual.attempt").as_deref(),
            Some(attempt.as_str())
        );
        let lateness: f64 = attr(s, "punctual.lateness_ms").unwrap().parse().unwrap();
        assert!(lateness >= 0.0, "lateness {lateness}");
        assert_eq!(s.trace_state, STATE, "the tracestate goes on");
        // The handler's parent is this attempt's span.
        let rec = records
            .iter()
            .find(|r| r[0] == "j1" && r[1] == attempt)
            .unwrap_or_else(|| panic!("attempt {attempt} recorded: {records:?}"));
        assert_eq!(
            rec[2],
            format!("00-{TRACE}-{}-01", hex(&s.span_id)),
            "TRACEPARENT"
        );
        assert_eq!(rec[3], STATE, "TRACESTATE");
    }
    assert_eq!(
        attr(traced[0], "punctual.outcome").as_deref(),
        Some("retry")
    );
    assert_eq!(attr(traced[1], "punctual.outcome").as_deref(), Some("done"));
    // A failed attempt is an error span; the one that succeeded is Ok.
    assert_eq!(code(traced[0]), SpanStatus::Error);
    assert_eq!(code(traced[1]), SpanStatus::Ok);
    assert_ne!(traced[0].span_id, traced[1].span_id);

    // A job pushed without a context: its attempts are roots, and its
    // handler gets none.
    let plain: Vec<&Span> = spans
        .iter()
        .filter(|s| attr(s, "punctual.job_id").as_deref() == Some("plain"))
        .collect();
    assert_eq!(plain.len(), 2);
    assert!(plain
        .iter()
        .all(|s| s.parent_span_id.is_empty() && hex(&s.trace_id) != TRACE));
    let rec: Vec<_> = records.iter().filter(|r| r[0] == "plain").collect();
    assert!(rec.iter().all(|r| r[2] == "-" && r[3] == "-"), "{rec:?}");
}

/// An http hook on a free port that records the headers of each POST to
/// /hook and answers 200.
async fn hook() -> (u16, Arc<Mutex<Vec<HeaderMap>>>) {
    let headers: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let got = headers.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |h: HeaderMap| async move {
            got.lock().unwrap().push(h);
            StatusCode::OK
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, headers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_get_the_producers_context_through_dead_and_replay() {
    let (port, headers) = hook().await;

    let redis = RedisServer::start();
    let mut svc = Service::new();
    // Permanent failure until the file `fixed` exists.
    let fixable = svc.script(
        "fixable.sh",
        &format!("{RECORD}\nif [ ! -f \"$(dirname \"$0\")/fixed\" ]; then exit 65; fi"),
    );
    svc.config(
        &redis.url(),
        "workers = 1",
        &format!(
            "[topics.e]\nexec = [{:?}]\n[topics.h]\nhttp = {{ url = \"http://127.0.0.1:{port}/hook\" }}",
            fixable.display().to_string()
        ),
    );
    svc.start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let tp = traceparent();
    for t in ["e", "h"] {
        q.enqueue(t, Job::new("x").id("j").traceparent(&tp).tracestate(STATE))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(30), "e dead, h done", || async {
        q.stats("e").await.unwrap().dead == 1 && live(&q, "h").await == 0
    })
    .await;
    let h = headers.lock().unwrap().clone();
    assert_eq!(h.len(), 1);
    assert_eq!(
        h[0]["traceparent"],
        tp.as_str(),
        "without [otel] the producer's own"
    );
    assert_eq!(h[0]["tracestate"], STATE);

    let dead = q.get("e", "j").await.unwrap().unwrap();
    assert_eq!(dead.state, State::Dead);
    assert_eq!(dead.traceparent.as_deref(), Some(tp.as_str()));
    std::fs::write(svc.path("fixed"), "").unwrap();
    q.dead_replay("e", DeadSelector::Ids(vec!["j".into()]))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the replay done", || async {
        live(&q, "e").await == 0 && q.stats("e").await.unwrap().dead == 0
    })
    .await;
    let records = svc.records();
    assert_eq!(records.len(), 2, "{records:?}");
    for r in &records {
        assert_eq!(
            (r[2].as_str(), r[3].as_str()),
            (tp.as_str(), STATE),
            "{records:?}"
        );
    }
    svc.signal(Signal::SIGTERM);
    svc.wait(Duration::from_secs(20));
}

#[test]
fn push_refuses_a_malformed_traceparent_saying_why() {
    let redis = RedisServer::start();
    for (args, says) in [
        (
            vec![
                "--traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            ],
            "invalid traceparent",
        ),
        (
            vec![
                "--traceparent",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            ],
            "trace id is all zeros",
        ),
        (vec!["--tracestate", "k=v"], "--traceparent"),
    ] {
        let out = Command::new(BIN)
            .args(["--redis", &redis.url(), "push", "t", "x"])
            .args(&args)
            .env_remove("TRACEPARENT")
            .env_remove("TRACESTATE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }
    // TRACEPARENT in the environment (an exec handler's) is taken.
    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "push", "t", "x", "--id", "child"])
        .env("TRACEPARENT", traceparent())
        .env_remove("TRACESTATE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "get", "t", "child", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(
        v["traceparent"],
        traceparent().as_str(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // push --batch: a line's own context, and a bad one refused by line.
    let batch = |input: String| {
        let mut child = Command::new(BIN)
            .args(["--redis", &redis.url(), "push", "t", "--batch"])
            .env_remove("TRACEPARENT")
            .env_remove("TRACESTATE")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = batch(format!(
        "{{\"payload\": 1, \"id\": \"b1\", \"traceparent\": \"{}\", \"tracestate\": \"k=v\"}}\n{{\"payload\": 2, \"id\": \"b2\"}}\n",
        traceparent()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let get = |id: &str| {
        let out = Command::new(BIN)
            .args(["--redis", &redis.url(), "get", "t", id, "--json"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let b1 = get("b1");
    assert_eq!(
        (b1["traceparent"].as_str(), b1["tracestate"].as_str()),
        (Some(traceparent().as_str()), Some("k=v"))
    );
    assert_eq!(get("b2").get("traceparent"), None);
    let out = batch("{\"payload\": 1, \"traceparent\": \"00-1-2-01\"}\n".into());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("line 1") && err.contains("invalid traceparent"),
        "{err}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn with_the_opentelemetry_feature_a_job_takes_the_current_spans_context() {
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let span = tracing::info_span!("checkout");
    let expected = {
        let cx = span.context();
        let s = cx.span();
        let sc = s.span_context();
        format!("00-{}-{}-01", sc.trace_id(), sc.span_id())
    };
    q.enqueue("t", Job::new("x").id("inside"))
        .instrument(span.clone())
        .await
        .unwrap();
    q.enqueue("t", Job::new("x").id("given").traceparent(traceparent()))
        .instrument(span)
        .await
        .unwrap();
    q.enqueue("t", Job::new("x").id("outside")).await.unwrap();
    let tp = |id: &'static str| {
        let q = q.clone();
        async move { q.get("t", id).await.unwrap().unwrap().traceparent }
    };
    assert_eq!(tp("inside").await, Some(expected));
    assert_eq!(tp("given").await, Some(traceparent()), "a given one wins");
    assert_eq!(tp("outside").await, None, "no span, no context");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_cancelled_while_it_runs_ends_its_span_as_cancelled() {
    let (otlp, spans) = receiver().await;
    let redis = RedisServer::start();
    let mut svc = Service::new();
    let handler = svc.script(
        "wait.sh",
        "cat > /dev/null\ntrap 'exit 0' TERM\nsleep 60 &\necho started >> \"$(dirname \"$0\")/records\"\nwait",
    );
    svc.config(
        &redis.url(),
        &format!("workers = 1\nlease = \"60s\"\n[otel]\nendpoint = \"http://127.0.0.1:{otlp}\""),
        &format!(
            "[topics.t]\nexec = [{:?}]\ntimeout = \"120s\"",
            handler.display().to_string()
        ),
    );
    svc.start();
    let tp = traceparent();
    push(
        &redis.url(),
        &["t", "x", "--id", "c1", "--traceparent", &tp],
    );
    eventually(Duration::from_secs(30), "the handler started", || async {
        !svc.records().is_empty()
    })
    .await;
    let out = Command::new(BIN)
        .args(["--redis", &redis.url(), "cancel", "t", "c1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let q = Queue::connect(redis.url()).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the span of the cancelled attempt",
        || async {
            // The worker sends its spans in batches: stop it to flush them.
            spans.lock().unwrap().len() == 1 || {
                let s = q.stats("t").await.unwrap();
                if s.running == 0 && svc.log().contains("job cancelled while it ran") {
                    let _ = nix::sys::signal::kill(svc.pid(), Signal::SIGTERM);
                }
                false
            }
        },
    )
    .await;
    let spans = spans.lock().unwrap().clone();
    assert_eq!(attr(&spans[0], "punctual.job_id").as_deref(), Some("c1"));
    assert_eq!(
        attr(&spans[0], "punctual.outcome").as_deref(),
        Some("cancelled")
    );
    // An operator's decision, not a failure: no error status.
    assert_eq!(code(&spans[0]), SpanStatus::Unset);
    assert_eq!(hex(&spans[0].parent_span_id), PARENT);
}
