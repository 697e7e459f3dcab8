//! What `serve --http ADDR` serves: `/healthz`, `/metrics`, and the HTTP
//! API and dashboard of `crate::api`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use punctual::Queue;
use serde::Serialize;

use super::config::Config;
use super::metrics::ResidentBoard;
use crate::api::{self, ApiState, Sampler, Token};

/// How often the dashboard's charts are sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// What /healthz reports per child.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChildStatus {
    pub role: &'static str,
    pub index: usize,
    pub pid: Option<u32>,
    pub alive: bool,
    pub restarts: u64,
    pub last_exit: Option<String>,
}

pub(crate) type Children = Arc<Mutex<Vec<ChildStatus>>>;

struct AppState {
    children: Children,
    resident: ResidentBoard,
    handle: PrometheusHandle,
    queue: Queue,
    topics: Vec<String>,
    alerts: crate::health::Alerts,
}

/// Binds the config's `http` address and serves in the background. The
/// API token was checked when the config was loaded.
pub(super) async fn serve(
    cfg: &Config,
    children: Children,
    resident: ResidentBoard,
    handle: PrometheusHandle,
    queue: Queue,
) -> Result<tokio::task::JoinHandle<()>> {
    let addr = cfg.http.as_deref().context("no http address")?;
    let topics: Vec<String> = cfg.topics.keys().cloned().collect();
    let reads_need_token = cfg.require_token_for_reads;
    let opts = crate::api::HttpOptions {
        header_timeout: cfg.http_header_timeout,
        body_timeout: cfg.http_body_timeout,
        allowed_hosts: cfg.api_allowed_hosts.clone(),
    };
    let token = cfg
        .api_token
        .as_deref()
        .map(Token::new)
        .transpose()
        .map_err(|e| anyhow::anyhow!("api_token: {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --http"))?;
    let local = listener.local_addr()?;
    // The charts: Redis counters for every topic, and the lateness that
    // this supervisor's workers report.
    let sampler = Arc::new(Sampler::new(SAMPLE_INTERVAL, Some(handle.clone())));
    let sampling = api::start_sampler(sampler.clone(), queue.clone());
    api::log_start(&local, token.as_ref(), reads_need_token);
    let api_state = ApiState::new(
        queue.clone(),
        token,
        reads_need_token,
        sampler,
        "serve",
        Some(resident.clone()),
        cfg.alerts(),
    );
    let state = Arc::new(AppState {
        children,
        resident,
        handle,
        queue,
        topics,
        alerts: cfg.alerts(),
    });
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(state)
        .merge(api::router(api_state));
    Ok(tokio::spawn(async move {
        // Runs until this task is aborted.
        api::server::serve(listener, app, &opts, std::future::pending()).await;
        sampling.abort();
    }))
}

/// 200 `ok`; 503 `degraded` when a child is not running or a topic of
/// the config crosses an alert (`reasons` says which and why). When Redis
/// cannot be read, `redis_error` says so and the status stays as the
/// children make it.
async fn healthz(State(s): State<Arc<AppState>>) -> Response {
    let children = s.children.lock().unwrap().clone();
    let mut reasons: Vec<String> = children
        .iter()
        .filter(|c| !c.alive)
        .map(|c| format!("{}-{} is not running", c.role, c.index))
        .collect();
    // A Redis outage alone does not make the service unhealthy (restarting
    // it would not help; its children retry): it is reported, not judged.
    let judged = tokio::time::timeout(
        Duration::from_secs(2),
        crate::health::topics(&s.queue, s.topics.clone(), &s.alerts),
    )
    .await;
    let redis_error = match judged {
        Ok(Ok(all)) => {
            reasons.extend(all.into_iter().flat_map(|(_, h)| h.reasons));
            None
        }
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("Redis did not answer within 2 s".to_string()),
    };
    let ok = reasons.is_empty();
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::json!({
        "status": if ok { "ok" } else { "degraded" },
        "reasons": reasons,
        "redis_error": redis_error,
        "children": children,
        "resident": s.resident.snapshot(),
    });
    (code, Json(body)).into_response()
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    // Queue depths and counters come from Redis: they cover every host.
    match s.queue.processes().await {
        Ok(procs) => crate::health::process_gauges(&procs, &s.topics),
        Err(e) => tracing::warn!(error = %e, "cannot read the process registry for /metrics"),
    }
    for t in &s.topics {
        match s.queue.stats(t).await {
            Ok(st) => {
                crate::health::gauges(&st);
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
                            | "expired"
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
