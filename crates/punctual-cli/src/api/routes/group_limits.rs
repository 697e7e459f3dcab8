//! `GET` and `PUT /api/v1/topics/{topic}/group-limits` (the default limits
//! of every group, and the groups with their own), `PUT` and `DELETE
//! /api/v1/topics/{topic}/group-limits/{group}` (one group's own limits)
//! (docs/openapi.yaml, `GroupLimits`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, put};
use axum::{Json, Router};
use punctual::GroupLimits;
use serde_json::{json, Value};

use super::limits::LimitsBody;
use super::{body, topic_ok, St, TopicChange};
use crate::api::auth::Authorized;
use crate::api::error::{ApiError, ApiResult};
use crate::api::ApiState;
use crate::forms::limits_json;

/// The group limits routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/topics/{topic}/group-limits", get(read).put(write_default))
        .route(
            "/topics/{topic}/group-limits/{group}",
            put(write_group).delete(clear_group),
        )
}

fn group_ok(group: &str) -> ApiResult<()> {
    punctual::validate_group(group).map_err(|e| ApiError::invalid(e.to_string()))
}

/// `{"topic", "default": limits, "groups": {name: limits}}`.
fn reply(topic: &str, g: &GroupLimits) -> Json<Value> {
    let groups: serde_json::Map<String, Value> = g
        .groups
        .iter()
        .map(|(name, l)| (name.clone(), limits_json(l)))
        .collect();
    Json(json!({"topic": topic, "default": limits_json(&g.default), "groups": groups}))
}

async fn read(State(s): St, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let g = s.queue.group_limits(&topic).await?;
    Ok(reply(&topic, &g))
}

async fn write_default(
    State(s): St,
    TopicChange { who, topic, body }: TopicChange<LimitsBody>,
) -> ApiResult<Json<Value>> {
    let l = body.limits()?;
    s.queue.set_group_limits(&topic, None, &l).await?;
    let g = s.queue.group_limits(&topic).await?;
    who.record(
        &s.queue,
        "topic.group_limits",
        &topic,
        limits_json(&g.default),
    )
    .await;
    Ok(reply(&topic, &g))
}

async fn write_group(
    who: Authorized,
    State(s): St,
    Path((topic, group)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    group_ok(&group)?;
    let b: LimitsBody = body(&headers, bytes)?;
    let l = b.limits()?;
    s.queue.set_group_limits(&topic, Some(&group), &l).await?;
    let g = s.queue.group_limits(&topic).await?;
    who.record(
        &s.queue,
        "group.limits",
        &topic,
        json!({"group": group, "own": g.groups.get(&group).map(limits_json)}),
    )
    .await;
    Ok(reply(&topic, &g))
}

async fn clear_group(
    who: Authorized,
    State(s): St,
    Path((topic, group)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    group_ok(&group)?;
    s.queue.clear_group_limits(&topic, &group).await?;
    let g = s.queue.group_limits(&topic).await?;
    who.record(
        &s.queue,
        "group.limits",
        &topic,
        json!({"group": group, "own": null}),
    )
    .await;
    Ok(reply(&topic, &g))
}
