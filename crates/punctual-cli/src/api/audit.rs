//! `GET /api/v1/audit`: the audit trail, newest first.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use punctual::internal::audit::{self, MAX_ENTRIES};
use serde::Deserialize;

use super::reply::AuditEntryReply;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::ApiState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    limit: Option<usize>,
}

/// The newest `limit` entries (default 50, at most 10,000).
pub(super) async fn list(
    State(s): State<Arc<ApiState>>,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) =
        q.map_err(|e| ApiError::invalid(format!("bad query string: {}", e.body_text())))?;
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_ENTRIES {
        return Err(ApiError::invalid(format!(
            "limit={limit}: give 1 to {MAX_ENTRIES}"
        )));
    }
    let trail = audit::read(&s.queue, limit).await?;
    let entries: Vec<AuditEntryReply> = trail.entries.iter().map(AuditEntryReply::from).collect();
    Ok(Json(json!({
        "entries": entries,
        "unreadable": trail.unreadable,
        "kept": MAX_ENTRIES,
    })))
}
