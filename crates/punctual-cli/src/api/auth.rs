//! The bearer token that every mutating call must present.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use punctual::internal::audit::Entry;
use punctual::Queue;
use serde_json::Value;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::ApiState;

/// Environment variable holding the token (wins over the config file).
pub(crate) const TOKEN_ENV: &str = "PUNCTUAL_API_TOKEN";

/// Shortest token accepted.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// A secret token. Its `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct Token(Arc<[u8]>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

impl Token {
    /// Checks a token's form: at least 16 visible ASCII characters.
    pub(crate) fn new(text: &str) -> Result<Token, String> {
        if text.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the API token is {} characters long; use at least {MIN_TOKEN_LEN} (e.g. the output of `openssl rand -hex 32`)",
                text.len()
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "the API token may only hold visible ASCII characters (no spaces or newlines); e.g. use `openssl rand -hex 32`"
                    .into(),
            );
        }
        Ok(Token(text.as_bytes().into()))
    }

    /// The token's text (to hand it on; never log it).
    pub(crate) fn reveal(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    /// Compares in time that depends only on the lengths, never on where
    /// the first difference is.
    pub(crate) fn matches(&self, given: &[u8]) -> bool {
        let expected = &self.0[..];
        // Pad or cut the given token to the expected length, so the byte
        // comparison always covers every byte of the secret.
        let mut padded = vec![0u8; expected.len()];
        let n = given.len().min(expected.len());
        padded[..n].copy_from_slice(&given[..n]);
        let same_bytes = padded.ct_eq(expected);
        let same_len = (given.len() as u64).ct_eq(&(expected.len() as u64));
        (same_bytes & same_len).into()
    }
}

/// The token to use: `PUNCTUAL_API_TOKEN` when set and not empty, else
/// `configured` (from the config file). `None`: the API is read-only.
pub(crate) fn resolve(configured: Option<&str>) -> Result<Option<Token>, String> {
    let from_env = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    match (from_env, configured) {
        (Some(t), _) => Token::new(&t)
            .map(Some)
            .map_err(|e| format!("{TOKEN_ENV}: {e}")),
        (None, Some(t)) => Token::new(t)
            .map(Some)
            .map_err(|e| format!("api_token: {e}")),
        (None, None) => Ok(None),
    }
}

/// Proof that the request carried the API token: a handler that takes this
/// argument refuses requests without it (401) before reading anything else.
/// It says who made the call, for the audit trail.
#[derive(Debug)]
pub(crate) struct Authorized {
    /// The client's address (`ip:port`), or `unknown`.
    pub from: String,
}

impl Authorized {
    /// Records a change made by this call in the audit trail, as `api`
    /// from the client's address. A failure is logged, never returned.
    pub(crate) async fn record(&self, queue: &Queue, action: &str, topic: &str, detail: Value) {
        let entry = Entry::new("api", self.from.as_str(), action)
            .topic(topic)
            .detail(detail);
        crate::forms::record(queue, entry).await;
    }
}

impl FromRequestParts<Arc<ApiState>> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Self::Rejection> {
        let Some(token) = &state.token else {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "read_only",
                format!(
                    "this server has no API token, so it only allows reading; set {TOKEN_ENV} (or api_token in the serve config) and restart it to allow changes"
                ),
            ));
        };
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(ApiError::unauthorized(
                "this call changes data and needs the API token: send the header `Authorization: Bearer <token>`",
            ));
        };
        let given = bearer(value.as_bytes()).ok_or_else(|| {
            ApiError::unauthorized("the Authorization header must be `Bearer <token>`")
        })?;
        if token.matches(given) {
            let from = parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or_else(|| "unknown".to_string(), |c| c.0.to_string());
            Ok(Authorized { from })
        } else {
            Err(ApiError::unauthorized(
                "wrong API token: send the token the server was started with (PUNCTUAL_API_TOKEN or api_token)",
            ))
        }
    }
}

/// The credentials of a `Bearer` Authorization header. The scheme is
/// case-insensitive (RFC 7235 section 2.1): `bearer` and `BEARER` work too.
fn bearer(header: &[u8]) -> Option<&[u8]> {
    let header = header.trim_ascii();
    let split = header.iter().position(|b| *b == b' ' || *b == b'\t')?;
    let (scheme, rest) = header.split_at(split);
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| rest.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_exactly() {
        let t = Token::new("0123456789abcdef0123").unwrap();
        assert!(t.matches(b"0123456789abcdef0123"));
        assert!(!t.matches(b"0123456789abcdef012"));
        assert!(!t.matches(b"0123456789abcdef01234"));
        assert!(!t.matches(b"0123456789abcdef0124"));
        assert!(!t.matches(b""));
        // A prefix padded with zero bytes is still wrong.
        assert!(!t.matches(b"0123456789abcdef0123\0"));
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        for h in [
            "Bearer abc",
            "bearer abc",
            "BEARER abc",
            "bEaReR  abc ",
            "Bearer\tabc",
        ] {
            assert_eq!(bearer(h.as_bytes()), Some(&b"abc"[..]), "{h:?}");
        }
        for h in ["Basic abc", "Bearerabc", "Bearer", "abc"] {
            assert_eq!(bearer(h.as_bytes()), None, "{h:?}");
        }
    }

    #[test]
    fn short_or_blank_tokens_are_refused_with_advice() {
        assert!(Token::new("short").unwrap_err().contains("at least 16"));
        assert!(Token::new("has a space in it!!")
            .unwrap_err()
            .contains("visible ASCII"));
        assert_eq!(
            format!("{:?}", Token::new("0123456789abcdef").unwrap()),
            "Token(***)"
        );
    }
}
