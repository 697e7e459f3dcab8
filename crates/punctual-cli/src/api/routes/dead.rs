//! Dead-letter routes: list, replay (now or paced), purge.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use punctual::{DeadSelector, ReplayPace};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{id_ok, limit_ok, query, topic_ok, St, TopicChange};
use crate::api::error::{ApiError, ApiResult};
use crate::api::reply::JobReply;
use crate::forms::{counted, present};

/// Largest offset into the dead list.
const MAX_OFFSET: usize = 1_000_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeadQuery {
    offset: Option<usize>,
    limit: Option<usize>,
}

pub(super) async fn dead_list(
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeadBody {
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

pub(super) async fn dead_replay(
    State(s): St,
    TopicChange { who, topic, body }: TopicChange<DeadBody>,
) -> ApiResult<Json<Value>> {
    let pace = pace(&body)?;
    let which = selector(body, true)?;
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

pub(super) async fn dead_purge(
    State(s): St,
    TopicChange { who, topic, body }: TopicChange<DeadBody>,
) -> ApiResult<Json<Value>> {
    if body.rate.is_some() || body.spread_ms.is_some() {
        return Err(ApiError::invalid(
            "purge takes no rate or spread_ms (they pace a replay)",
        ));
    }
    let which = selector(body, false)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
