//! The forms the CLI's commands, the HTTP API and `serve` share: how a
//! schedule is built from its fields, how limits, groups and schedules read
//! as JSON, and how a change is recorded in the audit trail. It depends on
//! none of them (only on the library, `exit` and `output`).

use std::time::Duration;

use anyhow::Result;
use punctual::internal::audit::{self, Entry};
use punctual::schedule::{CatchUp, Schedule, ScheduleInfo};
use punctual::{GroupHold, Limits, Queue};
use serde_json::{json, Value};

use crate::exit;
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
