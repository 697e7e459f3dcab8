//! `punctual topic delete TOPIC`: remove a topic that holds no job;
//! `punctual topic pause|resume TOPIC`: stop and restart its claims;
//! `punctual topic limits TOPIC` (in `limits.rs`).

use anyhow::Result;
use clap::{Args, Subcommand};
use punctual::TopicDeleted;
use serde_json::json;

use crate::context::Ctx;
use crate::exit;
use crate::output::{emit, emit_json};

/// `topic` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// Delete a topic that holds no job: its keys (counters, settings,
    /// pause, history), its schedules (with what they fired), its name in
    /// the set of known topics and its partition count.
    ///
    /// Refused (exit 1, nothing deleted) while any job exists in any state
    /// (pool, ready, running, dead) or partition: cancel or purge them
    /// first. Each partition is checked and deleted in one atomic step, so a
    /// job enqueued meanwhile is never lost. Stop the producers first: one
    /// that enqueues afterwards creates the topic anew.
    #[command(
        after_help = "Example:\n  punctual dead purge old-topic --all && punctual topic delete old-topic"
    )]
    Delete(TopicDeleteArgs),

    /// Pause a topic: workers on every host claim none of its jobs until
    /// `topic resume`. Jobs still become due (pool to ready), producers
    /// still enqueue, running jobs finish; `stats` shows PAUSED yes.
    ///
    /// The same as the dashboard's Pause button and `POST
    /// /api/v1/topics/TOPIC/pause`; recorded in the audit trail.
    #[command(after_help = "Example:\n  punctual topic pause orders && punctual stats orders")]
    Pause(TopicArg),

    /// Resume a paused topic: its workers are woken and claim again.
    #[command(after_help = "Example:\n  punctual topic resume orders")]
    Resume(TopicArg),

    /// Show or set a topic's limits: a rate (claims per period) and a most
    /// running count, for the whole topic over every worker on every host.
    ///
    /// Enforced by the claim script: jobs over a limit wait in ready
    /// (`punctual stats` shows which limit holds them: LIMITED). Without
    /// options, shows the limits; the options given change only those
    /// limits. A partitioned topic gives each partition its share, rounded
    /// up. `[topics.NAME]` keys `rate`, `burst` and `max_running` in the
    /// config set the same at `punctual serve` start.
    ///
    /// `--group-rate`, `--group-burst` and `--group-max-running` set the
    /// limits of each group of jobs (`push --group`) on its own, the default
    /// of every group (config: `group_rate`, `group_burst`,
    /// `group_max_running`); a group held back waits without holding the
    /// other groups back. One group's own limits: `punctual groups TOPIC
    /// limit GROUP`.
    #[command(
        after_help = "Examples:\n  punctual topic limits webhooks --rate 200/s --burst 20 --max-running 50\n  punctual topic limits webhooks --rate none\n  punctual topic limits webhooks --group-rate 10/s --group-max-running 2\n  punctual topic limits webhooks --clear\n  punctual topic limits webhooks"
    )]
    Limits(super::limits::TopicLimitsArgs),
}

/// Arguments of `topic delete`.
#[derive(Debug, Args)]
pub(crate) struct TopicDeleteArgs {
    /// The topic.
    pub topic: String,
}

/// Arguments of `topic pause` and `topic resume`.
#[derive(Debug, Args)]
pub(crate) struct TopicArg {
    /// The topic.
    pub topic: String,
}

/// Runs a `topic` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: TopicCommand) -> Result<()> {
    match cmd {
        TopicCommand::Delete(a) => delete(ctx, a).await,
        TopicCommand::Pause(a) => pause_or_resume(ctx, a, true).await,
        TopicCommand::Resume(a) => pause_or_resume(ctx, a, false).await,
        TopicCommand::Limits(a) => super::limits::run(ctx, a).await,
    }
}

async fn pause_or_resume(ctx: &Ctx, args: TopicArg, pause: bool) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let queue = ctx.queue().await?;
    let action = if pause {
        queue.pause(&args.topic).await?;
        "pause"
    } else {
        queue.resume(&args.topic).await?;
        "resume"
    };
    super::audit::cli(&queue, action, &args.topic, json!({})).await;
    if ctx.json() {
        emit_json(&json!({"topic": args.topic, "paused": pause}))
    } else if pause {
        emit(&format!(
            "paused topic {:?}: no worker claims its jobs until `punctual topic resume {}` (they still become due)\n",
            args.topic, args.topic
        ))
    } else {
        emit(&format!(
            "resumed topic {:?}: its workers claim again\n",
            args.topic
        ))
    }
}

async fn delete(ctx: &Ctx, args: TopicDeleteArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let queue = ctx.queue().await?;
    // Named in the audit entry and the output: they go with the topic.
    let schedules = crate::forms::schedule_names(&queue, &args.topic).await;
    match queue.delete_topic(&args.topic).await? {
        TopicDeleted::Deleted => {
            super::audit::cli(
                &queue,
                "topic.delete",
                &args.topic,
                json!({"schedules": schedules}),
            )
            .await;
            if ctx.json() {
                emit_json(&json!({"topic": args.topic, "deleted": true, "schedules": schedules}))
            } else if schedules.is_empty() {
                emit(&format!("deleted topic {:?}\n", args.topic))
            } else {
                emit(&format!(
                    "deleted topic {:?} and its {}: {}\n",
                    args.topic,
                    super::plural(schedules.len(), "schedule", "schedules"),
                    schedules.join(", ")
                ))
            }
        }
        TopicDeleted::HoldsJobs(n) => Err(exit::problem(format!(
            "topic {:?} holds {}: nothing was deleted (see `punctual stats {}`; cancel or purge them first)",
            args.topic,
            super::plural(n as usize, "job", "jobs"),
            args.topic
        ))),
        _ => Err(exit::problem(format!(
            "no topic {:?} under prefix {:?} (see `punctual topics`)",
            args.topic, ctx.global.prefix
        ))),
    }
}
