//! `punctual stats [TOPIC]`, `punctual stats TOPIC --history DURATION` and
//! `punctual topics`.

use anyhow::Result;
use futures::stream::{self, StreamExt, TryStreamExt};
use punctual::TopicStats;

use crate::context::Ctx;
use crate::input::parse_duration;
use crate::output::{emit, emit_json, span, Table};
use clap::Args;

/// Arguments of `stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Only this topic (default: every known topic).
    pub topic: Option<String>,
    /// Per-minute history of TOPIC over this span, e.g. `1h`, `30m`, up to
    /// `7d` (rounded up to whole minutes).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "topic")]
    pub history: Option<std::time::Duration>,
}

/// How many topics' stats are read at once.
const CONCURRENCY: usize = 16;

/// Runs `stats`.
pub(crate) async fn stats(ctx: &Ctx, args: StatsArgs) -> Result<()> {
    if let Some(t) = &args.topic {
        punctual::validate_topic(t)?;
    }
    let queue = ctx.queue().await?;
    if let (Some(span), Some(topic)) = (args.history, &args.topic) {
        return history(ctx, &queue, topic, span).await;
    }
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
        "WAITING",
        "DEAD",
        "PAUSED",
        "NEXT-DUE",
        "OLDEST-READY",
        "DONE",
        "RETRIED",
        "DIED",
        "EXPIRED",
        "LIMITED",
    ]);
    for s in all {
        let counter = |name: &str| s.counters.get(name).copied().unwrap_or(0).to_string();
        t.row(vec![
            s.topic.clone(),
            s.pool.to_string(),
            s.ready.to_string(),
            (s.running - s.waiting).to_string(),
            s.waiting.to_string(),
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
            counter("expired"),
            s.limited
                .map(|l| l.to_string())
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    t.render()
}

/// Runs `topics`.
pub(crate) async fn topics(ctx: &Ctx) -> Result<()> {
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

/// The minutes a span covers, rounded up; refused past 7 days.
fn span_minutes(span: std::time::Duration) -> Result<u32> {
    let minutes = span.as_secs().div_ceil(60).max(1);
    if minutes > u64::from(punctual::internal::MAX_HISTORY_MINUTES) {
        return Err(crate::exit::invalid(format!(
            "--history {}: the history is kept for 7 days; give at most 7d",
            humantime::format_duration(span)
        )));
    }
    Ok(minutes as u32)
}

/// Runs `stats TOPIC --history DURATION`.
async fn history(
    ctx: &Ctx,
    queue: &punctual::Queue,
    topic: &str,
    span: std::time::Duration,
) -> Result<()> {
    let h = queue.history(topic, span_minutes(span)?).await?;
    if ctx.json() {
        return emit_json(&h);
    }
    emit(&history_table(&h))
}

fn history_table(h: &punctual::History) -> String {
    let mut t = Table::new(&[
        "MINUTE (UTC)",
        "ENQUEUED",
        "DONE",
        "RETRIED",
        "DIED",
        "RECLAIMED",
        "CANCELLED",
        "STARTED",
        "LATE-MEAN",
        "LATE-MAX",
        "OVER-1S",
    ]);
    let late_ms = |us: u64| span(us.div_ceil(1000));
    for m in &h.minutes {
        let when = chrono::DateTime::from_timestamp(m.minute * 60, 0)
            .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_else(|| m.minute.to_string());
        let counter = |name: &str| match &m.counters {
            Some(c) => c.get(name).copied().unwrap_or(0).to_string(),
            None => "-".into(),
        };
        let l = &m.lateness;
        let (mean, max) = match l.mean_us() {
            Some(mean) => (late_ms(mean), late_ms(l.max_us)),
            None => ("-".into(), "-".into()),
        };
        // Buckets 4.. are the starts over 1 s late.
        let over_1s: u64 = l.buckets[4..].iter().sum();
        t.row(vec![
            when,
            counter("enqueued"),
            counter("done"),
            counter("retried"),
            counter("dead"),
            counter("reclaimed"),
            counter("cancelled"),
            l.count.to_string(),
            mean,
            max,
            over_1s.to_string(),
        ]);
    }
    t.render()
}
