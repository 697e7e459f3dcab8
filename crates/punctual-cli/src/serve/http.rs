//! `/healthz` and `/metrics` of `serve --http ADDR`.

use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use punctual::Queue;

use super::supervisor::Children;

struct AppState {
    children: Children,
    handle: PrometheusHandle,
    queue: Queue,
    topics: Vec<String>,
}

/// Binds `addr` and serves in the background.
pub async fn serve(
    addr: &str,
    children: Children,
    handle: PrometheusHandle,
    queue: Queue,
    topics: Vec<String>,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --http"))?;
    tracing::info!(addr, "serving /healthz and /metrics");
    let state = Arc::new(AppState {
        children,
        handle,
        queue,
        topics,
    });
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(state);
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "health server stopped");
        }
    }))
}

async fn healthz(State(s): State<Arc<AppState>>) -> Response {
    let children = s.children.lock().unwrap().clone();
    let ok = children.iter().all(|c| c.alive);
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body =
        serde_json::json!({ "status": if ok { "ok" } else { "degraded" }, "children": children });
    (code, Json(body)).into_response()
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    // Queue depths and counters come from Redis: they cover every host.
    for t in &s.topics {
        match s.queue.stats(t).await {
            Ok(st) => {
                for (state, n) in [
                    ("pool", st.pool),
                    ("ready", st.ready),
                    ("running", st.running),
                    ("dead", st.dead),
                ] {
                    metrics::gauge!("punctual_queue_jobs", "topic" => t.clone(), "state" => state)
                        .set(n as f64);
                }
                for (name, v) in &st.counters {
                    if matches!(
                        name.as_str(),
                        "enqueued"
                            | "done"
                            | "retried"
                            | "dead"
                            | "reclaimed"
                            | "promoted"
                            | "claimed"
                            | "duplicates"
                            | "cancelled"
                            | "replayed"
                            | "orphans"
                    ) {
                        metrics::counter!(format!("punctual_jobs_{name}_total"), "topic" => t.clone()).absolute(*v);
                    }
                }
            }
            Err(e) => tracing::warn!(topic = %t, error = %e, "cannot read stats for /metrics"),
        }
    }
    for c in s.children.lock().unwrap().iter() {
        let labels = [("role", c.role.to_string()), ("index", c.index.to_string())];
        metrics::gauge!("punctual_child_up", &labels).set(if c.alive { 1.0 } else { 0.0 });
        metrics::counter!("punctual_child_restarts_total", &labels).absolute(c.restarts);
    }
    (
        [("content-type", "text/plain; version=0.0.4")],
        s.handle.render(),
    )
        .into_response()
}
