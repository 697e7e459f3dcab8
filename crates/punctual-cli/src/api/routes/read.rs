//! Reading routes: the server's info, topics and their figures, processes,
//! the resident programs, the per-minute history.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{query, topic_ok, St};
use crate::api::auth::Authorized;
use crate::api::error::{ApiError, ApiResult};
use crate::api::reply::{HistoryReply, ProcessReply, TopicReply};
use crate::health;

pub(super) async fn info(State(s): St) -> Json<Value> {
    Json(json!({
        "name": "punctual",
        "version": env!("CARGO_PKG_VERSION"),
        "mode": s.mode,
        "prefix": s.queue.prefix(),
        // What a visitor without the token may see: not where Redis is
        // when reads need the token.
        "redis": (!s.reads_need_token).then(|| s.queue.url_redacted()),
        "reads_need_token": s.reads_need_token,
        "max_payload": s.queue.max_payload(),
        "changes_allowed": s.token.is_some(),
        "sample_interval_ms": s.sampler.interval().as_millis() as u64,
        "lateness_source": if s.sampler.has_lateness() {
            "the workers of this punctual serve"
        } else {
            "none: handler lateness is measured by punctual serve; this server shows how long the oldest ready job has waited"
        },
    }))
}

/// 200 when the request carries the right token (the dashboard's check).
pub(super) async fn auth_check(_: Authorized) -> Json<Value> {
    Json(json!({"authorized": true}))
}

/// The resident programs of `serve`'s workers on this host, by topic
/// (what `/healthz` shows under `resident`); `{}` for `punctual api`.
pub(super) async fn resident(State(s): St) -> Json<Value> {
    Json(match &s.resident {
        Some(board) => json!(board.snapshot()),
        None => json!({}),
    })
}

/// Every valid known topic's stats, and under `skipped` the names in the
/// set of known topics that are not valid topics (one bad name never hides
/// the others).
pub(super) async fn all_topics(State(s): St) -> ApiResult<Json<Value>> {
    let listed = s.queue.list_topics().await?;
    let all = health::topics(&s.queue, listed.valid, &s.alerts).await?;
    let topics: Vec<TopicReply> = all.iter().map(|(st, h)| TopicReply::new(st, h)).collect();
    Ok(Json(json!({ "topics": topics, "skipped": listed.skipped })))
}

/// One topic's stats, with its status (`active` only with a live worker)
/// and the alerts it crosses.
pub(super) async fn topic_stats(
    State(s): St,
    Path(topic): Path<String>,
) -> ApiResult<Json<TopicReply>> {
    topic_ok(&topic)?;
    let all = health::topics(&s.queue, vec![topic], &s.alerts).await?;
    let (st, h) = &all[0];
    Ok(Json(TopicReply::new(st, h)))
}

/// The live processes in the registry, on every host.
pub(super) async fn processes(State(s): St) -> ApiResult<Json<Value>> {
    let procs = s.queue.processes().await?;
    let now = s.queue.redis_now_ms().await?;
    let procs: Vec<ProcessReply> = procs.iter().map(ProcessReply::from).collect();
    Ok(Json(json!({ "now_ms": now, "processes": procs })))
}

pub(super) async fn series(State(s): St, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    Ok(Json(json!({
        "topic": topic,
        "interval_ms": s.sampler.interval().as_millis() as u64,
        "window_ms": crate::api::sampler::WINDOW.as_millis() as u64,
        "lateness_measured": s.sampler.has_lateness(),
        "points": s.sampler.series(&topic),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryQuery {
    minutes: Option<u32>,
}

/// Per-minute figures from the history in Redis (every host, kept 7 days).
pub(super) async fn history(
    State(s): St,
    Path(topic): Path<String>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> ApiResult<Json<HistoryReply>> {
    topic_ok(&topic)?;
    let minutes = query(q)?.minutes.unwrap_or(60);
    if minutes == 0 || minutes > punctual::internal::MAX_HISTORY_MINUTES {
        return Err(ApiError::invalid(format!(
            "minutes={minutes}: give 1 to {} (7 days)",
            punctual::internal::MAX_HISTORY_MINUTES
        )));
    }
    let history = s.queue.history(&topic, minutes).await?;
    Ok(Json(HistoryReply::from(&history)))
}
