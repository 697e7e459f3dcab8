//! A request's JSON body read into a type, with errors as JSON.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use super::error::{ApiError, ApiResult};

/// The request body as `T`, with errors as JSON: 413 over the size limit,
/// 400 for bad JSON or fields. Any Content-Type is read as JSON (some
/// clients, such as PHP's curl, send form types by default); a body that
/// is not JSON gets an error that says so.
pub(super) fn body<T: DeserializeOwned>(
    headers: &HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    let bytes = bytes.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "the request body is over the {} MiB limit: send fewer jobs per request; nothing was changed",
                    super::MAX_BODY >> 20
                ),
            )
        } else {
            ApiError::invalid(format!("cannot read the request body: {}", e.body_text()))
        }
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_json(
            "the request body is empty: send a JSON object; nothing was changed",
        ));
    }
    crate::input::no_duplicate_keys(&bytes)
        .map_err(|e| ApiError::invalid(format!("{e}; nothing was changed")))?;
    serde_json::from_slice(&bytes).map_err(|e| json_error(e, headers))
}

fn json_error(e: serde_json::Error, headers: &HeaderMap) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => ApiError::invalid(format!("{e}; nothing was changed")),
        _ => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none");
            ApiError::invalid_json(format!(
                "the body is not valid JSON ({e}); send JSON with Content-Type: application/json (this request said {ct:?}); nothing was changed"
            ))
        }
    }
}
