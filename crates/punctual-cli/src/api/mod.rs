//! The HTTP API and the web dashboard: JSON routes under `/api/v1`
//! (documented in docs/openapi.yaml) and a page at `/` that uses them.
//! Served by `punctual api --listen ADDR`, and merged into what
//! `punctual serve --http ADDR` serves next to `/healthz` and `/metrics`.
//!
//! - `routes`: the JSON routes, each a thin layer over `punctual::Queue`.
//! - `auth`: the bearer token every mutating call must present (and who
//!   made the call, for the audit trail).
//! - `audit`: `GET /api/v1/audit`, the audit trail.
//! - `reply`: the response bodies, the API's own types (what
//!   docs/openapi.yaml describes), built from the library's types.
//! - `error`: JSON errors with a stable code and a message.
//! - `sampler`: the last hour of each topic's numbers, for the charts.
//! - `dashboard`: the page and its assets, embedded in the binary.
//! - `server`: serving over HTTP/1.1 with time limits and a Host check.
//! - `cmd`: the `punctual api` command.

mod audit;
pub(crate) mod auth;
mod body;
pub(crate) mod cmd;
mod dashboard;
mod error;
mod reply;
mod routes;
pub(crate) mod sampler;
mod schedules;
pub(crate) mod server;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use punctual::Queue;

use crate::serve::metrics::ResidentBoard;

pub(crate) use auth::Token;
pub(crate) use sampler::Sampler;
pub(crate) use server::HttpOptions;

/// Largest request body: 16 MiB (a batch of jobs).
pub(crate) const MAX_BODY: usize = 16 << 20;

/// What every route shares.
#[derive(Debug)]
pub(crate) struct ApiState {
    queue: Queue,
    /// `None`: the API only reads (mutating calls get 403 `read_only`).
    token: Option<Token>,
    /// Reads need the token too (all but `/api/v1/info`).
    reads_need_token: bool,
    sampler: Arc<Sampler>,
    /// `serve` or `api`, shown by `/api/v1/info`.
    mode: &'static str,
    /// The resident programs of `serve`'s workers; `None` for `punctual api`.
    resident: Option<ResidentBoard>,
    /// When a topic's status is `overdue`.
    alerts: crate::health::Alerts,
}

impl ApiState {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        queue: Queue,
        token: Option<Token>,
        reads_need_token: bool,
        sampler: Arc<Sampler>,
        mode: &'static str,
        resident: Option<ResidentBoard>,
        alerts: crate::health::Alerts,
    ) -> Arc<ApiState> {
        Arc::new(ApiState {
            queue,
            token,
            reads_need_token,
            sampler,
            mode,
            resident,
            alerts,
        })
    }
}

/// The API under `/api/v1` and the dashboard at `/`, with a JSON 404 for
/// every other path. Merge it with other routes that have no fallback.
pub(crate) fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .nest(
            "/api/v1",
            routes::routes().route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                read_guard,
            )),
        )
        .merge(dashboard::routes())
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// With `reads_need_token`, every route but `/api/v1/info` needs the token.
async fn read_guard(State(s): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    if !s.reads_need_token || matches!(req.uri().path(), "/info" | "/api/v1/info") {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    if let Err(e) = auth::Authorized::from_request_parts(&mut parts, &s).await {
        return e.into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

/// Starts the sampler that feeds the charts; it stops when the returned
/// task is aborted.
pub(crate) fn start_sampler(sampler: Arc<Sampler>, queue: Queue) -> tokio::task::JoinHandle<()> {
    tokio::spawn(sampler.run(queue))
}

/// Logs where the API listens and what it allows.
pub(crate) fn log_start(
    addr: &std::net::SocketAddr,
    token: Option<&Token>,
    reads_need_token: bool,
) {
    let changes = if token.is_some() {
        "changes need the API token"
    } else {
        "read-only: set PUNCTUAL_API_TOKEN to allow changes"
    };
    tracing::info!(%addr, "dashboard at http://{addr}/, API at http://{addr}/api/v1 ({changes})");
    if !addr.ip().is_loopback() && !reads_need_token {
        tracing::warn!(
            %addr,
            "the dashboard and read-only API routes are open to anyone who can reach {addr}; bind 127.0.0.1, set require_token_for_reads (serve) or --require-token-for-reads (api), or put an authenticating proxy with TLS in front"
        );
    }
}
