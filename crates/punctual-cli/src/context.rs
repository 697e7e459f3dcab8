//! What every command gets: the global options and a way to connect.

use anyhow::Context as _;
use punctual::{redact, Queue};

use crate::cli::GlobalOpts;

/// The global options, and the connection made from them on demand (commands
/// such as `script` never connect).
#[derive(Debug)]
pub struct Ctx {
    pub global: GlobalOpts,
}

impl Ctx {
    /// Whether to print JSON.
    pub fn json(&self) -> bool {
        self.global.json
    }

    /// Connects to Redis with the global options.
    pub async fn queue(&self) -> anyhow::Result<Queue> {
        let g = &self.global;
        tracing::debug!(url = %redact(&g.redis_url), prefix = %g.prefix, "connecting");
        match Queue::builder(g.redis_url.as_str())
            .prefix(g.prefix.as_str())
            .max_payload(g.max_payload)
            .connect()
            .await
        {
            Ok(q) => Ok(q),
            Err(e) if e.kind() == punctual::ErrorKind::Redis => {
                Err(e).with_context(|| format!("cannot reach Redis at {}", redact(&g.redis_url)))
            }
            Err(e) => Err(e.into()),
        }
    }
}
