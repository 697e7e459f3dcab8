//! `punctual audit`: the audit trail (who changed what, and when), and
//! [`record`], the one call the other commands make after a change.

use anyhow::Result;
use clap::Args;
use punctual::internal::audit::{self, Entry, MAX_ENTRIES};
use punctual::Queue;
use serde_json::Value;

use crate::context::Ctx;
use crate::forms::record;
use crate::output::{emit, emit_json, one_line, time, Table};

/// Arguments of `audit`.
#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Show the newest N entries (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub limit: u16,
}

/// Who runs this command: `cli`, from the OS user's name (else `uid N`).
pub(crate) fn cli_entry(action: &str, topic: &str, detail: Value) -> Entry {
    Entry::new("cli", os_user(), action)
        .topic(topic)
        .detail(detail)
}

fn os_user() -> String {
    let uid = nix::unistd::Uid::current();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => u.name,
        _ => format!("uid {uid}"),
    }
}

/// Records a change made through the CLI (see [`record`]).
pub(crate) async fn cli(queue: &Queue, action: &str, topic: &str, detail: Value) {
    record(queue, cli_entry(action, topic, detail)).await;
}

/// An entry as JSON, with its time also as RFC 3339.
pub(crate) fn entry_json(e: &Entry) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if let Value::Object(o) = &mut v {
        o.insert("at".into(), time(e.at_ms).into());
    }
    v
}

/// Runs `audit`.
pub(crate) async fn run(ctx: &Ctx, args: AuditArgs) -> Result<()> {
    let queue = ctx.queue().await?;
    let limit = usize::from(args.limit).min(MAX_ENTRIES);
    let trail = audit::read(&queue, limit).await?;
    if trail.unreadable > 0 {
        eprintln!(
            "punctual: warning: skipped {} items of {} that are not audit entries",
            trail.unreadable,
            audit::key(queue.prefix())
        );
    }
    if ctx.json() {
        let list: Vec<Value> = trail.entries.iter().map(entry_json).collect();
        return emit_json(&list);
    }
    if trail.entries.is_empty() {
        eprintln!(
            "punctual: the audit trail is empty (replay, purge, cancel, pause, resume and imports are recorded)"
        );
        return Ok(());
    }
    let mut t = Table::new(&["WHEN", "WHO", "ACTION", "TOPIC", "DETAIL"]);
    for e in &trail.entries {
        t.row(vec![
            time(e.at_ms),
            format!("{} ({})", e.who, e.from),
            e.action.clone(),
            e.topic.clone().unwrap_or_else(|| "-".into()),
            one_line(&detail_text(&e.detail), 60),
        ]);
    }
    let mut out = t.render();
    out.push_str(&format!(
        "{}, newest first (the trail keeps {MAX_ENTRIES}; --limit N shows more)\n",
        super::plural(trail.entries.len(), "entry", "entries")
    ));
    emit(&out)
}

/// `key=value` pairs of a detail object, or its JSON.
fn detail_text(v: &Value) -> String {
    match v {
        Value::Object(o) if o.is_empty() => "-".into(),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}
