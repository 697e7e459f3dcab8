//! A topic's operator routes: bulk cancel by id prefix, delete, pause,
//! resume.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use punctual::TopicDeleted;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{topic_ok, St, TopicChange};
use crate::api::auth::Authorized;
use crate::api::error::{ApiError, ApiResult};
use crate::forms::counted;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CancelPrefixBody {
    id_prefix: String,
    #[serde(default)]
    dry_run: bool,
}

pub(super) async fn cancel_prefix(
    State(s): St,
    TopicChange { who, topic, body }: TopicChange<CancelPrefixBody>,
) -> ApiResult<Json<Value>> {
    if body.id_prefix.is_empty() {
        return Err(ApiError::invalid(
            "id_prefix is empty: that would cancel every job of the topic; give a prefix",
        ));
    }
    let found = s
        .queue
        .cancel_prefix(&topic, &body.id_prefix, body.dry_run)
        .await?;
    if !body.dry_run {
        let ids: Vec<String> = found.iter().map(|(id, _)| id.clone()).collect();
        let mut detail = counted("cancelled", &ids);
        detail["id_prefix"] = json!(body.id_prefix);
        who.record(&s.queue, "cancel", &topic, detail).await;
    }
    Ok(Json(json!({
        "topic": topic,
        "id_prefix": body.id_prefix,
        "dry_run": body.dry_run,
        "matched": found.len(),
        "cancelled": if body.dry_run { 0 } else { found.len() },
        "jobs": found.iter().map(|(id, st)| json!({"id": id, "state": st.as_str()})).collect::<Vec<_>>(),
    })))
}

pub(super) async fn delete_topic(
    who: Authorized,
    State(s): St,
    Path(topic): Path<String>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let schedules = crate::forms::schedule_names(&s.queue, &topic).await;
    match s.queue.delete_topic(&topic).await? {
        TopicDeleted::Deleted => {
            who.record(
                &s.queue,
                "topic.delete",
                &topic,
                json!({"schedules": schedules}),
            )
            .await;
            Ok(Json(
                json!({"topic": topic, "deleted": true, "schedules": schedules}),
            ))
        }
        TopicDeleted::HoldsJobs(n) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_empty",
            format!("topic {topic:?} holds {n} jobs (in some state or partition): cancel or purge them first; nothing was deleted"),
        )),
        _ => Err(ApiError::not_found(format!("no topic {topic:?}"))),
    }
}

pub(super) async fn pause(
    who: Authorized,
    State(s): St,
    Path(topic): Path<String>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    s.queue.pause(&topic).await?;
    who.record(&s.queue, "pause", &topic, json!({})).await;
    Ok(Json(json!({"topic": topic, "paused": true})))
}

pub(super) async fn resume(
    who: Authorized,
    State(s): St,
    Path(topic): Path<String>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    s.queue.resume(&topic).await?;
    who.record(&s.queue, "resume", &topic, json!({})).await;
    Ok(Json(json!({"topic": topic, "paused": false})))
}
