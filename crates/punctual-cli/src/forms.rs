//! The forms the CLI's commands, the HTTP API and `serve` share: how a
//! schedule is built from its fields, how limits, groups and schedules read
//! as JSON, and how a change is recorded in the audit trail. It depends on
//! none of them (only on the library, `exit` and `output`).

use std::time::{Duration, UNIX_EPOCH};

use anyhow::Result;
use punctual::internal::audit::{self, Entry};
use punctual::schedule::{CatchUp, Schedule, ScheduleInfo};
use punctual::{GroupHold, Job, Limits, Queue, When};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::exit;
use crate::input::parse_time;
use crate::output::time;

/// `{"<what>": n, "ids": [the first 100]}`: the detail of a change to many jobs.
pub(crate) fn counted(what: &str, ids: &[String]) -> Value {
    serde_json::json!({ what: ids.len(), "ids": some_ids(ids) })
}

/// Appends `entry` to the audit trail. A failure is a warning on stderr
/// (or in the log): the change itself is done and its result stands.
pub(crate) async fn record(queue: &Queue, entry: Entry) {
    if let Err(e) = audit::append(queue, &entry).await {
        tracing::warn!(
            action = %entry.action,
            topic = entry.topic.as_deref().unwrap_or("-"),
            "the change was made, but the audit trail could not record it: {e:#}"
        );
    }
}

/// The names of `topic`'s schedules, read before a deletion (none when
/// they cannot be read: the deletion reports its own errors).
pub(crate) async fn schedule_names(queue: &punctual::Queue, topic: &str) -> Vec<String> {
    match queue.schedules(topic).await {
        Ok(all) => all.into_iter().map(|i| i.schedule.name).collect(),
        Err(_) => Vec::new(),
    }
}

/// A hold as JSON: null, `{"until_ms": T}` or `{"running_ends": true}`.
fn held_json(h: Option<GroupHold>) -> serde_json::Value {
    match h {
        Some(GroupHold::Until(ms)) => json!({"until_ms": ms}),
        Some(GroupHold::RunningEnds) => json!({"running_ends": true}),
        _ => serde_json::Value::Null,
    }
}

/// The groups as JSON (the CLI's and the API's form).
pub(crate) fn groups_json(topic: &str, groups: &[punctual::GroupInfo]) -> serde_json::Value {
    let list: Vec<_> = groups
        .iter()
        .map(|g| {
            json!({
                "group": g.group,
                "indexed": g.indexed,
                "vtime": g.vtime,
                "running": g.running,
                "held": held_json(g.held),
                "limits": limits_json(&g.limits),
            })
        })
        .collect();
    json!({"topic": topic, "groups": list})
}

/// The limits as JSON (the CLI's and the API's form): `rate` as
/// `N/PERIOD` text, `burst` and `max_running` numbers; null when unset.
pub(crate) fn limits_json(l: &Limits) -> serde_json::Value {
    json!({
        "rate": l.rate.map(|r| r.to_string()),
        "burst": l.burst,
        "max_running": l.max_running,
    })
}

/// Builds a schedule from the CLI's (and the config file's and the API's)
/// fields, checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_schedule(
    name: &str,
    cron: Option<&str>,
    every: Option<Duration>,
    tz: &str,
    payload: &str,
    catch_up: &str,
    spread: Option<Duration>,
    options: &str,
) -> Result<Schedule> {
    let s = match (cron, every) {
        (Some(c), None) => Schedule::cron(name, c).tz(tz),
        (None, Some(d)) => {
            if tz != "UTC" {
                return Err(exit::invalid(format!(
                    "schedule {name:?}: a time zone applies to cron schedules only"
                )));
            }
            Schedule::every(name, d)
        }
        _ => {
            return Err(exit::invalid(format!(
                "schedule {name:?}: give exactly one of cron and every"
            )))
        }
    };
    let policy: CatchUp = catch_up.parse()?;
    let mut s = s.payload(payload).options(options).catch_up(policy);
    match (policy, spread) {
        (CatchUp::Spread, Some(w)) => s = s.spread(w),
        (CatchUp::Spread, None) => {
            return Err(exit::invalid(format!(
            "schedule {name:?}: catch-up spread needs a window (--spread 10m, or spread = \"10m\")"
        )))
        }
        (_, Some(_)) => {
            return Err(exit::invalid(format!(
                "schedule {name:?}: a spread window needs catch-up spread"
            )))
        }
        _ => {}
    }
    s.validate()?;
    Ok(s)
}

/// A schedule as JSON for the CLI and the API: the stored fields, the
/// watermark and the next occurrence (also as RFC 3339).
pub(crate) fn info_json(topic: &str, i: &ScheduleInfo) -> serde_json::Value {
    let mut v = serde_json::to_value(i).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("topic".into(), json!(topic));
        o.insert("next".into(), json!(i.next_ms.map(time)));
    }
    v
}

/// How many ids an entry lists (a replay of every dead job may be huge).
const IDS_LISTED: usize = 100;

/// The first [`IDS_LISTED`] ids, as a JSON array.
fn some_ids(ids: &[String]) -> Value {
    ids.iter()
        .take(IDS_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .into()
}

/// For optional body fields: absent is `None`, but an explicit `null` is
/// refused like any other value of the wrong type.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// Reads a `when` from the three ways to give one; at most one may be set.
pub(crate) fn when_of(
    delay_ms: Option<i64>,
    at: Option<&str>,
    at_ms: Option<i64>,
) -> Result<Option<When>, String> {
    match (delay_ms, at, at_ms) {
        (None, None, None) => Ok(None),
        (Some(ms), None, None) if ms < 0 => Err(format!(
            "delay_ms is {ms}: delays may not be negative (0 means now)"
        )),
        (Some(ms), None, None) => Ok(Some(When::Delay(Duration::from_millis(ms as u64)))),
        (None, Some(t), None) => parse_time(t)
            .map(|t| Some(When::At(t)))
            .map_err(|e| format!("at: {e}")),
        (None, None, Some(ms)) if ms < 0 => Err(format!("at_ms is {ms}: give epoch milliseconds")),
        (None, None, Some(ms)) => Ok(Some(When::At(
            UNIX_EPOCH + Duration::from_millis(ms as u64),
        ))),
        _ => Err("give at most one of delay_ms, at and at_ms".into()),
    }
}

/// One job as JSON: a job of an API enqueue request, a line of `push
/// --batch`. Each field is optional but the payload; an explicit `null` is
/// refused like any other value of the wrong type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobFields {
    /// A string is sent as its text, any other JSON value as its JSON text.
    payload: Value,
    #[serde(default, deserialize_with = "present")]
    delay_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    at_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    max_attempts: Option<u32>,
    #[serde(default, deserialize_with = "present")]
    backoff_ms: Option<Vec<u64>>,
    #[serde(default, deserialize_with = "present")]
    expire_ms: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    group: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub traceparent: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub tracestate: Option<String>,
}

impl JobFields {
    /// The fields, as the error after a line that is not such an object
    /// says.
    pub(crate) const SHAPE: &'static str = "{\"payload\": ..., \"delay_ms\": N, \"at\": \"RFC3339\", \"at_ms\": N, \"id\": \"...\", \"max_attempts\": N, \"backoff_ms\": [N, ...], \"expire_ms\": N, \"timeout_ms\": N, \"group\": \"...\", \"traceparent\": \"...\", \"tracestate\": \"...\"}";

    /// The payload's bytes (taken out): a string's text, any other value's
    /// JSON text.
    pub(crate) fn payload(&mut self) -> Vec<u8> {
        match std::mem::take(&mut self.payload) {
            Value::String(s) => s.into_bytes(),
            other => other.to_string().into_bytes(),
        }
    }

    /// `job` (made from the payload, with any defaults of the caller) with
    /// these fields set over it, checked.
    pub(crate) fn apply(self, mut job: Job) -> std::result::Result<Job, String> {
        if let Some(w) = when_of(self.delay_ms, self.at.as_deref(), self.at_ms)? {
            job = job.when(w);
        }
        if let Some(id) = self.id {
            job = job.id(id);
        }
        if let Some(n) = self.max_attempts {
            job = job.max_attempts(n);
        }
        if let Some(l) = self.backoff_ms {
            if l.is_empty() {
                return Err("backoff_ms may not be empty (use [0] for no wait)".into());
            }
            job = job.backoff(l.into_iter().map(Duration::from_millis).collect());
        }
        if let Some(ms) = self.expire_ms {
            job = job.expire(Duration::from_millis(ms));
        }
        if let Some(ms) = self.timeout_ms {
            job = job.timeout(Duration::from_millis(ms));
        }
        if let Some(g) = self.group {
            job = job.group(g);
        }
        if let Some(tp) = self.traceparent {
            job = job.traceparent(tp);
        }
        if let Some(ts) = self.tracestate {
            job = job.tracestate(ts);
        }
        job.validate().map_err(|e| e.to_string())?;
        Ok(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_takes_one_form_and_refuses_negative_delays() {
        assert_eq!(when_of(None, None, None), Ok(None));
        assert_eq!(
            when_of(Some(1500), None, None),
            Ok(Some(When::Delay(Duration::from_millis(1500))))
        );
        assert!(when_of(Some(-1), None, None)
            .unwrap_err()
            .contains("negative"));
        assert!(when_of(Some(1), None, Some(2))
            .unwrap_err()
            .contains("at most one"));
        assert!(when_of(None, Some("soon"), None)
            .unwrap_err()
            .starts_with("at: "));
    }

    #[test]
    fn a_job_line_takes_every_field_and_refuses_null() {
        let mut f: JobFields = serde_json::from_str(
            r#"{"payload": {"a": 1}, "at_ms": 4102444800000, "backoff_ms": [0, 500], "group": "g"}"#,
        )
        .unwrap();
        assert_eq!(f.payload(), br#"{"a":1}"#);
        let job = format!("{:?}", f.apply(Job::new("x")).unwrap());
        assert!(job.contains(r#""g""#) && job.contains("500ms"), "{job}");
        assert!(
            serde_json::from_str::<JobFields>(r#"{"payload": "x", "delay_ms": null}"#).is_err()
        );
        let empty: JobFields =
            serde_json::from_str(r#"{"payload": "x", "backoff_ms": []}"#).unwrap();
        assert!(empty
            .apply(Job::new("x"))
            .unwrap_err()
            .contains("backoff_ms"));
    }
}
