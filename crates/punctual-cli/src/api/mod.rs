//! The HTTP API and the web dashboard: JSON routes under `/api/v1`
//! (documented in docs/openapi.yaml) and a page at `/` that uses them.
//! Served by `punctual api --listen ADDR`, and merged into what
//! `punctual serve --http ADDR` serves next to `/healthz` and `/metrics`.
//!
//! - `routes`: the JSON routes, each a thin layer over `punctual::Queue`.
//! - `auth`: the bearer token every mutating call must present.
//! - `error`: JSON errors with a stable code and a message.
//! - `sampler`: the last hour of each topic's numbers, for the charts.
//! - `dashboard`: the page and its assets, embedded in the binary.
//! - `cmd`: the `punctual api` command.

pub mod auth;
pub mod cmd;
mod dashboard;
mod error;
mod routes;
pub mod sampler;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use punctual::Queue;

pub use auth::Token;
pub use sampler::Sampler;

/// Largest request body: 16 MiB (a batch of jobs).
pub const MAX_BODY: usize = 16 << 20;

/// What every route shares.
#[derive(Debug)]
pub struct ApiState {
    queue: Queue,
    /// `None`: the API only reads (mutating calls get 403 `read_only`).
    token: Option<Token>,
    sampler: Arc<Sampler>,
    /// `serve` or `api`, shown by `/api/v1/info`.
    mode: &'static str,
}

impl ApiState {
    pub fn new(
        queue: Queue,
        token: Option<Token>,
        sampler: Arc<Sampler>,
        mode: &'static str,
    ) -> Arc<ApiState> {
        Arc::new(ApiState {
            queue,
            token,
            sampler,
            mode,
        })
    }
}

/// The API under `/api/v1` and the dashboard at `/`, with a JSON 404 for
/// every other path. Merge it with other routes that have no fallback.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .nest("/api/v1", routes::routes())
        .merge(dashboard::routes())
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Starts the sampler that feeds the charts; it stops when the returned
/// task is aborted.
pub fn start_sampler(sampler: Arc<Sampler>, queue: Queue) -> tokio::task::JoinHandle<()> {
    tokio::spawn(sampler.run(queue))
}

/// Logs where the API listens and what it allows.
pub fn log_start(addr: &std::net::SocketAddr, token: Option<&Token>) {
    let changes = if token.is_some() {
        "changes need the API token"
    } else {
        "read-only: set PUNCTUAL_API_TOKEN to allow changes"
    };
    tracing::info!(%addr, "dashboard at http://{addr}/, API at http://{addr}/api/v1 ({changes})");
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "the dashboard and read-only API routes are open to anyone who can reach {addr}; bind 127.0.0.1 or put an authenticating proxy with TLS in front"
        );
    }
}
