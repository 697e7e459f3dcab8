//! `punctual dead list | replay | purge`: the dead-letter set.

use std::collections::HashSet;

use anyhow::Result;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use punctual::{DeadSelector, JobInfo, ReplayPace};
use serde_json::{json, Map, Value};

use super::audit;
use crate::context::Ctx;
use crate::exit;
use crate::input::{parse_duration, parse_rate};
use crate::output::{emit, emit_json, one_line, payload_json, payload_text, span, time, Table};
use clap::{ArgGroup, Args, Subcommand};
use std::time::Duration;

/// The examples of `dead replay --help`.
pub(crate) const REPLAY_EXAMPLES: &str = "\
Examples:
  # the two jobs named, due now
  punctual dead replay orders order:10086 order:10087

  # 50,000 dead jobs at 100 a second (done in 8m20s; the command returns at once)
  punctual dead replay orders --all --rate 100/s

  # the 1,000 that died first, evenly over ten minutes
  punctual dead replay orders --oldest 1000 --spread 10m";

/// `dead` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum DeadCommand {
    /// List dead jobs, most recent death first.
    List(DeadListArgs),

    /// Move dead jobs back: due now (in ready), or paced with --rate or
    /// --spread (due later, in pool), attempts reset to 0.
    ///
    /// A job pushed with --expire gets its window again from its new due
    /// time (its deadline moves with the due time), so an expired job runs
    /// instead of expiring again.
    #[command(after_help = REPLAY_EXAMPLES)]
    Replay(DeadReplayArgs),

    /// Delete dead jobs for good. `--all` asks no question; it prints how many.
    Purge(DeadPurgeArgs),
}

/// Arguments of `dead list`.
#[derive(Debug, Args)]
pub(crate) struct DeadListArgs {
    /// The topic.
    pub topic: String,

    /// Skip this many (most recent first).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub offset: usize,

    /// Show at most this many (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub limit: u16,
}

/// Arguments of `dead replay`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["ids", "oldest", "all"])))]
pub(crate) struct DeadReplayArgs {
    /// The topic.
    pub topic: String,

    /// Replay these ids.
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,

    /// Replay the N oldest dead jobs (first to die).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub oldest: Option<u64>,

    /// Replay every dead job of the topic.
    #[arg(long)]
    pub all: bool,

    /// Pace the replay: jobs per period, e.g. 100/s, 6000/m or 50/10s (a
    /// plain number is per second). The i-th job is due i/rate after now
    /// (Redis's clock), so they wait in pool and the pacing holds after this
    /// command exits; a scheduler releases them.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate, conflicts_with = "spread")]
    pub rate: Option<punctual::ReplayPace>,

    /// Pace the replay: spread the jobs evenly over this window, e.g. 10m
    /// (the first due now, the last one step before the window ends).
    #[arg(long, value_name = "DURATION", value_parser = parse_spread)]
    pub spread: Option<Duration>,
}

/// A --spread window: 1 ms to ten years.
fn parse_spread(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err("a spread must be at least 1ms; give e.g. 10m".into());
    }
    Ok(d)
}

/// Arguments of `dead purge`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["ids", "all"])))]
pub(crate) struct DeadPurgeArgs {
    /// The topic.
    pub topic: String,

    /// Delete these ids.
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,

    /// Delete every dead job of the topic.
    #[arg(long)]
    pub all: bool,
}

/// How many missing ids an error message names.
const NAMED: usize = 10;

/// Runs a `dead` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: DeadCommand) -> Result<()> {
    match cmd {
        DeadCommand::List(a) => list(ctx, a).await,
        DeadCommand::Replay(a) => replay(ctx, a).await,
        DeadCommand::Purge(a) => purge(ctx, a).await,
    }
}

fn dead_json(topic: &str, j: &JobInfo) -> Value {
    let mut o = Map::new();
    o.insert("topic".into(), topic.into());
    o.insert("id".into(), j.id.as_str().into());
    if let Some(ms) = j.state_since_ms {
        o.insert("died".into(), time(ms).into());
        o.insert("died_ms".into(), ms.into());
    }
    o.insert("attempts".into(), j.attempts.into());
    o.insert("created".into(), time(j.created_ms).into());
    o.insert("created_ms".into(), j.created_ms.into());
    o.insert("last_error".into(), j.last_error.clone().into());
    super::job::options_json(j, &mut o);
    payload_json(&j.payload, &mut o);
    Value::Object(o)
}

async fn list(ctx: &Ctx, args: DeadListArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let queue = ctx.queue().await?;
    let page = queue
        .dead_list(&args.topic, args.offset, usize::from(args.limit))
        .await?;
    if ctx.json() {
        let list: Vec<Value> = page.iter().map(|j| dead_json(&args.topic, j)).collect();
        return emit_json(&list);
    }
    let total = queue.stats(&args.topic).await?.dead as usize;
    if page.is_empty() {
        if total == 0 {
            eprintln!("punctual: no dead jobs in topic {:?}", args.topic);
        } else {
            eprintln!(
                "punctual: no dead jobs past offset {} (topic {:?} has {total})",
                args.offset, args.topic
            );
        }
        return Ok(());
    }
    let mut t = Table::new(&["ID", "DIED", "ATTEMPTS", "CREATED", "LAST-ERROR", "PAYLOAD"]);
    for j in &page {
        t.row(vec![
            j.id.clone(),
            j.state_since_ms.map(time).unwrap_or_else(|| "-".into()),
            j.attempts.to_string(),
            time(j.created_ms),
            one_line(j.last_error.as_deref().unwrap_or("-"), 60),
            one_line(&payload_text(&j.payload), 40),
        ]);
    }
    let mut out = t.render();
    let (from, to) = (args.offset + 1, args.offset + page.len());
    out.push_str(&format!(
        "dead jobs {from}-{to} of {total}, most recent first"
    ));
    if to < total {
        out.push_str(&format!("; next page: --offset {to}"));
    }
    out.push('\n');
    emit(&out)
}

/// The ids given, validated, without repeats (in the order given).
fn unique_ids(ids: Vec<String>) -> Result<Vec<String>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for id in ids {
        punctual::validate_id(&id)?;
        if seen.insert(id.clone()) {
            out.push(id);
        }
    }
    Ok(out)
}

fn name_some(ids: &[&String]) -> String {
    let mut s = ids
        .iter()
        .take(NAMED)
        .map(|i| i.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > NAMED {
        s.push_str(&format!(", and {} more", ids.len() - NAMED));
    }
    s
}

async fn replay(ctx: &Ctx, args: DeadReplayArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let ids = unique_ids(args.ids)?;
    let selector = match (args.oldest, args.all) {
        (Some(n), _) => DeadSelector::Oldest(usize::try_from(n).unwrap_or(usize::MAX)),
        (None, true) => DeadSelector::All,
        (None, false) => DeadSelector::Ids(ids.clone()),
    };
    let pace = match (args.rate, args.spread) {
        (Some(rate), _) => rate,
        (None, Some(window)) => ReplayPace::Spread(window),
        (None, None) => ReplayPace::Now,
    };
    let queue = ctx.queue().await?;
    // How many there are to replay, for the bar (a terminal only, not --json).
    let bar = if !ctx.json() && std::io::stderr().is_terminal() {
        let total = match &selector {
            DeadSelector::Ids(ids) => ids.len() as u64,
            DeadSelector::Oldest(n) => (*n as u64).min(queue.stats(&args.topic).await?.dead),
            _ => queue.stats(&args.topic).await?.dead,
        };
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("replaying {bar:30} {pos}/{len} written ({eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let replayed = queue
        .dead_replay_paced(&args.topic, selector, pace, |n| bar.set_position(n as u64))
        .await;
    bar.finish_and_clear();
    let replayed = replayed?;
    let n = replayed.len();
    let mut detail = crate::forms::counted("replayed", &replayed);
    if let Some((key, value)) = pace.describe() {
        detail[key] = json!(value);
    }
    audit::cli(&queue, "dead.replay", &args.topic, detail).await;
    let last_due = pace.offset(n.saturating_sub(1), n);
    if ctx.json() {
        let mut out = json!({"topic": args.topic, "replayed": n, "ids": replayed});
        if pace != ReplayPace::Now {
            out["last_due_in_ms"] = json!(last_due.as_millis() as u64);
        }
        emit_json(&out)?;
    } else if pace == ReplayPace::Now {
        emit(&format!(
            "replayed {} of topic {:?}: back in ready, due now, attempts reset\n",
            super::plural(n, "dead job", "dead jobs"),
            args.topic
        ))?;
    } else {
        let (_, how) = pace.describe().unwrap_or_default();
        let when = if last_due.is_zero() {
            "due now".to_string()
        } else {
            format!(
                "due from now until {} from now",
                span(last_due.as_millis() as u64)
            )
        };
        emit(&format!(
            "replayed {} of topic {:?}: attempts reset, {when} ({how}; in pool, a scheduler releases them)\n",
            super::plural(n, "dead job", "dead jobs"),
            args.topic,
        ))?;
    }
    let done: HashSet<&String> = replayed.iter().collect();
    let missing: Vec<&String> = ids.iter().filter(|id| !done.contains(id)).collect();
    if !missing.is_empty() {
        return Err(exit::problem(format!(
            "{} of {} ids were not dead and were skipped: {} (see `punctual dead list {}`; `punctual get` shows where a job is)",
            missing.len(),
            ids.len(),
            name_some(&missing),
            args.topic
        )));
    }
    Ok(())
}

async fn purge(ctx: &Ctx, args: DeadPurgeArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let ids = unique_ids(args.ids)?;
    let selector = if args.all {
        DeadSelector::All
    } else {
        DeadSelector::Ids(ids.clone())
    };
    let queue = ctx.queue().await?;
    let purged = queue.dead_purge(&args.topic, selector).await?;
    audit::cli(
        &queue,
        "dead.purge",
        &args.topic,
        json!({"purged": purged, "all": args.all, "ids": ids}),
    )
    .await;
    if ctx.json() {
        emit_json(&json!({"topic": args.topic, "purged": purged}))?;
    } else {
        emit(&format!(
            "purged {} of topic {:?}\n",
            super::plural(purged, "dead job", "dead jobs"),
            args.topic
        ))?;
    }
    if !args.all && purged < ids.len() {
        return Err(exit::problem(format!(
            "{} of {} ids were not dead and were left alone (see `punctual dead list {}`)",
            ids.len() - purged,
            ids.len(),
            args.topic
        )));
    }
    Ok(())
}
