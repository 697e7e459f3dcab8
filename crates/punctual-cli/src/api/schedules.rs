//! `/api/v1/topics/{topic}/schedules[/{name}]`: list, read, add or
//! replace (PUT), remove, pause and resume recurring schedules.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Authorized;
use super::error::{ApiError, ApiResult};
use super::ApiState;
use crate::forms::info_json;

type St = State<Arc<ApiState>>;

/// The schedule routes (nested under `/api/v1`).
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/topics/{topic}/schedules", get(list))
        .route(
            "/topics/{topic}/schedules/{name}",
            get(one).put(put).delete(remove),
        )
        .route("/topics/{topic}/schedules/{name}/pause", post(pause))
        .route("/topics/{topic}/schedules/{name}/resume", post(resume))
}

/// The body of `PUT`: the schedule's fields (its name is in the path).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleBody {
    cron: Option<String>,
    every_ms: Option<u64>,
    tz: Option<String>,
    /// A string is the payload as is; any other JSON value is sent as its
    /// JSON text.
    payload: Option<Value>,
    options: Option<String>,
    catch_up: Option<String>,
    spread_ms: Option<u64>,
}

fn names_ok(topic: &str, name: &str) -> ApiResult<()> {
    punctual::validate_topic(topic).map_err(|e| ApiError::invalid(e.to_string()))?;
    punctual::schedule::validate_name(name).map_err(|e| ApiError::invalid(e.to_string()))
}

fn no_such(topic: &str, name: &str) -> ApiError {
    ApiError::not_found(format!("topic {topic:?} has no schedule {name:?}"))
}

async fn list(State(s): St, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    punctual::validate_topic(&topic).map_err(|e| ApiError::invalid(e.to_string()))?;
    let all = s.queue.schedules(&topic).await?;
    let v: Vec<Value> = all.iter().map(|i| info_json(&topic, i)).collect();
    Ok(Json(json!({"topic": topic, "schedules": v})))
}

async fn one(State(s): St, Path((topic, name)): Path<(String, String)>) -> ApiResult<Json<Value>> {
    names_ok(&topic, &name)?;
    match s.queue.schedule(&topic, &name).await? {
        Some(i) => Ok(Json(info_json(&topic, &i))),
        None => Err(no_such(&topic, &name)),
    }
}

async fn put(
    who: Authorized,
    State(s): St,
    Path((topic, name)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    names_ok(&topic, &name)?;
    let b: ScheduleBody = super::body::body(&headers, bytes)?;
    let payload = match b.payload {
        None => String::new(),
        Some(Value::String(s)) => s,
        Some(v) => v.to_string(),
    };
    let schedule = crate::forms::build_schedule(
        &name,
        b.cron.as_deref(),
        b.every_ms.map(Duration::from_millis),
        b.tz.as_deref().unwrap_or("UTC"),
        &payload,
        b.catch_up.as_deref().unwrap_or("all"),
        b.spread_ms.map(Duration::from_millis),
        b.options.as_deref().unwrap_or(""),
    )
    .map_err(|e| ApiError::invalid(format!("{e:#}; nothing was changed")))?;
    let existed = s.queue.schedule(&topic, &name).await?.is_some();
    let stored = s.queue.schedule_put(&topic, schedule).await?;
    who.record(
        &s.queue,
        if existed {
            "schedule.update"
        } else {
            "schedule.add"
        },
        &topic,
        serde_json::to_value(&stored).unwrap_or_default(),
    )
    .await;
    let info = s
        .queue
        .schedule(&topic, &name)
        .await?
        .ok_or_else(|| no_such(&topic, &name))?;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(info_json(&topic, &info))).into_response())
}

async fn remove(
    who: Authorized,
    State(s): St,
    Path((topic, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    names_ok(&topic, &name)?;
    if !s.queue.schedule_remove(&topic, &name).await? {
        return Err(no_such(&topic, &name));
    }
    who.record(&s.queue, "schedule.rm", &topic, json!({"name": name}))
        .await;
    Ok(Json(json!({"topic": topic, "name": name, "removed": true})))
}

async fn pause(
    who: Authorized,
    State(s): St,
    Path((topic, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    names_ok(&topic, &name)?;
    if !s.queue.schedule_pause(&topic, &name).await? {
        return Err(no_such(&topic, &name));
    }
    who.record(&s.queue, "schedule.pause", &topic, json!({"name": name}))
        .await;
    Ok(Json(json!({"topic": topic, "name": name, "paused": true})))
}

async fn resume(
    who: Authorized,
    State(s): St,
    Path((topic, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    names_ok(&topic, &name)?;
    if !s.queue.schedule_resume(&topic, &name).await? {
        return Err(no_such(&topic, &name));
    }
    who.record(&s.queue, "schedule.resume", &topic, json!({"name": name}))
        .await;
    Ok(Json(json!({"topic": topic, "name": name, "paused": false})))
}
