//! What every command gets: the global options and a way to connect.

use anyhow::Context as _;
use punctual::Queue;

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

/// The URL with any password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let Some(at) = url.rfind('@').filter(|&at| at > scheme_end) else {
        return url.to_string();
    };
    match url[scheme_end..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end], &url[at..]),
        None if url[scheme_end..at].is_empty() => url.to_string(),
        // redis://password@host: the whole userinfo is the password.
        None => format!("{}***{}", &url[..scheme_end], &url[at..]),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact("rediss://secret@h:1"), "rediss://***@h:1");
    }
}
