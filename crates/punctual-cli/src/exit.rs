//! Exit codes and error reports, in one place.
//!
//! Commands return `anyhow::Result`. A command that wants a particular exit
//! code returns [`problem`] or [`invalid`]; every other error is classified by
//! what it wraps: a `punctual::Error` by its kind, a `redis::RedisError` as
//! Redis trouble, anything else as unexpected.

use std::fmt;
use std::process::ExitCode;

/// The documented exit codes (also listed in `punctual --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Success.
    Ok = 0,
    /// The command ran but found a problem: `check` found violations, `get`
    /// or `cancel` of an id that is not live, a job that cannot be
    /// rescheduled, ...
    Problem = 1,
    /// Bad usage or invalid input; nothing was written. (clap exits 2 on
    /// usage errors too.)
    Invalid = 2,
    /// Redis is unreachable, timed out, or refused the command.
    Redis = 3,
    /// Redis answered something unexpected, or another internal error.
    Unexpected = 4,
}

impl From<Code> for ExitCode {
    fn from(c: Code) -> ExitCode {
        ExitCode::from(c as u8)
    }
}

/// An error raised on purpose by a command, carrying its exit code.
#[derive(Debug)]
pub(crate) struct Exit {
    code: Code,
    message: String,
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// The operation ran but found a problem (exit 1).
pub(crate) fn problem(message: impl Into<String>) -> anyhow::Error {
    Exit {
        code: Code::Problem,
        message: message.into(),
    }
    .into()
}

/// Invalid input (exit 2).
pub(crate) fn invalid(message: impl Into<String>) -> anyhow::Error {
    Exit {
        code: Code::Invalid,
        message: message.into(),
    }
    .into()
}

/// The exit code for `err`: the first cause in its chain that says.
pub(crate) fn classify(err: &anyhow::Error) -> Code {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<Exit>() {
            return e.code;
        }
        if let Some(e) = cause.downcast_ref::<punctual::Error>() {
            return match e.kind() {
                punctual::ErrorKind::InvalidInput => Code::Invalid,
                punctual::ErrorKind::Redis => Code::Redis,
                _ => Code::Unexpected,
            };
        }
        if cause.downcast_ref::<redis::RedisError>().is_some() {
            return Code::Redis;
        }
    }
    Code::Unexpected
}

/// What to do about a Redis error, if there is advice to give.
fn redis_hint(err: &anyhow::Error) -> Option<&'static str> {
    let e = err.chain().find_map(|c| {
        c.downcast_ref::<redis::RedisError>()
            .or_else(|| match c.downcast_ref() {
                Some(punctual::Error::Redis(e)) => Some(e),
                _ => None,
            })
    })?;
    if e.is_connection_refusal() || e.is_timeout() || e.is_io_error() || e.is_connection_dropped() {
        return Some("is redis-server running? set --redis or PUNCTUAL_REDIS_URL");
    }
    match e.code() {
        Some("NOAUTH" | "WRONGPASS") => {
            Some("give the user and password in the URL: redis://user:password@host:port")
        }
        Some("OOM") => Some(
            "Redis is out of memory: raise maxmemory or free memory; punctual needs maxmemory-policy noeviction",
        ),
        Some("READONLY") => Some("this Redis is a replica: point --redis at the primary"),
        _ => None,
    }
}

/// The chain of `err` as `{:#}` prints it (`outer: inner: ...`), less the
/// causes whose text the previous one already shows: a `punctual::Error`
/// wrapping a `RedisError` wrapping an `io::Error` would otherwise say
/// "Connection refused" three times.
fn chain_text(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if parts.last().is_some_and(|last| last.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

/// The one-line report of `err` for stderr: `punctual: error: ...`.
pub(crate) fn report(err: &anyhow::Error) -> String {
    let mut line = format!("punctual: error: {}", chain_text(err));
    if let Some(hint) = redis_hint(err) {
        line.push_str(&format!(" ({hint})"));
    }
    // One line: a multi-line message (e.g. a Redis error detail) is joined.
    line.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn deliberate_codes_survive_context() {
        let e = Err::<(), _>(problem("no live job"))
            .context("get")
            .unwrap_err();
        assert_eq!(classify(&e), Code::Problem);
        assert_eq!(classify(&invalid("bad")), Code::Invalid);
    }

    #[test]
    fn library_errors_map_by_kind() {
        let bad = punctual::validate_topic("a{b}").unwrap_err();
        let e = anyhow::Error::new(bad).context("push");
        assert_eq!(classify(&e), Code::Invalid);
        assert_eq!(
            report(&e),
            r#"punctual: error: push: invalid topic "a{b}": topic names may not contain braces"#
        );
    }

    #[test]
    fn causes_already_shown_are_not_repeated() {
        let io = std::io::Error::other("refused");
        let e = anyhow::Error::new(io)
            .context("redis: refused")
            .context("cannot reach Redis");
        assert_eq!(
            report(&e),
            "punctual: error: cannot reach Redis: redis: refused"
        );
    }

    #[test]
    fn other_errors_are_unexpected() {
        let e = anyhow::anyhow!("boom");
        assert_eq!(classify(&e), Code::Unexpected);
    }
}
