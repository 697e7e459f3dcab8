//! `punctual topic limits TOPIC [--rate R] [--burst N] [--max-running N]
//! [--group-rate R] [--group-burst N] [--group-max-running N] [--clear]`.

use anyhow::Result;
use clap::Args;
use punctual::{Limits, Rate};
use serde_json::json;

use crate::context::Ctx;
use crate::forms::limits_json;
use crate::output::{emit, emit_json};

/// Arguments of `topic limits`.
#[derive(Debug, Args)]
pub(crate) struct TopicLimitsArgs {
    /// The topic.
    pub topic: String,
    /// Most claims per period for the whole topic, over every worker:
    /// `200/s`, `30/m`, `5/h`, `3/500ms`; `none` removes it.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate_arg)]
    pub rate: Option<Change<Rate>>,
    /// How many claims may follow each other at once (the token bucket's
    /// size; default a tenth of a second's worth of the rate, at least 1);
    /// `none` restores the default.
    #[arg(long, value_name = "N", value_parser = parse_count_arg)]
    pub burst: Option<Change<u32>>,
    /// Most jobs running at once for the whole topic, over every worker;
    /// `none` removes it.
    #[arg(long, value_name = "N", value_parser = parse_count_arg)]
    pub max_running: Option<Change<u32>>,
    /// Most claims per period of each group (jobs pushed with `--group`),
    /// over every worker: the default of every group without limits of its
    /// own (`punctual groups TOPIC limit GROUP`); `none` removes it.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate_arg)]
    pub group_rate: Option<Change<Rate>>,
    /// The token bucket size of each group's `--group-rate`; `none`
    /// restores the default.
    #[arg(long, value_name = "N", value_parser = parse_count_arg)]
    pub group_burst: Option<Change<u32>>,
    /// Most jobs of each group running at once, over every worker (the
    /// default of every group); `none` removes it.
    #[arg(long, value_name = "N", value_parser = parse_count_arg)]
    pub group_max_running: Option<Change<u32>>,
    /// Remove every limit of the topic (the default group limits too).
    #[arg(long, conflicts_with_all = ["rate", "burst", "max_running", "group_rate", "group_burst", "group_max_running"])]
    pub clear: bool,
}

/// An option's value: a new limit, or `none` to remove it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change<T> {
    To(T),
    Remove,
}

impl<T> Change<T> {
    pub(crate) fn value(self) -> Option<T> {
        match self {
            Change::To(v) => Some(v),
            Change::Remove => None,
        }
    }
}

pub(crate) fn parse_rate_arg(s: &str) -> Result<Change<Rate>, String> {
    if s == "none" {
        return Ok(Change::Remove);
    }
    s.parse()
        .map(Change::To)
        .map_err(|e: punctual::Error| e.to_string())
}

pub(crate) fn parse_count_arg(s: &str) -> Result<Change<u32>, String> {
    if s == "none" {
        return Ok(Change::Remove);
    }
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(Change::To(n)),
        _ => Err(format!(
            "invalid count {s:?}: give a whole number of at least 1, or none"
        )),
    }
}

/// Applies the changes given to `limits` (the others stay as they are).
pub(crate) fn change(
    limits: &mut Limits,
    rate: Option<Change<Rate>>,
    burst: Option<Change<u32>>,
    max_running: Option<Change<u32>>,
) {
    if let Some(r) = rate {
        limits.rate = r.value();
        if limits.rate.is_none() {
            limits.burst = None;
        }
    }
    if let Some(b) = burst {
        limits.burst = b.value();
    }
    if let Some(m) = max_running {
        limits.max_running = m.value();
    }
}

/// Runs `topic limits`: shows the limits, or changes the ones given (the
/// others stay as they are).
pub(crate) async fn run(ctx: &Ctx, args: TopicLimitsArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let queue = ctx.queue().await?;
    let topic_change =
        args.clear || args.rate.is_some() || args.burst.is_some() || args.max_running.is_some();
    let group_change = args.clear
        || args.group_rate.is_some()
        || args.group_burst.is_some()
        || args.group_max_running.is_some();
    let mut limits = queue.limits(&args.topic).await?;
    let mut groups = queue.group_limits(&args.topic).await?.default;
    if topic_change {
        if args.clear {
            limits = Limits::default();
        }
        change(&mut limits, args.rate, args.burst, args.max_running);
        queue.set_limits(&args.topic, &limits).await?;
        limits = queue.limits(&args.topic).await?;
        super::audit::cli(&queue, "topic.limits", &args.topic, limits_json(&limits)).await;
    }
    if group_change {
        if args.clear {
            groups = Limits::default();
        }
        change(
            &mut groups,
            args.group_rate,
            args.group_burst,
            args.group_max_running,
        );
        queue.set_group_limits(&args.topic, None, &groups).await?;
        groups = queue.group_limits(&args.topic).await?.default;
        super::audit::cli(
            &queue,
            "topic.group_limits",
            &args.topic,
            limits_json(&groups),
        )
        .await;
    }
    if ctx.json() {
        let mut v = limits_json(&limits);
        v["topic"] = json!(args.topic);
        if !groups.is_none() {
            // The default limits of every group, only when set.
            v["group"] = limits_json(&groups);
        }
        return emit_json(&v);
    }
    let mut out = format!("{}: {limits}\n", args.topic);
    if !groups.is_none() {
        out.push_str(&format!("{}: each group: {groups}\n", args.topic));
    }
    emit(&out)
}
