//! `punctual cancel TOPIC (ID | --id-prefix P [--dry-run])`: cancel one job,
//! or every job whose id starts with a prefix.

use anyhow::Result;
use clap::{ArgGroup, Args};
use punctual::State;
use serde_json::json;

use super::job::JobRef;
use crate::context::Ctx;
use crate::exit;
use crate::output::{emit, emit_json};

/// How many ids the text output names.
const NAMED: usize = 20;

/// Arguments of `cancel`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["id", "id_prefix"])))]
#[command(after_help = "\
A running job is cancelled in flight: its lease is revoked (it is not
retried, reclaimed or dead), and the worker holding it stops its handler
(exec: SIGTERM, then SIGKILL after cancel_grace; http: the request dropped;
resident: a cancel message). The reply says whether it was cancelled while
waiting or while running; a job already done is reported not live (exit 1).

Examples:
  # one job
  punctual cancel orders order:10086
  # every job of customer 42, whatever its state: look first, then cancel
  punctual cancel orders --id-prefix cust:42: --dry-run
  punctual cancel orders --id-prefix cust:42:")]
pub(crate) struct CancelArgs {
    /// The topic.
    pub topic: String,

    /// The job id (as printed by `push`).
    #[arg(conflicts_with = "id_prefix")]
    pub id: Option<String>,

    /// Cancel every job whose id starts with this (not empty), in any
    /// state: pool, ready, running (its worker's ack or retry will be
    /// refused) and dead. Found by a cursor over each set (ZSCAN), so it
    /// scales; a job enqueued meanwhile may be left alone.
    #[arg(long, value_name = "P")]
    pub id_prefix: Option<String>,

    /// With --id-prefix: only count and show what would be cancelled.
    #[arg(long, requires = "id_prefix")]
    pub dry_run: bool,
}

/// Runs `cancel`.
pub(crate) async fn run(ctx: &Ctx, args: CancelArgs) -> Result<()> {
    let (Some(prefix), None) = (&args.id_prefix, &args.id) else {
        let id = args.id.expect("clap requires an id or a prefix");
        return super::job::cancel(
            ctx,
            JobRef {
                topic: args.topic,
                id,
            },
        )
        .await;
    };
    punctual::validate_topic(&args.topic)?;
    if prefix.is_empty() {
        return Err(exit::invalid(
            "--id-prefix is empty: that would cancel every job of the topic; give a prefix",
        ));
    }
    let queue = ctx.queue().await?;
    let found = queue
        .cancel_prefix(&args.topic, prefix, args.dry_run)
        .await?;
    if !args.dry_run {
        let ids: Vec<String> = found.iter().map(|(id, _)| id.clone()).collect();
        let mut detail = crate::forms::counted("cancelled", &ids);
        detail["id_prefix"] = json!(prefix);
        super::audit::cli(&queue, "cancel", &args.topic, detail).await;
    }
    let count = |s: State| found.iter().filter(|(_, st)| *st == s).count();
    if ctx.json() {
        let ids: Vec<_> = found
            .iter()
            .map(|(id, st)| json!({"id": id, "state": st}))
            .collect();
        return emit_json(&json!({
            "topic": args.topic,
            "id_prefix": prefix,
            "dry_run": args.dry_run,
            "matched": found.len(),
            "cancelled": if args.dry_run { 0 } else { found.len() },
            "pool": count(State::Pool),
            "ready": count(State::Ready),
            "running": count(State::Running),
            "dead": count(State::Dead),
            "jobs": ids,
        }));
    }
    let verb = if args.dry_run {
        "would cancel"
    } else {
        "cancelled"
    };
    let mut out = format!(
        "{verb} {} of topic {:?} with ids starting {:?} ({} pool, {} ready, {} running, {} dead)\n",
        super::plural(found.len(), "job", "jobs"),
        args.topic,
        prefix,
        count(State::Pool),
        count(State::Ready),
        count(State::Running),
        count(State::Dead)
    );
    for (id, st) in found.iter().take(NAMED) {
        out.push_str(&format!("  {id} ({st})\n"));
    }
    if found.len() > NAMED {
        out.push_str(&format!(
            "  ... and {} more (--json lists all)\n",
            found.len() - NAMED
        ));
    }
    emit(&out)
}
