//! `punctual schedule add|list|rm|pause|resume`: recurring schedules, fired
//! by every scheduler of the topic (`punctual serve`).

use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::context::Ctx;
use crate::exit;
use crate::forms::{build_schedule, info_json};
use crate::output::{emit, emit_json, time_and_relative, Table};

/// Examples shown after `schedule --help`.
pub(crate) const EXAMPLES: &str = "\
Examples:
  # every night at 03:00 Berlin time; after an outage, run only the latest missed one
  punctual schedule add orders nightly --cron \"0 3 * * *\" --tz Europe/Berlin \\
      --payload '{\"kind\":\"close-unpaid\"}' --catch-up latest

  # every 30 seconds (6 fields: seconds first), 3 attempts per occurrence
  punctual schedule add orders sweep --cron \"*/30 * * * * *\" --options 3

  # every 5 minutes from now; a backlog is spread over 10 minutes
  punctual schedule add mails digest --every 5m --catch-up spread --spread 10m

  punctual schedule list orders
  punctual schedule pause orders nightly
  punctual schedule resume orders nightly
  punctual schedule rm orders nightly";

/// `schedule` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Add a schedule, or replace the one with this name (it keeps its
    /// creation time, paused state and the occurrences already fired).
    ///
    /// Each occurrence is enqueued as an ordinary job with id
    /// NAME@<occurrence epoch ms>, due at the occurrence, by any running
    /// scheduler of the topic (up to 60 s ahead); an occurrence never fires
    /// twice (within 7 days), whatever the number of schedulers.
    #[command(after_help = EXAMPLES)]
    Add(AddArgs),
    /// List a topic's schedules with their next occurrence.
    List(TopicArg),
    /// Remove a schedule; occurrences it fired ahead and not yet due are
    /// cancelled, and so are missed ones that catch-up spread made due
    /// later.
    Rm(NameArgs),
    /// Pause a schedule: it fires nothing until resumed; occurrences fired
    /// ahead and not yet due are cancelled, and so are missed ones that
    /// catch-up spread made due later (resume does not fire those again).
    Pause(NameArgs),
    /// Resume a paused schedule; the occurrences missed while it was paused
    /// are handled by its catch-up policy.
    Resume(NameArgs),
}

/// Arguments of `schedule add`.
#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// The topic its jobs go to.
    pub topic: String,
    /// The schedule's name: 1 to 100 of letters, digits, '_', '.', '-'.
    pub name: String,
    /// A cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), or 6 with seconds first. Quote it.
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    pub cron: Option<String>,
    /// A fixed interval instead of cron (at least 1s): 30s, 5m, 1h.
    #[arg(long, value_parser = crate::input::parse_duration)]
    pub every: Option<Duration>,
    /// The cron expression's time zone, an IANA name (DST-aware).
    #[arg(long, default_value = "UTC", requires = "cron")]
    pub tz: String,
    /// Each occurrence's payload.
    #[arg(long, default_value = "")]
    pub payload: String,
    /// What to do with occurrences missed while no scheduler ran or the
    /// schedule was paused: all (every one, due now), latest (only the most
    /// recent), skip (none), spread (every one, spread over --spread).
    #[arg(long, default_value = "all", value_parser = ["all", "latest", "skip", "spread"])]
    pub catch_up: String,
    /// The window over which `--catch-up spread` spreads missed
    /// occurrences, e.g. 10m.
    #[arg(long, value_parser = crate::input::parse_duration)]
    pub spread: Option<Duration>,
    /// Job options as the enqueue script takes them: max attempts, then
    /// `;`-separated options (see docs/PROTOCOL.md "Per-job options").
    #[arg(long, default_value = "")]
    pub options: String,
}

/// A topic.
#[derive(Debug, Args)]
pub(crate) struct TopicArg {
    /// The topic.
    pub topic: String,
}

/// A topic and a schedule name.
#[derive(Debug, Args)]
pub(crate) struct NameArgs {
    /// The topic.
    pub topic: String,
    /// The schedule's name.
    pub name: String,
}

/// Runs a `schedule` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: ScheduleCommand) -> Result<()> {
    match cmd {
        ScheduleCommand::Add(a) => add(ctx, a).await,
        ScheduleCommand::List(a) => list(ctx, a).await,
        ScheduleCommand::Rm(a) => change(ctx, a, Change::Remove).await,
        ScheduleCommand::Pause(a) => change(ctx, a, Change::Pause).await,
        ScheduleCommand::Resume(a) => change(ctx, a, Change::Resume).await,
    }
}

async fn add(ctx: &Ctx, a: AddArgs) -> Result<()> {
    let s = build_schedule(
        &a.name,
        a.cron.as_deref(),
        a.every,
        &a.tz,
        &a.payload,
        &a.catch_up,
        a.spread,
        &a.options,
    )?;
    let queue = ctx.queue().await?;
    let existed = queue.schedule(&a.topic, &a.name).await?.is_some();
    let stored = queue.schedule_put(&a.topic, s).await?;
    super::audit::cli(
        &queue,
        if existed {
            "schedule.update"
        } else {
            "schedule.add"
        },
        &a.topic,
        serde_json::to_value(&stored).unwrap_or_default(),
    )
    .await;
    let info = queue.schedule(&a.topic, &a.name).await?.ok_or_else(|| {
        exit::problem(format!(
            "schedule {:?} vanished after it was written",
            a.name
        ))
    })?;
    if ctx.json() {
        return emit_json(&info_json(&a.topic, &info));
    }
    let now = queue.redis_now_ms().await?;
    let next = info
        .next_ms
        .map(|n| time_and_relative(n, now))
        .unwrap_or_else(|| "-".into());
    emit(&format!(
        "{} schedule {:?} of topic {:?}; next occurrence {next}\n",
        if existed { "updated" } else { "added" },
        a.name,
        a.topic
    ))
}

async fn list(ctx: &Ctx, a: TopicArg) -> Result<()> {
    let queue = ctx.queue().await?;
    let all = queue.schedules(&a.topic).await?;
    if ctx.json() {
        let v: Vec<_> = all.iter().map(|i| info_json(&a.topic, i)).collect();
        return emit_json(&v);
    }
    if all.is_empty() {
        eprintln!(
            "punctual: topic {:?} has no schedules (add one with `punctual schedule add`)",
            a.topic
        );
        return Ok(());
    }
    let now = queue.redis_now_ms().await?;
    let mut t = Table::new(&["NAME", "WHEN", "TZ", "CATCH-UP", "STATE", "NEXT"]);
    for i in &all {
        let s = &i.schedule;
        let when = match (&s.cron, s.every_ms) {
            (Some(c), _) => c.clone(),
            (None, Some(ms)) => format!("every {}", crate::output::span(ms)),
            _ => "-".into(),
        };
        let catch_up = match s.spread_ms {
            Some(ms) => format!("spread {}", crate::output::span(ms)),
            None => s.catch_up.to_string(),
        };
        t.row(vec![
            s.name.clone(),
            when,
            s.tz.clone(),
            catch_up,
            if s.paused { "paused" } else { "active" }.into(),
            i.next_ms
                .map(|n| time_and_relative(n, now))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    emit(&t.render())
}

#[derive(Clone, Copy)]
enum Change {
    Remove,
    Pause,
    Resume,
}

async fn change(ctx: &Ctx, a: NameArgs, what: Change) -> Result<()> {
    punctual::validate_topic(&a.topic)?;
    punctual::schedule::validate_name(&a.name)?;
    let queue = ctx.queue().await?;
    let (found, action, done) = match what {
        Change::Remove => (
            queue.schedule_remove(&a.topic, &a.name).await?,
            "schedule.rm",
            "removed",
        ),
        Change::Pause => (
            queue.schedule_pause(&a.topic, &a.name).await?,
            "schedule.pause",
            "paused",
        ),
        Change::Resume => (
            queue.schedule_resume(&a.topic, &a.name).await?,
            "schedule.resume",
            "resumed",
        ),
    };
    if !found {
        return Err(exit::problem(format!(
            "topic {:?} has no schedule {:?} (see `punctual schedule list {}`)",
            a.topic, a.name, a.topic
        )));
    }
    super::audit::cli(&queue, action, &a.topic, json!({ "name": a.name })).await;
    if ctx.json() {
        return emit_json(&json!({"topic": a.topic, "name": a.name, done: true}));
    }
    emit(&format!(
        "{done} schedule {:?} of topic {:?}\n",
        a.name, a.topic
    ))
}
