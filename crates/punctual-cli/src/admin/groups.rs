//! `punctual groups TOPIC`: the active groups of a topic (fair sharing
//! between tenants, docs/PROTOCOL.md "Groups").

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::context::Ctx;
use crate::output::{emit, emit_json};

/// Arguments of `groups`.
#[derive(Debug, Args)]
pub(crate) struct GroupsArgs {
    /// The topic.
    pub topic: String,
}

/// The groups as JSON (the CLI's and the API's form).
pub(crate) fn groups_json(topic: &str, groups: &[punctual::GroupInfo]) -> serde_json::Value {
    let list: Vec<_> = groups
        .iter()
        .map(|g| json!({"group": g.group, "indexed": g.indexed, "vtime": g.vtime}))
        .collect();
    json!({"topic": topic, "groups": list})
}

/// Shows each active group: its indexed ready jobs and its virtual time.
pub(crate) async fn run(ctx: &Ctx, args: GroupsArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
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
    let mut out = format!("{:<24} {:>10} {:>12}\n", "GROUP", "INDEXED", "VTIME");
    for g in &groups {
        let name = if g.group.is_empty() {
            "(none)"
        } else {
            g.group.as_str()
        };
        out.push_str(&format!("{:<24} {:>10} {:>12}\n", name, g.indexed, g.vtime));
    }
    emit(&out)
}
