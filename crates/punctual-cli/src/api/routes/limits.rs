//! `GET` and `PUT /api/v1/topics/{topic}/limits`: a topic's rate and most
//! running count (docs/openapi.yaml, `Limits`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use punctual::{Limits, Rate};
use serde::Deserialize;
use serde_json::Value;

use super::{topic_ok, St, TopicChange};
use crate::api::error::{ApiError, ApiResult};
use crate::api::ApiState;
use crate::forms::limits_json;

/// The limits routes.
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route("/topics/{topic}/limits", get(read).put(write))
}

/// The body of `PUT` (here and for group limits): the limits to have (a
/// field left out or null: none).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitsBody {
    rate: Option<String>,
    burst: Option<u32>,
    max_running: Option<u32>,
}

impl LimitsBody {
    /// The limits, checked.
    pub(super) fn limits(&self) -> ApiResult<Limits> {
        let mut l = Limits::default();
        if let Some(r) = &self.rate {
            let r: Rate = r
                .parse()
                .map_err(|e: punctual::Error| ApiError::invalid(format!("rate: {e}")))?;
            l = l.rate(r);
        }
        if let Some(n) = self.burst {
            l = l.burst(n);
        }
        if let Some(n) = self.max_running {
            l = l.max_running(n);
        }
        l.validate().map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(l)
    }
}

fn reply(topic: &str, l: &Limits) -> Json<Value> {
    let mut v = limits_json(l);
    v["topic"] = Value::from(topic);
    Json(v)
}

async fn read(State(s): St, Path(topic): Path<String>) -> ApiResult<Json<Value>> {
    topic_ok(&topic)?;
    let l = s.queue.limits(&topic).await?;
    Ok(reply(&topic, &l))
}

async fn write(
    State(s): St,
    TopicChange { who, topic, body }: TopicChange<LimitsBody>,
) -> ApiResult<Json<Value>> {
    let l = body.limits()?;
    s.queue.set_limits(&topic, &l).await?;
    let l = s.queue.limits(&topic).await?;
    who.record(&s.queue, "topic.limits", &topic, limits_json(&l))
        .await;
    Ok(reply(&topic, &l))
}
