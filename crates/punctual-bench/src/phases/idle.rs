//! The `idle` phase.

use std::time::Duration;

use anyhow::Result;
use punctual::WorkerConfig;
use serde::Serialize;

use crate::harness::{status, Consumer, Recorder};
use crate::probe::{round, Snapshot};
use crate::{Bench, Report};

/// `idle`: a consumer (worker with concurrency 64 + scheduler) and nothing
/// queued: Redis commands per second.
pub(crate) async fn idle(b: &Bench) -> Result<Report> {
    let secs = b.args.idle_secs;
    let rec = Recorder::new(0, false);
    let conns = Consumer::connect(b, 1, true).await?;
    let consumer = Consumer::start(conns, rec.clone(), WorkerConfig::default().concurrency(64));
    b.wait_listening(1, true, "idle").await?;
    // Let the start-up calls (first tick, first claim) pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let spin = b.spinner("idle", &format!("measuring for {secs} s"));
    let before = Snapshot::take(&b.target).await?;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let after = Snapshot::take(&b.target).await?;
    spin.finish_and_clear();
    consumer.stop().await?;
    let commands = after.commands_since(&before);
    let by_cmd = after.calls_since(&before);
    let ok = rec.handled() == 0;
    let per_s = round(commands as f64 / secs as f64, 2);
    #[derive(Serialize)]
    struct Idle<'a> {
        secs: u64,
        concurrency: u64,
        redis_cmds_per_s: f64,
        commands: &'a std::collections::BTreeMap<String, u64>,
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        handled: Option<u64>,
    }
    let mut r = Report::of(
        "idle",
        &Idle {
            secs,
            concurrency: 64,
            redis_cmds_per_s: per_s,
            commands: &by_cmd,
            ok,
            handled: (!ok).then(|| rec.handled()),
        },
    );
    let list: Vec<String> = by_cmd.iter().map(|(c, n)| format!("{c} {n}")).collect();
    r.text = format!(
        "{:<10} one idle consumer (concurrency 64) + scheduler for {secs} s: {per_s} Redis commands/s ({})  {}",
        "idle",
        if list.is_empty() { "none".to_string() } else { list.join(", ") },
        status(ok)
    );
    Ok(r)
}
