//! `punctual api`: the HTTP API and the dashboard, without consumers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use clap::Args;
use punctual::Queue;

use super::auth::{self, Token};
use super::{ApiState, Sampler};
use crate::context::Ctx;
use crate::exit;
use crate::health::Alerts;
use crate::input::parse_duration;

/// The examples of `api --help`.
pub(crate) const EXAMPLES: &str = "\
Examples:
  # read-only dashboard on this host
  punctual api
  # allow changes: every POST/DELETE must send the token
  export PUNCTUAL_API_TOKEN=$(openssl rand -hex 32)
  punctual api --listen 127.0.0.1:9464 &
  curl -H \"Authorization: Bearer $PUNCTUAL_API_TOKEN\" -H 'Content-Type: application/json' \\
       -d '{\"payload\": {\"order\": 10086}, \"delay_ms\": 1800000, \"id\": \"order:10086\"}' \\
       http://127.0.0.1:9464/api/v1/topics/orders/jobs";

/// Arguments of `punctual api`.
#[derive(Debug, Args)]
pub(crate) struct ApiArgs {
    /// Address to serve on. The default is reachable from this host only;
    /// to serve other hosts give e.g. 0.0.0.0:9464, set a token, and put a
    /// proxy with TLS in front (the dashboard and the read routes need no
    /// token).
    #[arg(
        long,
        value_name = "ADDR",
        env = "PUNCTUAL_API_LISTEN",
        hide_env_values = true,
        default_value = "127.0.0.1:9464"
    )]
    pub listen: String,

    /// Read the API token from this file (its first line) instead of the
    /// PUNCTUAL_API_TOKEN environment variable. Every call that changes
    /// something must send `Authorization: Bearer <token>`; without any
    /// token the API and the dashboard only read. At least 16 characters.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Refuse the reads too (jobs, payloads, errors, stats) without the
    /// token; only /healthz, /api/v1/info and the dashboard's page stay
    /// open. Needs a token.
    #[arg(long)]
    pub require_token_for_reads: bool,

    /// Also answer requests that name this host (repeat for several).
    /// IP addresses and localhost are always answered; any other Host
    /// header gets 421, which defeats DNS rebinding. `*`: answer any.
    #[arg(
        long,
        value_name = "NAME",
        env = "PUNCTUAL_API_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_host: Vec<String>,

    /// Time for a client to send a request's headers, from when it
    /// connects or got its previous answer (so idle connections close too).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// Time for a client to send a request's body.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub body_timeout: Duration,

    /// How often to read each topic's numbers for the dashboard's charts,
    /// which show the last hour (kept in memory only).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub sample_interval: Duration,

    /// /healthz answers 503 `degraded` when a topic's pool holds a job
    /// past due by more than this (no scheduler alive, or too slow).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub overdue_alert: Duration,

    /// /healthz answers 503 `degraded` when a topic's oldest ready job has
    /// waited longer than this (no worker alive, or too few).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub ready_alert: Duration,
}

/// The token from `--token-file`, else from the environment.
fn token(args: &ApiArgs) -> Result<Option<Token>> {
    match &args.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                exit::invalid(format!(
                    "--token-file {}: cannot read it: {e}",
                    path.display()
                ))
            })?;
            let line = text.lines().next().unwrap_or("").trim();
            Token::new(line)
                .map(Some)
                .map_err(|e| exit::invalid(format!("--token-file {}: {e}", path.display())))
        }
        None => auth::resolve(None).map_err(exit::invalid),
    }
}

/// Runs `punctual api` until SIGTERM or SIGINT.
pub(crate) async fn run(ctx: &Ctx, args: ApiArgs) -> Result<()> {
    let addr: SocketAddr = args.listen.parse().map_err(|e| {
        exit::invalid(format!(
            "--listen {:?}: not an address like 127.0.0.1:9464 ({e})",
            args.listen
        ))
    })?;
    if args.sample_interval < Duration::from_millis(100) {
        return Err(exit::invalid(
            "--sample-interval must be at least 100ms (the charts show one hour)",
        ));
    }
    if args.header_timeout < Duration::from_millis(100)
        || args.body_timeout < Duration::from_millis(100)
    {
        return Err(exit::invalid(
            "--header-timeout and --body-timeout must be at least 100ms",
        ));
    }
    let token = token(&args)?;
    if args.require_token_for_reads && token.is_none() {
        return Err(exit::invalid(
            "--require-token-for-reads needs a token: set PUNCTUAL_API_TOKEN or give --token-file",
        ));
    }
    let queue = ctx.queue().await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (is another process using it? choose another address with --listen)"))?;
    let sampler = Arc::new(Sampler::new(args.sample_interval, None));
    let sampling = super::start_sampler(sampler.clone(), queue.clone());
    super::log_start(&addr, token.as_ref(), args.require_token_for_reads);
    let alerts = Alerts {
        overdue: args.overdue_alert,
        ready: args.ready_alert,
    };
    let app = Router::new()
        .route("/healthz", get(healthz))
        .with_state((queue.clone(), alerts))
        .merge(super::router(ApiState::new(
            queue,
            token,
            args.require_token_for_reads,
            sampler,
            "api",
            None,
            alerts,
        )));
    let opts = super::HttpOptions {
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
        allowed_hosts: args.allowed_host.clone(),
    };
    super::server::serve(listener, app, &opts, shutdown()).await;
    sampling.abort();
    tracing::info!("punctual api stopped");
    Ok(())
}

/// 200 when Redis answers and no topic crosses an alert; 503 `degraded`
/// with the `reasons` when one does; 503 when Redis does not answer.
async fn healthz(State((queue, alerts)): State<(Queue, Alerts)>) -> impl IntoResponse {
    let all = match queue.topics().await {
        Ok(t) => crate::health::topics(&queue, t, &alerts).await,
        Err(e) => Err(e),
    };
    match all {
        Ok(all) => {
            let reasons: Vec<String> = all.into_iter().flat_map(|(_, h)| h.reasons).collect();
            if reasons.is_empty() {
                (
                    StatusCode::OK,
                    Json(serde_json::json!({"status": "ok", "reasons": []})),
                )
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(serde_json::json!({"status": "degraded", "reasons": reasons})),
                )
            }
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "redis unavailable", "error": e.to_string()})),
        ),
    }
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    tracing::info!("stopping: finishing the requests in flight");
}
