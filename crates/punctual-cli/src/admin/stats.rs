//! `punctual stats [TOPIC]` and `punctual topics`.

use anyhow::Result;
use futures::stream::{self, StreamExt, TryStreamExt};
use punctual::TopicStats;

use crate::cli::StatsArgs;
use crate::context::Ctx;
use crate::output::{emit, emit_json, span, Table};

/// How many topics' stats are read at once.
const CONCURRENCY: usize = 16;

/// Runs `stats`.
pub async fn stats(ctx: &Ctx, args: StatsArgs) -> Result<()> {
    if let Some(t) = &args.topic {
        punctual::validate_topic(t)?;
    }
    let queue = ctx.queue().await?;
    let topics = super::topics_or_all(&queue, args.topic.as_deref()).await?;
    let all: Vec<TopicStats> = stream::iter(topics)
        .map(|t| {
            let queue = queue.clone();
            async move { queue.stats(&t).await }
        })
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
    if ctx.json() {
        return emit_json(&all);
    }
    if all.is_empty() {
        eprintln!("{}", super::no_topics_note(ctx));
        return Ok(());
    }
    emit(&table(&all))
}

fn table(all: &[TopicStats]) -> String {
    let mut t = Table::new(&[
        "TOPIC",
        "POOL",
        "READY",
        "RUNNING",
        "DEAD",
        "PAUSED",
        "NEXT-DUE",
        "OLDEST-READY",
        "DONE",
        "RETRIED",
        "DIED",
    ]);
    for s in all {
        let counter = |name: &str| s.counters.get(name).copied().unwrap_or(0).to_string();
        t.row(vec![
            s.topic.clone(),
            s.pool.to_string(),
            s.ready.to_string(),
            s.running.to_string(),
            s.dead.to_string(),
            if s.paused { "yes" } else { "no" }.to_string(),
            s.next_due_in_ms
                .map(|ms| format!("in {}", span(ms.max(0) as u64)))
                .unwrap_or_else(|| "-".into()),
            s.oldest_ready_ms
                .map(|ms| span(ms.max(0) as u64))
                .unwrap_or_else(|| "-".into()),
            counter("done"),
            counter("retried"),
            counter("dead"),
        ]);
    }
    t.render()
}

/// Runs `topics`.
pub async fn topics(ctx: &Ctx) -> Result<()> {
    let queue = ctx.queue().await?;
    let topics = super::all_topics(&queue).await?;
    if ctx.json() {
        return emit_json(&topics);
    }
    if topics.is_empty() {
        eprintln!("{}", super::no_topics_note(ctx));
        return Ok(());
    }
    let mut out = topics.join("\n");
    out.push('\n');
    emit(&out)
}
