//! `punctual groups TOPIC`: the groups of a topic (fair sharing between
//! tenants, docs/PROTOCOL.md "Groups"), and `punctual groups TOPIC limit
//! GROUP`: one group's own limits ("Group limits").

use anyhow::Result;
use clap::{Args, Subcommand};
use punctual::{GroupHold, Limits, Rate};
use serde_json::json;

use crate::admin::limits::{change, parse_count_arg, parse_rate_arg, Change};
use crate::context::Ctx;
use crate::forms::{groups_json, limits_json};
use crate::output::{emit, emit_json};

/// Arguments of `groups`.
#[derive(Debug, Args)]
pub(crate) struct GroupsArgs {
    /// The topic.
    pub topic: String,
    #[command(subcommand)]
    pub action: Option<GroupsAction>,
}

/// What `groups TOPIC` does besides listing.
#[derive(Debug, Subcommand)]
pub(crate) enum GroupsAction {
    /// Show or set one group's own limits, which replace the topic's
    /// default group limits (`punctual topic limits TOPIC --group-rate ..
    /// --group-max-running ..`) for that group. The options given change
    /// only those limits; `--clear` gives the group the defaults again.
    #[command(
        after_help = "Examples:\n  punctual groups mail limit shop-17 --rate 5/s --max-running 1\n  punctual groups mail limit shop-17 --max-running none\n  punctual groups mail limit shop-17 --clear"
    )]
    Limit(GroupLimitArgs),
}

/// Arguments of `groups TOPIC limit GROUP`.
#[derive(Debug, Args)]
pub(crate) struct GroupLimitArgs {
    /// The group.
    pub group: String,
    /// Most claims per period of this group, over every worker; `none`:
    /// no rate for it.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate_arg)]
    pub rate: Option<Change<Rate>>,
    /// The token bucket size of its rate; `none` restores the default.
    #[arg(long, value_name = "N", value_parser = parse_count_arg)]
    pub burst: Option<Change<u32>>,
    /// Most jobs of this group running at once; `none`: no such limit.
    #[arg(long, value_name = "N", value_parser = parse_count_arg)]
    pub max_running: Option<Change<u32>>,
    /// Remove the group's own limits: it has the defaults again.
    #[arg(long, conflicts_with_all = ["rate", "burst", "max_running"])]
    pub clear: bool,
}

/// Shows each group: its indexed ready jobs, virtual time, running jobs,
/// limits and whether they hold it back; or runs `limit`.
pub(crate) async fn run(ctx: &Ctx, args: GroupsArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    if let Some(GroupsAction::Limit(l)) = args.action {
        return limit(ctx, &args.topic, l).await;
    }
    let queue = ctx.queue().await?;
    let groups = queue.groups(&args.topic).await?;
    if ctx.json() {
        return emit_json(&groups_json(&args.topic, &groups));
    }
    if groups.is_empty() {
        return emit(&format!(
            "topic {:?}: no active groups (no grouped job is ready)\n",
            args.topic
        ));
    }
    let mut out = format!(
        "{:<24} {:>10} {:>12} {:>8} {:<14} LIMITS\n",
        "GROUP", "INDEXED", "VTIME", "RUNNING", "HELD"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for g in &groups {
        let name = if g.group.is_empty() {
            "(none)"
        } else {
            g.group.as_str()
        };
        let held = match g.held {
            Some(GroupHold::Until(ms)) => format!("rate {}ms", ms.saturating_sub(now)),
            Some(GroupHold::RunningEnds) => "max_running".to_string(),
            _ => "-".to_string(),
        };
        out.push_str(&format!(
            "{:<24} {:>10} {:>12} {:>8} {:<14} {}\n",
            name, g.indexed, g.vtime, g.running, held, g.limits
        ));
    }
    emit(&out)
}

/// `groups TOPIC limit GROUP`: shows or changes one group's own limits.
async fn limit(ctx: &Ctx, topic: &str, args: GroupLimitArgs) -> Result<()> {
    let group = if args.group == "(none)" {
        ""
    } else {
        args.group.as_str()
    };
    if !group.is_empty() {
        punctual::validate_group(group)?;
    }
    let queue = ctx.queue().await?;
    let all = queue.group_limits(topic).await?;
    let changed =
        args.clear || args.rate.is_some() || args.burst.is_some() || args.max_running.is_some();
    let mut own = all.groups.get(group).copied();
    if args.clear {
        queue.clear_group_limits(topic, group).await?;
        own = None;
    } else if changed {
        let mut l = own.unwrap_or(all.default);
        change(&mut l, args.rate, args.burst, args.max_running);
        queue.set_group_limits(topic, Some(group), &l).await?;
        own = queue.group_limits(topic).await?.groups.get(group).copied();
    }
    let effective: Limits = own.unwrap_or(all.default);
    if changed {
        super::audit::cli(
            &queue,
            "group.limits",
            topic,
            json!({"group": group, "own": own.as_ref().map(limits_json)}),
        )
        .await;
    }
    if ctx.json() {
        return emit_json(&json!({
            "topic": topic,
            "group": group,
            "own": own.is_some(),
            "limits": limits_json(&effective),
        }));
    }
    let whose = if own.is_some() {
        "its own"
    } else {
        "the defaults"
    };
    emit(&format!(
        "{topic} group {:?}: {effective} ({whose})\n",
        args.group
    ))
}
