//! `punctual partitions TOPIC [K]`: show or set how many partitions a topic
//! is split over.

use anyhow::Result;
use serde_json::json;

use crate::context::Ctx;
use crate::output::{emit, emit_json};
use clap::Args;

/// Arguments of `partitions`.
#[derive(Debug, Args)]
pub(crate) struct PartitionsArgs {
    /// The topic.
    pub topic: String,
    /// The new partition count (1 to 1024); without it, show the count.
    pub count: Option<u32>,
}

/// Shows the count, or sets it (refused while the topic holds jobs).
pub(crate) async fn run(ctx: &Ctx, args: PartitionsArgs) -> Result<()> {
    let queue = ctx.queue().await?;
    if let Some(k) = args.count {
        queue.set_partitions(&args.topic, k).await?;
    }
    let k = queue.partitions(&args.topic).await?;
    if ctx.json() {
        return emit_json(&json!({"topic": args.topic, "partitions": k}));
    }
    let names: Vec<String> = (0..k)
        .map(|i| punctual::internal::partition_name(&args.topic, i, k))
        .collect();
    emit(&format!(
        "topic {:?}: {k} partition(s): {}\n",
        args.topic,
        names.join(", ")
    ))
}
