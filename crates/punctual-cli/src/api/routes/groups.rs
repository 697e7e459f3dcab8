//! `GET /api/v1/topics/{topic}/groups`: a topic's active groups
//! (docs/openapi.yaml, `Groups`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::Value;

use super::{topic_ok, St};
use crate::api::error::ApiResult;
use crate::api::ApiState;
use crate::forms::groups_json;

/// The groups route.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/topics/{topic}/groups", get(read))
}

async fn read(State(s): St, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let g = s.queue.groups(&topic).await?;
    Ok(Json(groups_json(&topic, &g)))
}
