//! `punctual ps`: the processes in the registry, across every host.

use anyhow::Result;
use clap::Args;
use punctual::registry::ProcessInfo;

use crate::context::Ctx;
use crate::output::{emit, emit_json, span, Table};

/// Arguments of `ps`.
#[derive(Debug, Args)]
pub(crate) struct PsArgs {
    /// Only the processes serving this topic.
    #[arg(long, value_name = "TOPIC")]
    pub topic: Option<String>,
}

/// Examples shown by `punctual ps --help`.
pub(crate) const EXAMPLES: &str = "\
Examples:
  # every supervisor, worker, scheduler and resident program, on every host
  punctual ps

  # who serves topic orders, as JSON
  punctual ps --topic orders --json";

/// Runs `ps`.
pub(crate) async fn run(ctx: &Ctx, args: PsArgs) -> Result<()> {
    if let Some(t) = &args.topic {
        punctual::validate_topic(t)?;
    }
    let queue = ctx.queue().await?;
    let mut procs = queue.processes().await?;
    let now = queue.redis_now_ms().await?;
    if let Some(t) = &args.topic {
        procs.retain(|p| p.serves(t));
    }
    if ctx.json() {
        return emit_json(&serde_json::json!({ "now_ms": now, "processes": procs }));
    }
    if procs.is_empty() {
        eprintln!(
            "no live punctual process is registered under prefix {:?}{}",
            queue.prefix(),
            args.topic
                .as_deref()
                .map(|t| format!(" for topic {t}"))
                .unwrap_or_default()
        );
        return Ok(());
    }
    emit(&table(&procs, now))
}

fn table(procs: &[ProcessInfo], now: i64) -> String {
    let mut t = Table::new(&[
        "ROLE", "HOST", "PID", "TOPICS", "UP", "BEAT", "VERSION", "ID",
    ]);
    for p in procs {
        let ago = |ms: i64| span((now - ms).max(0) as u64);
        t.row(vec![
            p.role.to_string(),
            p.host.clone(),
            p.pid.to_string(),
            if p.topics.is_empty() {
                "-".into()
            } else {
                p.topics.join(",")
            },
            ago(p.started_ms),
            format!("{} ago", ago(p.beat_ms)),
            p.version.clone(),
            p.id.clone(),
        ]);
    }
    t.render()
}
