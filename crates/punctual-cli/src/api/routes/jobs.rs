//! Job routes: peek and list, get one, enqueue, cancel, reschedule.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use punctual::{EnqueueOptions, EnqueueStatus, Job, State as JobState};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{body, id_ok, limit_ok, not_live, now_ms, query, topic_ok, St, MAX_BATCH_JOBS};
use crate::api::auth::Authorized;
use crate::api::error::{ApiError, ApiResult};
use crate::api::reply::JobReply;
use crate::forms::{present, when_of, JobFields};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PeekQuery {
    state: Option<String>,
    limit: Option<usize>,
    /// With `id_prefix` (may be empty) or `cursor`: a page of a listing by
    /// cursor (`Queue::list`) instead of the first jobs by time.
    id_prefix: Option<String>,
    cursor: Option<String>,
}

pub(super) async fn peek(
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

pub(super) async fn get_job(
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnqueueQuery {
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

pub(super) async fn enqueue(
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

pub(super) async fn cancel(
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
pub(super) struct RescheduleBody {
    #[serde(default, deserialize_with = "present")]
    delay_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    at_ms: Option<i64>,
}

pub(super) async fn reschedule(
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
