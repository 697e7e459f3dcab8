//! The overdue signal and topic status: one judgement of a topic's stats
//! and the process registry, shared by `serve`'s and `api`'s `/healthz`
//! and `/metrics`, the API's topic JSON, the dashboard and `doctor`.

use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};
use punctual::registry::{ProcessInfo, Role};
use punctual::{Queue, TopicStats};
use serde::Serialize;

/// When a topic counts as in trouble.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Alerts {
    /// The most overdue job in the pool is past due by more than this (no
    /// scheduler, or one too slow). Default 5 s.
    pub overdue: Duration,
    /// The oldest ready job has waited more than this (no worker, or too
    /// few). Default 60 s.
    pub ready: Duration,
}

impl Default for Alerts {
    fn default() -> Self {
        Alerts {
            overdue: DEFAULT_OVERDUE_ALERT,
            ready: DEFAULT_READY_ALERT,
        }
    }
}

pub(crate) const DEFAULT_OVERDUE_ALERT: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_READY_ALERT: Duration = Duration::from_secs(60);

/// A topic's status and, when an alert is crossed, why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TopicHealth {
    pub topic: String,
    /// `active` (a live worker serves it, nothing overdue), `idle` (no
    /// jobs, no worker), `no consumer` (jobs and no live worker), `paused`,
    /// `overdue` (an alert is crossed).
    pub status: &'static str,
    /// Live workers serving it.
    pub workers: usize,
    /// Live schedulers serving it.
    pub schedulers: usize,
    /// One line per crossed alert: `topic orders: 12 jobs overdue by up
    /// to 7 s; no scheduler alive`.
    pub reasons: Vec<String>,
}

/// Seconds, as an operator reads them: `7 s`, `1.5 s`.
fn secs(ms: i64) -> String {
    if ms < 10_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} s", ms / 1000)
    }
}

fn alive(n: usize, what: &str) -> String {
    match n {
        0 => format!("no {what} alive"),
        1 => format!("1 {what} alive"),
        n => format!("{n} {what}s alive"),
    }
}

/// Judges one topic.
pub(crate) fn judge(s: &TopicStats, procs: &[ProcessInfo], alerts: &Alerts) -> TopicHealth {
    let count = |role| {
        procs
            .iter()
            .filter(|p| p.role == role && p.serves(&s.topic))
            .count()
    };
    let (workers, schedulers) = (count(Role::Worker), count(Role::Scheduler));
    let mut reasons = Vec::new();
    if let Some(ms) = s
        .overdue_ms
        .filter(|ms| *ms > alerts.overdue.as_millis() as i64)
    {
        reasons.push(format!(
            "topic {}: {} jobs overdue by up to {}; {}",
            s.topic,
            s.overdue,
            secs(ms),
            alive(schedulers, "scheduler")
        ));
    }
    if let Some(ms) = s
        .oldest_ready_ms
        .filter(|ms| !s.paused && *ms > alerts.ready.as_millis() as i64)
    {
        reasons.push(format!(
            "topic {}: {} jobs ready, the oldest waiting {}; {}",
            s.topic,
            s.ready,
            secs(ms),
            alive(workers, "worker")
        ));
    }
    let jobs = s.pool + s.ready + s.running;
    let status = if s.paused {
        "paused"
    } else if !reasons.is_empty() {
        "overdue"
    } else if workers > 0 {
        "active"
    } else if jobs > 0 {
        "no consumer"
    } else {
        "idle"
    };
    TopicHealth {
        topic: s.topic.clone(),
        status,
        workers,
        schedulers,
        reasons,
    }
}

/// Stats and health of `topics`, with one read of the registry.
pub(crate) async fn topics(
    queue: &Queue,
    topics: Vec<String>,
    alerts: &Alerts,
) -> punctual::Result<Vec<(TopicStats, TopicHealth)>> {
    let procs = queue.processes().await?;
    let stats: Vec<TopicStats> = stream::iter(topics)
        .map(|t| {
            let q = queue.clone();
            async move { q.stats(&t).await }
        })
        .buffered(16)
        .try_collect()
        .await?;
    Ok(stats
        .into_iter()
        .map(|s| {
            let h = judge(&s, &procs, alerts);
            (s, h)
        })
        .collect())
}

/// Sets the overdue gauges of a topic.
pub(crate) fn gauges(s: &TopicStats) {
    let t = s.topic.clone();
    metrics::gauge!("punctual_overdue_jobs", "topic" => t.clone()).set(s.overdue as f64);
    metrics::gauge!("punctual_overdue_seconds", "topic" => t.clone())
        .set(s.overdue_ms.unwrap_or(0) as f64 / 1000.0);
    metrics::gauge!("punctual_ready_oldest_seconds", "topic" => t)
        .set(s.oldest_ready_ms.unwrap_or(0) as f64 / 1000.0);
}

/// Sets `punctual_processes{role,topic}` for every role and each of
/// `topics` (0 where none is alive), from the registry.
pub(crate) fn process_gauges(procs: &[ProcessInfo], topics: &[String]) {
    for t in topics {
        for role in [
            Role::Supervisor,
            Role::Worker,
            Role::Scheduler,
            Role::Resident,
        ] {
            let n = procs
                .iter()
                .filter(|p| p.role == role && p.serves(t))
                .count();
            metrics::gauge!("punctual_processes", "role" => role.as_str(), "topic" => t.clone())
                .set(n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(topic: &str) -> TopicStats {
        let mut s = TopicStats::default();
        s.topic = topic.into();
        s
    }

    #[test]
    fn a_topic_is_active_only_with_a_live_worker() {
        let mut s = stats("orders");
        let a = Alerts::default();
        assert_eq!(judge(&s, &[], &a).status, "idle");
        s.ready = 3;
        assert_eq!(judge(&s, &[], &a).status, "no consumer");
        let w = ProcessInfo::new(Role::Worker, ["orders"]);
        assert_eq!(judge(&s, std::slice::from_ref(&w), &a).status, "active");
        let other = ProcessInfo::new(Role::Worker, ["mails"]);
        assert_eq!(judge(&s, &[other], &a).status, "no consumer");
        s.paused = true;
        assert_eq!(judge(&s, &[w], &a).status, "paused");
    }

    #[test]
    fn overdue_and_ready_alerts_name_the_topic_and_the_missing_role() {
        let mut s = stats("orders");
        s.pool = 12;
        s.overdue = 12;
        s.overdue_ms = Some(7_400);
        let h = judge(&s, &[], &Alerts::default());
        assert_eq!(h.status, "overdue");
        assert_eq!(
            h.reasons,
            ["topic orders: 12 jobs overdue by up to 7.4 s; no scheduler alive"]
        );
        s.overdue_ms = Some(4_000);
        assert!(judge(&s, &[], &Alerts::default()).reasons.is_empty());
        s.ready = 2;
        s.oldest_ready_ms = Some(75_000);
        let w = ProcessInfo::new(Role::Worker, ["orders"]);
        assert_eq!(
            judge(&s, &[w], &Alerts::default()).reasons,
            ["topic orders: 2 jobs ready, the oldest waiting 75 s; 1 worker alive"]
        );
    }
}
