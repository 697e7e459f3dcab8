//! `punctual check [TOPIC]`: the one-state invariant on a live Redis.

use anyhow::Result;
use punctual::Violation;
use serde_json::json;

use crate::context::Ctx;
use crate::exit;
use crate::output::{emit, emit_json, Table};
use clap::Args;

/// Arguments of `check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Only this topic (default: every known topic).
    pub topic: Option<String>,
}

/// At most this many keys are examined looking for unlisted topics.
const UNLISTED_SCAN_LIMIT: u64 = 1_000_000;

/// Runs `check`; exits 1 (a problem) when any violation is found.
pub(crate) async fn run(ctx: &Ctx, args: CheckArgs) -> Result<()> {
    if let Some(t) = &args.topic {
        punctual::validate_topic(t)?;
    }
    let queue = ctx.queue().await?;
    let mut topics = super::topics_or_all(&queue, args.topic.as_deref()).await?;
    let mut violations: Vec<Violation> = Vec::new();
    if args.topic.is_none() {
        // Topics with jobs missing from the set of known topics (a producer
        // stopped between its enqueue and the SADD): checked too, and
        // reported, since `topics`, `stats` and the dashboard miss them.
        let unlisted = queue.unlisted_topics(UNLISTED_SCAN_LIMIT).await?;
        if !unlisted.complete {
            tracing::warn!(
                scanned = unlisted.scanned,
                "stopped looking for unlisted topics after {UNLISTED_SCAN_LIMIT} keys"
            );
        }
        for t in unlisted.topics {
            violations.push(Violation {
                topic: t.clone(),
                id: String::new(),
                problem: "unlisted topic: holds jobs but is not in the set of known topics (`topics`, `stats` and the dashboard miss it; an enqueue to it or `punctual serve` with it configured lists it)".into(),
            });
            topics.push(t);
        }
    }
    for t in &topics {
        tracing::debug!(topic = %t, "checking");
        violations.extend(queue.check(t).await?);
    }
    let bad_topics = {
        let mut v: Vec<&str> = violations.iter().map(|v| v.topic.as_str()).collect();
        v.dedup();
        v.len()
    };
    if ctx.json() {
        emit_json(&json!({
            "topics": topics, "violations": violations,
        }))?;
    } else if topics.is_empty() {
        eprintln!("{}", super::no_topics_note(ctx));
    } else if violations.is_empty() {
        emit(&format!(
            "checked {}: no violations\n",
            super::plural(topics.len(), "topic", "topics")
        ))?;
    } else {
        let mut t = Table::new(&["TOPIC", "ID", "PROBLEM"]);
        for v in &violations {
            t.row(vec![v.topic.clone(), v.id.clone(), v.problem.clone()]);
        }
        emit(&t.render())?;
    }
    if !violations.is_empty() {
        return Err(exit::problem(format!(
            "found {} in {} of {} checked: each job must be in exactly one of pool, ready, running, dead, with its record; look at one with `punctual get TOPIC ID`, then cancel it or push it again",
            super::plural(violations.len(), "violation", "violations"),
            super::plural(bad_topics, "topic", "topics"),
            topics.len()
        )));
    }
    Ok(())
}
