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

/// Takes `redis`, `prefix` and `max_payload` from the config file named by
/// `--config` / `PUNCTUAL_CONFIG`, where the option was not given explicitly
/// (`explicit(id)`: on the command line or in its variable). The file is
/// read and validated as `serve` reads it (`rust`: the topics with a Rust
/// handler); one that cannot be read or is invalid is an error (exit 2).
pub fn apply_config(
    global: &mut GlobalOpts,
    explicit: impl Fn(&str) -> bool,
    rust: &[&str],
) -> anyhow::Result<()> {
    let Some(path) = global.config.clone() else {
        return Ok(());
    };
    let cfg = crate::serve::config::Config::load(&path, &Default::default(), rust)
        .map_err(|e| crate::exit::invalid(format!("--config: {e:#}")))?;
    if !explicit("redis_url") {
        global.redis_url = cfg.redis;
    }
    if !explicit("prefix") {
        global.prefix = cfg.prefix;
    }
    if !explicit("max_payload") {
        global.max_payload = cfg.max_payload;
    }
    tracing::debug!(config = %path.display(), "read the config file");
    Ok(())
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
