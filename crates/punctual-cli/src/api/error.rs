//! The API's errors: a status, a stable machine-readable code and a message
//! that says what was wrong and what to do, sent as
//! `{"error": {"code": "...", "message": "..."}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answer of the API. The codes are part of the API (docs/openapi.yaml).
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `invalid_json`: the body is not JSON.
    pub(crate) fn invalid_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", message)
    }

    /// 400 `invalid_input`: well-formed, but a value is not acceptable.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }

    /// 404 `not_found`.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 401 `unauthorized`.
    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
}

impl From<punctual::Error> for ApiError {
    fn from(e: punctual::Error) -> Self {
        match e.kind() {
            punctual::ErrorKind::InvalidInput => {
                ApiError::invalid(format!("{e}; nothing was changed"))
            }
            punctual::ErrorKind::Redis if !unavailable(&e) => {
                tracing::error!(error = %e, "Redis refused an API call");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("{e}; this is a bug or a version mismatch: please report it"),
                )
            }
            punctual::ErrorKind::Redis => {
                tracing::warn!(error = %e, "API call failed on Redis");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "redis_unavailable",
                    format!("{e}; the call may be retried once Redis answers (it may or may not have been applied if Redis failed mid-call)"),
                )
            }
            _ => {
                tracing::error!(error = %e, "API call got an unexpected reply");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("{e}; check that every punctual process runs the same version"),
                )
            }
        }
    }
}

/// Whether the Redis error under `e` means "not now" (unreachable, timed
/// out, busy, out of memory, loading, failing over): worth a retry, so 503.
fn unavailable(e: &punctual::Error) -> bool {
    e.is_passing()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "code": self.code, "message": self.message }
        });
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"punctual\""),
            );
        }
        resp
    }
}

/// The result of an API handler.
pub(super) type ApiResult<T> = Result<T, ApiError>;
