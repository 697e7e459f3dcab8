//! Serving the app over HTTP/1.1 with hyper, with what `axum::serve` lacks:
//! time limits on slow or idle clients, and a check of the Host header.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower_http::timeout::RequestBodyTimeoutLayer;

use super::error::ApiError;

/// How the HTTP server treats its clients.
#[derive(Debug, Clone)]
pub(crate) struct HttpOptions {
    /// Time to send a request's headers, counted from when the connection
    /// opens or the previous response was sent: it also closes idle
    /// connections.
    pub header_timeout: Duration,
    /// Time to send a request's body.
    pub body_timeout: Duration,
    /// Host names answered besides IP addresses and `localhost`; `*`: any.
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            allowed_hosts: Vec::new(),
        }
    }
}

/// How long a stop waits for the requests in flight.
const DRAIN: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` resolves, then lets the
/// requests in flight finish (up to 10 s).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    opts: &HttpOptions,
    shutdown: impl Future<Output = ()>,
) {
    let hosts = Arc::new(AllowedHosts::new(&opts.allowed_hosts));
    let app = app
        .layer(axum::middleware::from_fn_with_state(hosts, check_host))
        .layer(RequestBodyTimeoutLayer::new(opts.body_timeout));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(opts.header_timeout);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait, do not spin.
                    tracing::warn!(error = %e, "cannot accept an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // The client's address, for the audit trail (`ConnectInfo`).
        let svc = tower::ServiceExt::map_request(
            app.clone(),
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            },
        );
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection closed with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some HTTP requests were still running {DRAIN:?} after the stop");
    }
}

/// The Host names a request may give (what defeats DNS rebinding: a page
/// of another site reaching this port through its own name).
#[derive(Debug)]
struct AllowedHosts {
    any: bool,
    names: Vec<String>,
}

impl AllowedHosts {
    fn new(names: &[String]) -> AllowedHosts {
        AllowedHosts {
            any: names.iter().any(|n| n == "*"),
            names: names
                .iter()
                .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
                .collect(),
        }
    }

    /// `host` is a Host header: a name or address, with or without a port.
    fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let host = host.trim();
        let name = if let Some(rest) = host.strip_prefix('[') {
            // [v6] or [v6]:port
            match rest.split_once(']') {
                Some((v6, _)) => return v6.parse::<IpAddr>().is_ok(),
                None => return false,
            }
        } else {
            match host.rsplit_once(':') {
                Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
                _ => host,
            }
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name.parse::<IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.names.contains(&name)
    }
}

async fn check_host(State(hosts): State<Arc<AllowedHosts>>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(axum::http::header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}").to_string())
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    match given {
        Some(host) if !hosts.allows(&host) => ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            format!(
                "this server does not answer to the host name {host:?}: reach it by IP address or localhost, or add the name to api_allowed_hosts (serve) or --allowed-host (api)"
            ),
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::AllowedHosts;

    #[test]
    fn addresses_and_localhost_and_listed_names_are_allowed() {
        let h = AllowedHosts::new(&["Queue.Example.com".to_string()]);
        for ok in [
            "127.0.0.1",
            "127.0.0.1:9464",
            "10.1.2.3:80",
            "[::1]:9464",
            "[::1]",
            "localhost",
            "LOCALHOST:9464",
            "app.localhost:1",
            "queue.example.com",
            "queue.example.com.:443",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9464",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "[::1",
            "example.com",
            "",
        ] {
            assert!(!h.allows(bad), "{bad}");
        }
        assert!(AllowedHosts::new(&["*".to_string()]).allows("anything.example"));
    }
}
