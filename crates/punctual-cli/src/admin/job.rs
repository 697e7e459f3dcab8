//! Commands on one job by id: `get`, `cancel`, `reschedule`.

use std::fmt::Write as _;

use anyhow::Result;
use punctual::{JobInfo, State};
use serde_json::{json, Map, Value};

use crate::context::Ctx;
use crate::exit;
use crate::input::{parse_duration, parse_time};
use crate::output::{
    emit, emit_json, one_line, payload_json, payload_text, time, time_and_relative,
};
use clap::Args;
use std::time::{Duration, SystemTime};

/// A job by topic and id.
#[derive(Debug, Args)]
pub(crate) struct JobRef {
    /// The topic.
    pub topic: String,
    /// The job id (as printed by `push`).
    pub id: String,
}

/// Arguments of `reschedule`.
#[derive(Debug, Args)]
pub(crate) struct RescheduleArgs {
    #[command(flatten)]
    pub job: JobRef,

    #[command(flatten)]
    pub when: RequiredWhen,
}

/// Like [`super::push::WhenArgs`], but one of the two is required.
#[derive(Debug, Args, Clone)]
#[group(required = true, multiple = false)]
pub(crate) struct RequiredWhen {
    /// New due time: this long from now, by Redis's clock (0s: due now).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub delay: Option<Duration>,

    /// New due time: this time (RFC 3339, e.g. 2030-01-01T09:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    pub at: Option<SystemTime>,
}

impl RequiredWhen {
    /// The library's `When`.
    pub(crate) fn when(&self) -> punctual::When {
        let when = super::push::WhenArgs {
            delay: self.delay,
            at: self.at,
        };
        when.when().unwrap_or(punctual::When::Now)
    }
}

/// How much of a payload `get` shows outside `--json`.
const PAYLOAD_PREVIEW: usize = 500;

fn validate(job: &JobRef) -> Result<()> {
    punctual::validate_topic(&job.topic)?;
    punctual::validate_id(&job.id)?;
    Ok(())
}

fn not_live(job: &JobRef) -> anyhow::Error {
    exit::problem(format!(
        "no live job {:?} in topic {:?}: it is done, cancelled, or was never pushed (check the topic, and --prefix)",
        job.id, job.topic
    ))
}

/// The full JSON view of a job.
pub(crate) fn job_json(topic: &str, info: &JobInfo) -> Value {
    let mut o = Map::new();
    o.insert("topic".into(), topic.into());
    o.insert("id".into(), info.id.as_str().into());
    o.insert("state".into(), info.state.as_str().into());
    o.insert("attempts".into(), info.attempts.into());
    o.insert("max_attempts".into(), info.max_attempts.into());
    o.insert("due".into(), time(info.due_ms).into());
    o.insert("due_ms".into(), info.due_ms.into());
    o.insert("created".into(), time(info.created_ms).into());
    o.insert("created_ms".into(), info.created_ms.into());
    let (since_name, since_ms) = match info.state {
        State::Running => ("lease_until", info.state_since_ms),
        State::Dead => ("died", info.state_since_ms),
        _ => ("", None),
    };
    if let Some(ms) = since_ms {
        o.insert(since_name.into(), time(ms).into());
        o.insert(format!("{since_name}_ms"), ms.into());
    }
    o.insert("last_error".into(), info.last_error.clone().into());
    options_json(info, &mut o);
    payload_json(&info.payload, &mut o);
    o.insert("now_ms".into(), info.now_ms.into());
    Value::Object(o)
}

/// The job's options (PROTOCOL.md "Per-job options"), those it has:
/// `deadline` and `deadline_ms` (expiry), `timeout_ms`, `group`,
/// `traceparent`, `tracestate`.
pub(crate) fn options_json(info: &JobInfo, o: &mut Map<String, Value>) {
    if let Some(ms) = info.deadline_ms {
        o.insert("deadline".into(), time(ms).into());
        o.insert("deadline_ms".into(), ms.into());
    }
    if let Some(ms) = info.timeout_ms {
        o.insert("timeout_ms".into(), ms.into());
    }
    if let Some(g) = &info.group {
        o.insert("group".into(), g.as_str().into());
    }
    if let Some(tp) = &info.traceparent {
        o.insert("traceparent".into(), tp.as_str().into());
    }
    if let Some(ts) = &info.tracestate {
        o.insert("tracestate".into(), ts.as_str().into());
    }
}

/// Runs `get`.
pub(crate) async fn get(ctx: &Ctx, job: JobRef) -> Result<()> {
    validate(&job)?;
    let queue = ctx.queue().await?;
    let info = queue
        .get(&job.topic, &job.id)
        .await?
        .ok_or_else(|| not_live(&job))?;
    if ctx.json() {
        return emit_json(&job_json(&job.topic, &info));
    }
    let now = info.now_ms;
    let mut out = String::new();
    let state = match info.state {
        State::Orphan => "orphan (a record in no set: run `punctual check`)".to_string(),
        s => s.to_string(),
    };
    writeln!(out, "topic:       {}", job.topic)?;
    writeln!(out, "id:          {}", info.id)?;
    writeln!(out, "state:       {state}")?;
    writeln!(out, "due:         {}", time_and_relative(info.due_ms, now))?;
    match (info.state, info.state_since_ms) {
        (State::Running, Some(ms)) => writeln!(out, "lease until: {}", time_and_relative(ms, now))?,
        (State::Dead, Some(ms)) => writeln!(out, "died:        {}", time_and_relative(ms, now))?,
        _ => {}
    }
    writeln!(
        out,
        "attempts:    {} of {}",
        info.attempts, info.max_attempts
    )?;
    writeln!(
        out,
        "created:     {}",
        time_and_relative(info.created_ms, now)
    )?;
    if let Some(ms) = info.deadline_ms {
        writeln!(
            out,
            "expires:     {} (may start until then)",
            time_and_relative(ms, now)
        )?;
    }
    if let Some(ms) = info.timeout_ms {
        writeln!(out, "timeout:     {ms} ms")?;
    }
    if let Some(g) = &info.group {
        writeln!(out, "group:       {g}")?;
    }
    if let Some(tp) = &info.traceparent {
        writeln!(out, "traceparent: {tp}")?;
    }
    if let Some(ts) = &info.tracestate {
        writeln!(out, "tracestate:  {}", one_line(ts, PAYLOAD_PREVIEW))?;
    }
    let err = info.last_error.as_deref().unwrap_or("-");
    writeln!(out, "last error:  {}", one_line(err, PAYLOAD_PREVIEW))?;
    let text = payload_text(&info.payload);
    let shown = one_line(&text, PAYLOAD_PREVIEW);
    let size = super::plural(info.payload.len(), "byte", "bytes");
    let note = if text.chars().count() > PAYLOAD_PREVIEW {
        format!("  ({size}; --json shows all)")
    } else {
        format!("  ({size})")
    };
    writeln!(out, "payload:     {shown}{note}")?;
    emit(&out)
}

/// Runs `cancel`.
pub(crate) async fn cancel(ctx: &Ctx, job: JobRef) -> Result<()> {
    validate(&job)?;
    let queue = ctx.queue().await?;
    let was = queue
        .cancel(&job.topic, &job.id)
        .await?
        .ok_or_else(|| not_live(&job))?;
    super::audit::cli(
        &queue,
        "cancel",
        &job.topic,
        json!({"id": job.id, "was": was}),
    )
    .await;
    if ctx.json() {
        return emit_json(&json!({
            "topic": job.topic, "id": job.id, "cancelled": true, "was": was,
        }));
    }
    let (when, note) = match was {
        State::Running => (" while running", ": its lease is revoked (no ack, retry or reclaim), and the worker holding it was told to stop its handler"),
        State::Pool | State::Ready => (" while waiting", ""),
        _ => ("", ""),
    };
    emit(&format!("cancelled {}{when} (was {was}){note}\n", job.id))
}

/// Runs `reschedule`.
pub(crate) async fn reschedule(ctx: &Ctx, args: RescheduleArgs) -> Result<()> {
    let job = &args.job;
    validate(job)?;
    let queue = ctx.queue().await?;
    let was = queue
        .reschedule(&job.topic, &job.id, args.when.when())
        .await?
        .ok_or_else(|| not_live(job))?;
    match was {
        State::Pool | State::Ready => {}
        State::Running => {
            return Err(exit::problem(format!(
                "job {:?} is running (leased by a worker) and was not rescheduled; wait until it is done or retried, or cancel it",
                job.id
            )))
        }
        State::Dead => {
            return Err(exit::problem(format!(
                "job {:?} is dead and was not rescheduled; replay it first with `punctual dead replay {} {}` (it becomes due now), then reschedule it",
                job.id, job.topic, job.id
            )))
        }
        other => {
            return Err(exit::problem(format!(
                "job {:?} is {other} and was not rescheduled; run `punctual check {}`",
                job.id, job.topic
            )))
        }
    }
    // The script does not return the new due time: read it back (the job
    // may have moved on meanwhile, which the state shows).
    let now = queue.get(&job.topic, &job.id).await?;
    if ctx.json() {
        let mut v = json!({"topic": job.topic, "id": job.id, "rescheduled": true, "was": was});
        if let Some(info) = &now {
            v["state"] = info.state.as_str().into();
            v["due"] = time(info.due_ms).into();
            v["due_ms"] = info.due_ms.into();
        }
        return emit_json(&v);
    }
    match now {
        Some(info) => emit(&format!(
            "rescheduled {} (was {was}): due {}\n",
            job.id,
            time_and_relative(info.due_ms, info.now_ms)
        )),
        None => emit(&format!(
            "rescheduled {} (was {was}); it is no longer live (already done or cancelled)\n",
            job.id
        )),
    }
}
