//! `punctual topic limits TOPIC [--rate R] [--burst N] [--max-running N] [--clear]`.

use anyhow::Result;
use clap::Args;
use punctual::{Limits, Rate};
use serde_json::json;

use crate::context::Ctx;
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
    /// Remove every limit of the topic.
    #[arg(long, conflicts_with_all = ["rate", "burst", "max_running"])]
    pub clear: bool,
}

/// An option's value: a new limit, or `none` to remove it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change<T> {
    To(T),
    Remove,
}

impl<T> Change<T> {
    fn value(self) -> Option<T> {
        match self {
            Change::To(v) => Some(v),
            Change::Remove => None,
        }
    }
}

fn parse_rate_arg(s: &str) -> Result<Change<Rate>, String> {
    if s == "none" {
        return Ok(Change::Remove);
    }
    s.parse()
        .map(Change::To)
        .map_err(|e: punctual::Error| e.to_string())
}

fn parse_count_arg(s: &str) -> Result<Change<u32>, String> {
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

/// Runs `topic limits`: shows the limits, or changes the ones given (the
/// others stay as they are).
pub(crate) async fn run(ctx: &Ctx, args: TopicLimitsArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let queue = ctx.queue().await?;
    let change =
        args.clear || args.rate.is_some() || args.burst.is_some() || args.max_running.is_some();
    let mut limits = queue.limits(&args.topic).await?;
    if change {
        if args.clear {
            limits = Limits::default();
        }
        if let Some(r) = args.rate {
            limits.rate = r.value();
            if limits.rate.is_none() {
                limits.burst = None;
            }
        }
        if let Some(b) = args.burst {
            limits.burst = b.value();
        }
        if let Some(m) = args.max_running {
            limits.max_running = m.value();
        }
        queue.set_limits(&args.topic, &limits).await?;
        limits = queue.limits(&args.topic).await?;
        super::audit::cli(&queue, "topic.limits", &args.topic, limits_json(&limits)).await;
    }
    if ctx.json() {
        let mut v = limits_json(&limits);
        v["topic"] = json!(args.topic);
        return emit_json(&v);
    }
    emit(&format!("{}: {limits}\n", args.topic))
}

/// The limits as JSON (the CLI's and the API's form): `rate` as
/// `N/PERIOD` text, `burst` and `max_running` numbers; null when unset.
pub(crate) fn limits_json(l: &Limits) -> serde_json::Value {
    json!({
        "rate": l.rate.map(|r| r.to_string()),
        "burst": l.burst,
        "max_running": l.max_running,
    })
}
