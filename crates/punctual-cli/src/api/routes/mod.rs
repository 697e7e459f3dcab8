//! The JSON routes under `/api/v1`. Each is a thin layer over
//! `punctual::Queue`; docs/openapi.yaml describes them. This file holds the
//! table of routes and the checks they share; the handlers live by concept:
//! `read.rs` (info, topics, processes, figures), `jobs.rs`, `dead.rs`,
//! `topic.rs` (operators' changes to a topic), `limits.rs`, `groups.rs`,
//! `group_limits.rs`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;

use super::auth::Authorized;
use super::body::body;
use super::error::{ApiError, ApiResult};
use super::ApiState;

/// Most jobs in one batch request.
pub(super) const MAX_BATCH_JOBS: usize = 10_000;

mod dead;
mod group_limits;
mod groups;
mod jobs;
mod limits;
mod read;
mod topic;

type St = State<Arc<ApiState>>;

/// A change to one topic: a request to `/topics/{topic}/...` with a JSON
/// body. Taken in the order every such route answers errors in: who asks
/// (401/403), the topic of the path, then the body (413, bad JSON).
pub(super) struct TopicChange<T> {
    pub(super) who: Authorized,
    pub(super) topic: String,
    pub(super) body: T,
}

impl<T: DeserializeOwned> FromRequest<Arc<ApiState>> for TopicChange<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<ApiState>) -> Result<Self, Response> {
        let (mut parts, bytes) = req.into_parts();
        let who = Authorized::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Path(topic) = Path::<String>::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let headers = parts.headers.clone();
        let bytes = Bytes::from_request(Request::from_parts(parts, bytes), state).await;
        topic_ok(&topic).map_err(IntoResponse::into_response)?;
        let body = body(&headers, bytes).map_err(IntoResponse::into_response)?;
        Ok(TopicChange { who, topic, body })
    }
}

/// The `/api/v1` routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/info", get(read::info))
        .route("/auth", get(read::auth_check))
        .route("/topics", get(read::all_topics))
        .route("/resident", get(read::resident))
        .route("/processes", get(read::processes))
        .route(
            "/topics/{topic}",
            get(read::topic_stats).delete(topic::delete_topic),
        )
        .route("/topics/{topic}/cancel", post(topic::cancel_prefix))
        .route("/topics/{topic}/jobs", post(jobs::enqueue).get(jobs::peek))
        .route(
            "/topics/{topic}/jobs/{id}",
            get(jobs::get_job).delete(jobs::cancel),
        )
        .route(
            "/topics/{topic}/jobs/{id}/reschedule",
            post(jobs::reschedule),
        )
        .route("/topics/{topic}/dead", get(dead::dead_list))
        .route("/topics/{topic}/dead/replay", post(dead::dead_replay))
        .route("/topics/{topic}/dead/purge", post(dead::dead_purge))
        .route("/topics/{topic}/pause", post(topic::pause))
        .route("/topics/{topic}/resume", post(topic::resume))
        .route("/topics/{topic}/series", get(read::series))
        .route("/audit", get(super::audit::list))
        .route("/topics/{topic}/history", get(read::history))
        .merge(limits::routes())
        .merge(groups::routes())
        .merge(group_limits::routes())
        .merge(super::schedules::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

pub(super) async fn not_found() -> ApiError {
    ApiError::not_found("no such API route; see docs/openapi.yaml for the routes under /api/v1")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method; see docs/openapi.yaml",
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn topic_ok(topic: &str) -> ApiResult<()> {
    punctual::validate_topic(topic).map_err(|e| ApiError::invalid(e.to_string()))
}

fn id_ok(id: &str) -> ApiResult<()> {
    punctual::validate_id(id).map_err(|e| ApiError::invalid(e.to_string()))
}

/// A query string, with errors as JSON.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> ApiResult<T> {
    q.map(|Query(v)| v)
        .map_err(|e| ApiError::invalid(format!("bad query string: {}", e.body_text())))
}

fn limit_ok(limit: Option<usize>, default: usize) -> ApiResult<usize> {
    match limit.unwrap_or(default) {
        n @ 1..=1000 => Ok(n),
        n => Err(ApiError::invalid(format!("limit={n}: give 1 to 1000"))),
    }
}

fn not_live(topic: &str, id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no live job {id:?} in topic {topic:?}: it never existed, is done, or was cancelled or purged"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_openapi_document_describes_every_route_and_error_code() {
        let doc = include_str!("../../../../../docs/openapi.yaml");
        for path in [
            "/info",
            "/auth",
            "/topics",
            "/resident",
            "/processes",
            "/topics/{topic}",
            "/topics/{topic}/jobs",
            "/topics/{topic}/jobs/{id}",
            "/topics/{topic}/jobs/{id}/reschedule",
            "/topics/{topic}/dead",
            "/topics/{topic}/dead/replay",
            "/topics/{topic}/dead/purge",
            "/topics/{topic}/pause",
            "/topics/{topic}/resume",
            "/topics/{topic}/series",
            "/topics/{topic}/history",
            "/topics/{topic}/limits",
            "/topics/{topic}/groups",
            "/audit",
        ] {
            assert!(
                doc.contains(&format!("\n  /api/v1{path}:\n")),
                "docs/openapi.yaml lacks {path}"
            );
        }
        for code in [
            "invalid_json",
            "invalid_input",
            "unauthorized",
            "read_only",
            "not_found",
            "method_not_allowed",
            "not_waiting",
            "not_empty",
            "body_too_large",
            "internal",
            "redis_unavailable",
        ] {
            assert!(
                doc.contains(&format!("`{code}`")),
                "docs/openapi.yaml lacks {code}"
            );
        }
    }
}
