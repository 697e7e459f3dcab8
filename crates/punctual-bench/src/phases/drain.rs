//! The `drain` phase and the `consume` segment.

use std::time::{Duration, Instant};

use anyhow::Result;
use punctual::When;
use serde::Serialize;

use crate::harness::{
    counts, fill_pool, is_zero, load, status, with_pool, Consumer, Counts, Placement, Recorder,
};
use crate::probe::{round, Profile, Snapshot};
use crate::stats::per_s;
use crate::{Bench, Report};

/// `drain` (worker + scheduler) and the `consume` segment (worker alone):
/// N due jobs loaded first, then one consumer; time to the last ack.
pub(crate) async fn drain(b: &Bench, scheduler: bool) -> Result<Report> {
    drain_of(b, b.args.n, scheduler).await
}

/// A drain (worker + scheduler) of `n` jobs.
pub(crate) async fn drain_n(b: &Bench, n: u64) -> Result<Report> {
    drain_of(b, n, true).await
}

async fn drain_of(b: &Bench, n: u64, scheduler: bool) -> Result<Report> {
    let name = if scheduler { "drain" } else { "consume" };
    let pool = fill_pool(b).await?;
    let producer = b.queue().await?;
    let bar = b.bar(n, "load");
    let (_, created) = load(b, &producer, n, When::Now, &bar).await?;
    bar.finish_and_clear();
    let rec = Recorder::new(n, false);
    let conns = Consumer::connect(b, b.args.consumers, scheduler).await?;
    let deadline = Instant::now() + Duration::from_secs(120) + Duration::from_millis(n);
    let bar = b.bar(n, name);
    let before = Snapshot::take(&b.target).await?;
    let t0 = Instant::now();
    let consumer = Consumer::start(conns, rec.clone(), b.consumer_config());
    let all = rec.wait_all(&bar, deadline).await;
    let acked = all && b.wait_acked(deadline, pool).await?;
    let elapsed = t0.elapsed();
    let after = Snapshot::take(&b.target).await?;
    bar.finish_and_clear();
    consumer.stop().await?;
    let tally = rec.tally();
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = created == n && acked && tally.exact(n) && sets == [pool, 0, 0, 0] && records == pool;
    let profile = after.profile(&before, tally.handled, elapsed);

    #[derive(Serialize)]
    struct Drain {
        n: u64,
        jobs_per_s: f64,
        secs: f64,
        concurrency: u64,
        claim_batch: u64,
        scheduler: bool,
        consumers: u64,
        partitions: u32,
        #[serde(skip_serializing_if = "is_zero")]
        pool: u64,
        #[serde(flatten)]
        placement: Option<Placement>,
        ok: bool,
        #[serde(flatten)]
        counts: Option<Counts>,
        profile: Profile,
    }
    let mut r = Report::of(
        name,
        &Drain {
            n,
            jobs_per_s: per_s(tally.handled, elapsed),
            secs: round(elapsed.as_secs_f64(), 3),
            concurrency: b.args.concurrency,
            claim_batch: b.args.claim_batch,
            scheduler,
            consumers: b.args.consumers,
            partitions: b.args.partitions,
            pool,
            placement: b.placement().await?,
            ok,
            counts: (!ok).then(|| counts(&tally, sets, records)),
            profile: profile.clone(),
        },
    );
    let workers = if b.args.consumers == 1 {
        "worker".to_string()
    } else {
        format!("{} workers", b.args.consumers)
    };
    r.text = format!(
        "{name:<10} {n} due jobs{}, {} (concurrency {}, claims of up to {}{}): last ack after {:.3} s: {:.0} jobs/s  {}\n{}",
        with_pool(pool),
        if scheduler { format!("{workers} + scheduler") } else { format!("{workers} alone") },
        b.args.concurrency,
        b.args.claim_batch,
        if b.args.partitions > 1 { format!(", {} partitions", b.args.partitions) } else { String::new() },
        elapsed.as_secs_f64(),
        per_s(tally.handled, elapsed),
        status(ok),
        profile.text()
    );
    Ok(r)
}
