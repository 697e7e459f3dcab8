//! The admin commands: one module per group of commands, each a `run`
//! function taking the context and its parsed arguments.

pub mod check;
pub mod dead;
pub mod job;
pub mod partitions;
pub mod push;
pub mod script;
pub mod stats;

use anyhow::Result;
use punctual::Queue;

use crate::context::Ctx;

/// The given topic, or every known topic when none is given (sorted).
async fn topics_or_all(queue: &Queue, topic: Option<&str>) -> Result<Vec<String>> {
    match topic {
        Some(t) => {
            punctual::validate_topic(t)?;
            Ok(vec![t.to_string()])
        }
        None => Ok(queue.topics().await?),
    }
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
