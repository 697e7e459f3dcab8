//! The API's own response bodies: what docs/openapi.yaml describes, field
//! by field. Routes build these from the library's types instead of
//! serializing those, so renaming a field of `punctual::JobInfo` (or
//! `TopicStats`, `ProcessInfo`, `History`, `audit::Entry`) cannot silently
//! change the API: the compiler points here, and `tests/openapi.rs` checks
//! the JSON against the schemas.

use std::collections::BTreeMap;

use punctual::internal::audit::Entry;
use punctual::registry::ProcessInfo;
use punctual::{History, JobInfo, Lateness, MinuteFigures, TopicStats};
use serde::Serialize;

use crate::health::TopicHealth;

/// A job (schema `JobInfo`): `GET /topics/T/jobs/ID` and the dead list.
#[derive(Debug, Serialize)]
pub(super) struct JobReply {
    id: String,
    state: &'static str,
    attempts: u32,
    max_attempts: u32,
    due_ms: i64,
    created_ms: i64,
    state_since_ms: Option<i64>,
    last_error: Option<String>,
    /// The payload as text, invalid UTF-8 replaced.
    payload: String,
    now_ms: i64,
    /// Per-job options, absent when the job has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl From<&JobInfo> for JobReply {
    fn from(j: &JobInfo) -> Self {
        JobReply {
            id: j.id.clone(),
            state: j.state.as_str(),
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            due_ms: j.due_ms,
            created_ms: j.created_ms,
            state_since_ms: j.state_since_ms,
            last_error: j.last_error.clone(),
            payload: String::from_utf8_lossy(&j.payload).into_owned(),
            now_ms: j.now_ms,
            deadline_ms: j.deadline_ms,
            timeout_ms: j.timeout_ms,
            group: j.group.clone(),
            traceparent: j.traceparent.clone(),
            tracestate: j.tracestate.clone(),
        }
    }
}

/// A topic's stats with its health (schema `TopicStats`).
#[derive(Debug, Serialize)]
pub(super) struct TopicReply {
    topic: String,
    partitions: u32,
    pool: u64,
    ready: u64,
    running: u64,
    waiting: u64,
    dead: u64,
    paused: bool,
    next_due_in_ms: Option<i64>,
    oldest_ready_ms: Option<i64>,
    overdue: u64,
    overdue_ms: Option<i64>,
    counters: BTreeMap<String, u64>,
    limits: serde_json::Value,
    limited: Option<&'static str>,
    status: &'static str,
    workers: usize,
    schedulers: usize,
    reasons: Vec<String>,
}

impl TopicReply {
    /// The stats of a topic and how healthy it is.
    pub(super) fn new(s: &TopicStats, h: &TopicHealth) -> Self {
        TopicReply {
            topic: s.topic.clone(),
            partitions: s.partitions,
            pool: s.pool,
            ready: s.ready,
            running: s.running,
            waiting: s.waiting,
            dead: s.dead,
            paused: s.paused,
            next_due_in_ms: s.next_due_in_ms,
            oldest_ready_ms: s.oldest_ready_ms,
            overdue: s.overdue,
            overdue_ms: s.overdue_ms,
            counters: s.counters.clone(),
            limits: crate::forms::limits_json(&s.limits),
            limited: s.limited.map(|l| l.as_str()),
            status: h.status,
            workers: h.workers,
            schedulers: h.schedulers,
            reasons: h.reasons.clone(),
        }
    }
}

/// A live process of the registry (schema `ProcessInfo`).
#[derive(Debug, Serialize)]
pub(super) struct ProcessReply {
    id: String,
    host: String,
    pid: u32,
    role: &'static str,
    topics: Vec<String>,
    version: String,
    started_ms: i64,
    beat_ms: i64,
    beat_period_ms: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    waiting: BTreeMap<String, u64>,
}

impl From<&ProcessInfo> for ProcessReply {
    fn from(p: &ProcessInfo) -> Self {
        ProcessReply {
            id: p.id.clone(),
            host: p.host.clone(),
            pid: p.pid,
            role: p.role.as_str(),
            topics: p.topics.clone(),
            version: p.version.clone(),
            started_ms: p.started_ms,
            beat_ms: p.beat_ms,
            beat_period_ms: p.beat_period_ms,
            waiting: p.waiting.clone(),
        }
    }
}

/// Per-minute figures of a topic (schema `History`).
#[derive(Debug, Serialize)]
pub(super) struct HistoryReply {
    topic: String,
    partitions: u32,
    now_ms: i64,
    bucket_bounds_ms: Vec<u64>,
    minutes: Vec<MinuteReply>,
}

/// One minute of a history (schema `HistoryMinute`).
#[derive(Debug, Serialize)]
struct MinuteReply {
    minute: i64,
    partial: bool,
    start_ms: Option<i64>,
    counters: Option<BTreeMap<String, u64>>,
    lateness: LatenessReply,
}

/// How late the jobs started in a minute were.
#[derive(Debug, Serialize)]
struct LatenessReply {
    count: u64,
    sum_us: u64,
    max_us: u64,
    buckets: [u64; 7],
}

impl From<&History> for HistoryReply {
    fn from(h: &History) -> Self {
        HistoryReply {
            topic: h.topic.clone(),
            partitions: h.partitions,
            now_ms: h.now_ms,
            bucket_bounds_ms: h.bucket_bounds_ms.clone(),
            minutes: h.minutes.iter().map(MinuteReply::from).collect(),
        }
    }
}

impl From<&MinuteFigures> for MinuteReply {
    fn from(m: &MinuteFigures) -> Self {
        MinuteReply {
            minute: m.minute,
            partial: m.partial,
            start_ms: m.start_ms,
            counters: m.counters.clone(),
            lateness: LatenessReply::from(&m.lateness),
        }
    }
}

impl From<&Lateness> for LatenessReply {
    fn from(l: &Lateness) -> Self {
        LatenessReply {
            count: l.count,
            sum_us: l.sum_us,
            max_us: l.max_us,
            buckets: l.buckets,
        }
    }
}

/// An entry of the audit trail (schema `AuditEntry`), with its time also
/// as RFC 3339.
#[derive(Debug, Serialize)]
pub(super) struct AuditEntryReply {
    at_ms: i64,
    at: String,
    who: String,
    from: String,
    action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    topic: Option<String>,
    detail: serde_json::Value,
}

impl From<&Entry> for AuditEntryReply {
    fn from(e: &Entry) -> Self {
        AuditEntryReply {
            at_ms: e.at_ms,
            at: crate::output::time(e.at_ms),
            who: e.who.clone(),
            from: e.from.clone(),
            action: e.action.clone(),
            topic: e.topic.clone(),
            detail: e.detail.clone(),
        }
    }
}
