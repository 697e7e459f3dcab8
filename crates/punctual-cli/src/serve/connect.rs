//! Connecting to Redis as `serve`'s processes do.

use std::time::Duration;

use anyhow::{Context, Result};
use punctual::Queue;

use super::config::Config;

/// Connects to Redis with the config's URL, prefix and payload limit. A
/// Redis still loading its dataset (after a restart) is waited for, with
/// backoff; an unreachable one is an error at once.
pub(crate) async fn connect(cfg: &Config) -> Result<Queue> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = Queue::builder(&cfg.redis)
            .prefix(&cfg.prefix)
            .max_payload(cfg.max_payload)
            .connect()
            .await;
        // INFO works while Redis loads, data commands do not: probe with one.
        let probed = match connected {
            Ok(q) => q.topics().await.map(|_| q),
            Err(e) => Err(e),
        };
        match probed {
            Ok(q) => return Ok(q),
            Err(e) if loading(&e) => {
                tracing::warn!(
                    "Redis at {} is loading its dataset; trying again in {backoff:?}",
                    punctual::internal::redact(&cfg.redis)
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) if e.kind() == punctual::ErrorKind::Redis => {
                return Err(e).with_context(|| {
                    format!(
                        "cannot reach Redis at {} (is redis-server running? set redis in the config, --redis or PUNCTUAL_REDIS_URL)",
                        punctual::internal::redact(&cfg.redis)
                    )
                })
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether Redis answered LOADING (it is reading its dataset from disk).
fn loading(e: &punctual::Error) -> bool {
    match e {
        punctual::Error::Redis(r) => {
            r.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
        }
        _ => false,
    }
}
