//! The admin commands: one module per group of commands, each a `run`
//! function taking the context and its parsed arguments.

pub(crate) mod audit;
pub(crate) mod cancel;
pub(crate) mod check;
pub(crate) mod dead;
pub(crate) mod groups;
pub(crate) mod import;
pub(crate) mod job;
pub(crate) mod limits;
pub(crate) mod list;
pub(crate) mod partitions;
pub(crate) mod ps;
pub(crate) mod push;
pub(crate) mod schedule;
pub(crate) mod script;
pub(crate) mod stats;
pub(crate) mod topic;

use anyhow::Result;
use punctual::Queue;

use crate::context::Ctx;

/// The given topic, or every known topic when none is given (sorted).
/// Invalid names in the set of known topics are skipped, with a warning on
/// stderr each.
async fn topics_or_all(queue: &Queue, topic: Option<&str>) -> Result<Vec<String>> {
    match topic {
        Some(t) => {
            punctual::validate_topic(t)?;
            Ok(vec![t.to_string()])
        }
        None => all_topics(queue).await,
    }
}

/// Every valid known topic (sorted); warns on stderr about each invalid name
/// in the set of known topics, which is skipped.
async fn all_topics(queue: &Queue) -> Result<Vec<String>> {
    let listed = queue.list_topics().await?;
    for s in &listed.skipped {
        eprintln!(
            "punctual: warning: skipped \"{}\" in {}:topics: {} (remove it with SREM)",
            s.name,
            queue.prefix(),
            s.reason
        );
    }
    Ok(listed.valid)
}

/// The note printed (to stderr) when no topic exists yet.
fn no_topics_note(ctx: &Ctx) -> String {
    format!(
        "punctual: no topics under prefix {:?} yet (a topic appears when a job is pushed to it; check --prefix and --redis)",
        ctx.global.prefix
    )
}

/// `n thing` or `n things`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
