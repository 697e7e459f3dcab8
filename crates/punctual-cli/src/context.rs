//! What every command gets: the global options and a way to connect.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use punctual::internal::redact;
use punctual::Queue;

use crate::input::parse_max_payload;

/// Options every command takes (before or after the command name).
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Global options")]
pub(crate) struct GlobalOpts {
    /// The config file (TOML) of `serve`. Every command takes its `redis`,
    /// `prefix` and `max_payload` from it, so admin commands ask the Redis
    /// the service uses. Precedence: --redis/--prefix/--max-payload or their
    /// PUNCTUAL_* variable, then the file, then the default. A file that
    /// cannot be read or is invalid is an error (exit 2), never skipped.
    #[arg(
        long,
        short,
        value_name = "FILE",
        env = "PUNCTUAL_CONFIG",
        global = true
    )]
    pub config: Option<PathBuf>,

    /// Redis to use: redis://[user:password@]host:port[/db] or rediss://... for TLS.
    /// For a Redis Cluster, give one node's URL (detected) or several,
    /// comma-separated.
    #[arg(
        long = "redis",
        value_name = "URL",
        env = "PUNCTUAL_REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    pub redis_url: String,

    /// Key prefix: every key punctual writes starts with `PREFIX:`. Producers,
    /// workers and these commands must agree on it.
    #[arg(
        long,
        value_name = "P",
        env = "PUNCTUAL_PREFIX",
        hide_env_values = true,
        default_value = punctual::DEFAULT_PREFIX,
        global = true
    )]
    pub prefix: String,

    /// Largest payload accepted by `push` and the HTTP API, in bytes.
    #[arg(
        long,
        value_name = "BYTES",
        env = "PUNCTUAL_MAX_PAYLOAD",
        hide_env_values = true,
        default_value_t = punctual::DEFAULT_MAX_PAYLOAD,
        value_parser = parse_max_payload,
        global = true
    )]
    pub max_payload: usize,

    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The global options, and the connection made from them on demand (commands
/// such as `script` never connect).
#[derive(Debug)]
pub(crate) struct Ctx {
    pub global: GlobalOpts,
}

/// Takes `redis`, `prefix` and `max_payload` from the config file named by
/// `--config` / `PUNCTUAL_CONFIG`, where the option was not given explicitly
/// (`explicit(id)`: on the command line or in its variable). The file is
/// read and validated as `serve` reads it (`rust`: the topics with a Rust
/// handler); one that cannot be read or is invalid is an error (exit 2).
pub(crate) fn apply_config(
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
    pub(crate) fn json(&self) -> bool {
        self.global.json
    }

    /// Connects to Redis with the global options.
    pub(crate) async fn queue(&self) -> anyhow::Result<Queue> {
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
