//! The JSON routes under `/api/v1`. Each is a thin layer over
//! `punctual::Queue`; docs/openapi.yaml describes them.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use punctual::{
    DeadSelector, EnqueueOptions, EnqueueStatus, Job, ReplayPace, State as JobState, TopicDeleted,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Authorized;
use super::body::body;
use super::error::{ApiError, ApiResult};
use super::reply::{HistoryReply, JobReply, ProcessReply, TopicReply};
use super::ApiState;
use crate::forms::{counted, present, when_of, JobFields};
use crate::health;

/// Largest offset into the dead list.
const MAX_OFFSET: usize = 1_000_000_000;

/// Most jobs in one batch request.
pub(super) const MAX_BATCH_JOBS: usize = 10_000;

mod group_limits;
mod groups;
mod limits;

type St = State<Arc<ApiState>>;

/// The `/api/v1` routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/info", get(info))
        .route("/auth", get(auth_check))
        .route("/topics", get(all_topics))
        .route("/resident", get(resident))
        .route("/processes", get(processes))
        .route("/topics/{topic}", get(topic_stats).delete(delete_topic))
        .route("/topics/{topic}/cancel", post(cancel_prefix))
        .route("/topics/{topic}/jobs", post(enqueue).get(peek))
        .route("/topics/{topic}/jobs/{id}", get(get_job).delete(cancel))
        .route("/topics/{topic}/jobs/{id}/reschedule", post(reschedule))
        .route("/topics/{topic}/dead", get(dead_list))
        .route("/topics/{topic}/dead/replay", post(dead_replay))
        .route("/topics/{topic}/dead/purge", post(dead_purge))
        .route("/topics/{topic}/pause", post(pause))
        .route("/topics/{topic}/resume", post(resume))
        .route("/topics/{topic}/series", get(series))
        .route("/audit", get(super::audit::list))
        .route("/topics/{topic}/history", get(history))
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

// ---- reading --------------------------------------------------------------

async fn info(State(s): St) -> Json<Value> {
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
async fn auth_check(_: Authorized) -> Json<Value> {
    Json(json!({"authorized": true}))
}

/// The resident programs of `serve`'s workers on this host, by topic
/// (what `/healthz` shows under `resident`); `{}` for `punctual api`.
async fn resident(State(s): St) -> Json<Value> {
    Json(match &s.resident {
        Some(board) => json!(board.snapshot()),
        None => json!({}),
    })
}

/// Every valid known topic's stats, and under `skipped` the names in the
/// set of known topics that are not valid topics (one bad name never hides
/// the others).
async fn all_topics(State(s): St) -> ApiResult<Json<Value>> {
    let listed = s.queue.list_topics().await?;
    let all = health::topics(&s.queue, listed.valid, &s.alerts).await?;
    let topics: Vec<TopicReply> = all.iter().map(|(st, h)| TopicReply::new(st, h)).collect();
    Ok(Json(json!({ "topics": topics, "skipped": listed.skipped })))
}

/// One topic's stats, with its status (`active` only with a live worker)
/// and the alerts it crosses.
async fn topic_stats(State(s): St, Path(topic): Path<String>) -> ApiResult<Json<TopicReply>> {
    topic_ok(&topic)?;
    let all = health::topics(&s.queue, vec![topic], &s.alerts).await?;
    let (st, h) = &all[0];
    Ok(Json(TopicReply::new(st, h)))
}

/// The live processes in the registry, on every host.
async fn processes(State(s): St) -> ApiResult<Json<Value>> {
    let procs = s.queue.processes().await?;
    let now = s.queue.redis_now_ms().await?;
    let procs: Vec<ProcessReply> = procs.iter().map(ProcessReply::from).collect();
    Ok(Json(json!({ "now_ms": now, "processes": procs })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeekQuery {
    state: Option<String>,
    limit: Option<usize>,
    /// With `id_prefix` (may be empty) or `cursor`: a page of a listing by
    /// cursor (`Queue::list`) instead of the first jobs by time.
    id_prefix: Option<String>,
    cursor: Option<String>,
}

async fn peek(
    State(s): St,
    Path(topic): Path<String>,
    q: Result<Query<PeekQuery>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let q = query(q)?;
    let name = q.state.as_deref().unwrap_or("pool");
    let state = match name.parse() {
        Ok(s @ (JobState::Pool | JobState::Ready | JobState::Running | JobState::Dead)) => s,
        _ => {
            return Err(ApiError::invalid(format!(
                "state={name:?}: give pool, ready, running or dead"
            )))
        }
    };
    let limit = limit_ok(q.limit, 20)?;
    if q.id_prefix.is_some() || q.cursor.is_some() {
        let page = s
            .queue
            .list(
                &topic,
                state,
                q.id_prefix.as_deref().unwrap_or(""),
                q.cursor.as_deref(),
                limit,
            )
            .await?;
        return Ok(Json(json!({
            "topic": topic,
            "state": name,
            "now_ms": now_ms(),
            "jobs": page.jobs.into_iter().map(|j| json!({"id": j.id, "at_ms": j.at_ms})).collect::<Vec<_>>(),
            "cursor": page.cursor,
        })));
    }
    let jobs = s.queue.peek(&topic, state, limit).await?;
    Ok(Json(json!({
        "topic": topic,
        "state": name,
        "now_ms": now_ms(),
        "jobs": jobs.into_iter().map(|j| json!({"id": j.id, "at_ms": j.at_ms})).collect::<Vec<_>>(),
    })))
}

fn limit_ok(limit: Option<usize>, default: usize) -> ApiResult<usize> {
    match limit.unwrap_or(default) {
        n @ 1..=1000 => Ok(n),
        n => Err(ApiError::invalid(format!("limit={n}: give 1 to 1000"))),
    }
}

async fn get_job(
    State(s): St,
    Path((topic, id)): Path<(String, String)>,
) -> ApiResult<Json<JobReply>> {
    topic_ok(&topic)?;
    id_ok(&id)?;
    match s.queue.get(&topic, &id).await? {
        Some(job) => Ok(Json(JobReply::from(&job))),
        None => Err(not_live(&topic, &id)),
    }
}

fn not_live(topic: &str, id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no live job {id:?} in topic {topic:?}: it never existed, is done, or was cancelled or purged"
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadQuery {
    offset: Option<usize>,
    limit: Option<usize>,
}

async fn dead_list(
    State(s): St,
    Path(topic): Path<String>,
    q: Result<Query<DeadQuery>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let q = query(q)?;
    let limit = limit_ok(q.limit, 20)?;
    let offset = q.offset.unwrap_or(0);
    if offset > MAX_OFFSET {
        return Err(ApiError::invalid(format!(
            "offset={offset}: give 0 to {MAX_OFFSET}"
        )));
    }
    let jobs: Vec<JobReply> = s
        .queue
        .dead_list(&topic, offset, limit)
        .await?
        .iter()
        .map(JobReply::from)
        .collect();
    let total = s.queue.stats(&topic).await?.dead;
    Ok(Json(json!({
        "topic": topic,
        "total": total,
        "offset": offset,
        "jobs": jobs,
    })))
}

async fn series(State(s): St, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    Ok(Json(json!({
        "topic": topic,
        "interval_ms": s.sampler.interval().as_millis() as u64,
        "window_ms": super::sampler::WINDOW.as_millis() as u64,
        "lateness_measured": s.sampler.has_lateness(),
        "points": s.sampler.series(&topic),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    minutes: Option<u32>,
}

/// Per-minute figures from the history in Redis (every host, kept 7 days).
async fn history(
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

// ---- changing -------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnqueueQuery {
    replace: Option<bool>,
}

/// The request's own W3C trace context (its `traceparent` and `tracestate`
/// headers), for the jobs that carry none; None when it has no valid
/// traceparent (an invalid one is ignored, as W3C Trace Context asks of a
/// receiver, and its tracestate with it).
fn header_trace(headers: &HeaderMap) -> Option<(String, Option<String>)> {
    let tp = headers.get("traceparent")?.to_str().ok()?.trim();
    punctual::validate_traceparent(tp).ok()?;
    let ts = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    let ts = (!ts.is_empty() && punctual::validate_tracestate(&ts).is_ok()).then_some(ts);
    Some((tp.to_string(), ts))
}

fn to_job(mut b: JobFields, trace: Option<&(String, Option<String>)>) -> Result<Job, String> {
    if let (None, None, Some((tp, ts))) = (&b.traceparent, &b.tracestate, trace) {
        b.traceparent = Some(tp.clone());
        b.tracestate = ts.clone();
    }
    let payload = b.payload();
    b.apply(Job::new(payload))
}

async fn enqueue(
    _: Authorized,
    State(s): St,
    Path(topic): Path<String>,
    q: Result<Query<EnqueueQuery>, QueryRejection>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    topic_ok(&topic)?;
    let q = query(q)?;
    let opts = EnqueueOptions::default().replace(q.replace.unwrap_or(false));
    let parsed: Value = body(&headers, bytes)?;
    let batch = parsed.is_array();
    let bodies: Vec<JobFields> = match parsed {
        // Parse arrays job by job, so an error names the job.
        Value::Array(items) => {
            if items.len() > MAX_BATCH_JOBS {
                return Err(ApiError::invalid(format!(
                    "the batch holds {} jobs, over the limit of {MAX_BATCH_JOBS}: split it; nothing was enqueued",
                    items.len()
                )));
            }
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    serde_json::from_value(item).map_err(|e| {
                        ApiError::invalid(format!("job {}: {e}; nothing was enqueued", i + 1))
                    })
                })
                .collect::<ApiResult<_>>()?
        }
        Value::Object(_) => vec![serde_json::from_value(parsed)
            .map_err(|e| ApiError::invalid(format!("{e}; nothing was enqueued")))?],
        _ => {
            return Err(ApiError::invalid(
                "the body must be a JSON object {\"payload\": ...} or an array of them; nothing was enqueued",
            ))
        }
    };
    let trace = header_trace(&headers);
    let mut jobs = Vec::with_capacity(bodies.len());
    for (i, b) in bodies.into_iter().enumerate() {
        let job = to_job(b, trace.as_ref()).map_err(|e| {
            if batch {
                ApiError::invalid(format!("job {}: {e}; nothing was enqueued", i + 1))
            } else {
                ApiError::invalid(format!("{e}; nothing was enqueued"))
            }
        })?;
        jobs.push(job);
    }
    if jobs.is_empty() {
        return Ok(Json(
            json!({"jobs": [], "created": 0, "duplicate": 0, "replaced": 0, "dead": 0}),
        )
        .into_response());
    }
    let results = s.queue.enqueue_with(&topic, jobs, &opts).await?;
    if !batch {
        let r = &results[0];
        let code = if r.status == EnqueueStatus::Created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        return Ok((code, Json(json!({"id": r.id, "status": r.status.as_str()}))).into_response());
    }
    let count = |st| results.iter().filter(|r| r.status == st).count();
    Ok(Json(json!({
        "jobs": results.iter().map(|r| json!({"id": r.id, "status": r.status.as_str()})).collect::<Vec<_>>(),
        "created": count(EnqueueStatus::Created),
        "duplicate": count(EnqueueStatus::Duplicate),
        "replaced": count(EnqueueStatus::Replaced),
        "dead": count(EnqueueStatus::Dead),
    }))
    .into_response())
}

async fn cancel(
    who: Authorized,
    State(s): St,
    Path((topic, id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    id_ok(&id)?;
    match s.queue.cancel(&topic, &id).await? {
        Some(was) => {
            who.record(&s.queue, "cancel", &topic, json!({"id": id, "was": was}))
                .await;
            Ok(Json(
                json!({"id": id, "cancelled": true, "was": was.as_str()}),
            ))
        }
        None => Err(not_live(&topic, &id)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RescheduleBody {
    #[serde(default, deserialize_with = "present")]
    delay_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    at_ms: Option<i64>,
}

async fn reschedule(
    _: Authorized,
    State(s): St,
    Path((topic, id)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    id_ok(&id)?;
    let b: RescheduleBody = body(&headers, bytes)?;
    let when = when_of(b.delay_ms, b.at.as_deref(), b.at_ms)
        .map_err(|e| ApiError::invalid(format!("{e}; nothing was changed")))?
        .ok_or_else(|| ApiError::invalid("give the new due time: {\"delay_ms\": N}, {\"at\": \"RFC 3339\"} or {\"at_ms\": N}; nothing was changed"))?;
    match s.queue.reschedule(&topic, &id, when).await? {
        None => Err(not_live(&topic, &id)),
        Some(was @ (JobState::Pool | JobState::Ready)) => {
            Ok(Json(json!({"id": id, "rescheduled": true, "was": was.as_str()})))
        }
        Some(JobState::Dead) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_waiting",
            format!("job {id:?} is dead: replay it first (POST /api/v1/topics/{topic}/dead/replay); nothing was changed"),
        )),
        Some(other) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_waiting",
            format!("job {id:?} is {other}: only a waiting job (pool or ready) can be rescheduled; cancel it or let it finish; nothing was changed"),
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadBody {
    #[serde(default, deserialize_with = "present")]
    ids: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    oldest: Option<usize>,
    #[serde(default, deserialize_with = "present")]
    all: Option<bool>,
    /// Replay only: jobs per period, as `--rate` ("100/s", "6000/m").
    #[serde(default, deserialize_with = "present")]
    rate: Option<String>,
    /// Replay only: spread the jobs evenly over this many ms.
    #[serde(default, deserialize_with = "present")]
    spread_ms: Option<u64>,
}

/// The pacing of a replay body: a rate, a spread or neither (due now).
fn pace(b: &DeadBody) -> ApiResult<ReplayPace> {
    match (&b.rate, b.spread_ms) {
        (Some(_), Some(_)) => Err(ApiError::invalid("give rate or spread_ms, not both")),
        (Some(r), None) => crate::input::parse_rate(r).map_err(ApiError::invalid),
        (None, Some(ms)) => {
            let p = ReplayPace::Spread(Duration::from_millis(ms));
            p.validate().map_err(|e| ApiError::invalid(e.to_string()))?;
            Ok(p)
        }
        (None, None) => Ok(ReplayPace::Now),
    }
}

fn selector(b: DeadBody, allow_oldest: bool) -> ApiResult<DeadSelector> {
    let what = if allow_oldest {
        "{\"ids\": [...]}, {\"oldest\": N} or {\"all\": true}"
    } else {
        "{\"ids\": [...]} or {\"all\": true}"
    };
    match (b.ids, b.oldest, b.all) {
        (Some(ids), None, None | Some(false)) => {
            if ids.is_empty() {
                return Err(ApiError::invalid("ids is empty: give at least one id"));
            }
            for id in &ids {
                id_ok(id)?;
            }
            Ok(DeadSelector::Ids(ids))
        }
        (None, Some(n), None | Some(false)) if allow_oldest => {
            if n == 0 {
                return Err(ApiError::invalid("oldest must be at least 1"));
            }
            Ok(DeadSelector::Oldest(n))
        }
        (None, None, Some(true)) => Ok(DeadSelector::All),
        _ => Err(ApiError::invalid(format!(
            "say which dead jobs: exactly one of {what}"
        ))),
    }
}

async fn dead_replay(
    who: Authorized,
    State(s): St,
    Path(topic): Path<String>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let b = body(&headers, bytes)?;
    let pace = pace(&b)?;
    let which = selector(b, true)?;
    let ids = s
        .queue
        .dead_replay_paced(&topic, which, pace, |_| {})
        .await?;
    let mut detail = counted("replayed", &ids);
    if let Some((key, value)) = pace.describe() {
        detail[key] = json!(value);
    }
    who.record(&s.queue, "dead.replay", &topic, detail).await;
    let mut out = json!({"replayed": ids.len(), "ids": ids});
    if pace != ReplayPace::Now {
        let last_due = pace.offset(ids.len().saturating_sub(1), ids.len());
        out["last_due_in_ms"] = json!(last_due.as_millis() as u64);
    }
    Ok(Json(out))
}

async fn dead_purge(
    who: Authorized,
    State(s): St,
    Path(topic): Path<String>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let b: DeadBody = body(&headers, bytes)?;
    if b.rate.is_some() || b.spread_ms.is_some() {
        return Err(ApiError::invalid(
            "purge takes no rate or spread_ms (they pace a replay)",
        ));
    }
    let which = selector(b, false)?;
    let all = matches!(which, DeadSelector::All);
    let n = s.queue.dead_purge(&topic, which).await?;
    who.record(
        &s.queue,
        "dead.purge",
        &topic,
        json!({"purged": n, "all": all}),
    )
    .await;
    Ok(Json(json!({"purged": n})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelPrefixBody {
    id_prefix: String,
    #[serde(default)]
    dry_run: bool,
}

async fn cancel_prefix(
    who: Authorized,
    State(s): St,
    Path(topic): Path<String>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let b: CancelPrefixBody = body(&headers, bytes)?;
    if b.id_prefix.is_empty() {
        return Err(ApiError::invalid(
            "id_prefix is empty: that would cancel every job of the topic; give a prefix",
        ));
    }
    let found = s
        .queue
        .cancel_prefix(&topic, &b.id_prefix, b.dry_run)
        .await?;
    if !b.dry_run {
        let ids: Vec<String> = found.iter().map(|(id, _)| id.clone()).collect();
        let mut detail = counted("cancelled", &ids);
        detail["id_prefix"] = json!(b.id_prefix);
        who.record(&s.queue, "cancel", &topic, detail).await;
    }
    Ok(Json(json!({
        "topic": topic,
        "id_prefix": b.id_prefix,
        "dry_run": b.dry_run,
        "matched": found.len(),
        "cancelled": if b.dry_run { 0 } else { found.len() },
        "jobs": found.iter().map(|(id, st)| json!({"id": id, "state": st.as_str()})).collect::<Vec<_>>(),
    })))
}

async fn delete_topic(
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

async fn pause(who: Authorized, State(s): St, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    s.queue.pause(&topic).await?;
    who.record(&s.queue, "pause", &topic, json!({})).await;
    Ok(Json(json!({"topic": topic, "paused": true})))
}

async fn resume(
    who: Authorized,
    State(s): St,
    Path(topic): Path<String>,
) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    s.queue.resume(&topic).await?;
    who.record(&s.queue, "resume", &topic, json!({})).await;
    Ok(Json(json!({"topic": topic, "paused": false})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_describes_every_route_and_error_code() {
        let doc = include_str!("../../../../docs/openapi.yaml");
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

    #[test]
    fn dead_selectors_need_exactly_one_form() {
        let b = |ids: Option<Vec<&str>>, oldest, all| DeadBody {
            ids: ids.map(|v| v.into_iter().map(String::from).collect()),
            oldest,
            all,
            rate: None,
            spread_ms: None,
        };
        assert!(selector(b(None, None, None), true).is_err());
        assert!(selector(b(Some(vec![]), None, None), true).is_err());
        assert!(selector(b(Some(vec!["a"]), Some(1), None), true).is_err());
        assert!(selector(b(None, Some(2), None), false).is_err());
        assert!(matches!(
            selector(b(None, None, Some(true)), false),
            Ok(DeadSelector::All)
        ));
        assert!(matches!(
            selector(b(None, Some(2), None), true),
            Ok(DeadSelector::Oldest(2))
        ));
    }
}
