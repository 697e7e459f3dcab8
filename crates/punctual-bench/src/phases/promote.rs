//! The `promote` segment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use punctual::internal::TopicKeys;
use punctual::{raw, When};
use serde::Serialize;

use crate::harness::{
    fill_pool, is_zero, load, status, with_pool, Layout, Left, BENCH_TICK, POOL_HORIZON,
};
use crate::probe::{round, Profile, Snapshot};
use crate::stats::per_s;
use crate::{Bench, Report};

/// The `promote` segment: N jobs in pool, all due; scheduler ticks (batches
/// of 1,000, one tick at a time, as the scheduler does) until pool is empty.
pub(crate) async fn promote(b: &Bench) -> Result<Report> {
    let n = b.args.n;
    let pool = fill_pool(b).await?;
    let producer = b.queue().await?;
    let bar = b.bar(n, "load");
    let (_, created) = load(
        b,
        &producer,
        n,
        When::Delay(Duration::from_millis(100)),
        &bar,
    )
    .await?;
    bar.finish_and_clear();
    // Wait until the last job is due (the pool's jobs, --pool, are later).
    let mut last_due: Option<f64> = None;
    let horizon = b.target.now_ms().await? + POOL_HORIZON.as_millis() as i64;
    for k in b.target.keys(TopicKeys::pool) {
        let last: Vec<(String, f64)> = b
            .target
            .query(
                redis::cmd("ZRANGE")
                    .arg(k)
                    .arg(horizon)
                    .arg("-inf")
                    .arg("BYSCORE")
                    .arg("REV")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(1)
                    .arg("WITHSCORES"),
            )
            .await?;
        if let Some((_, due)) = last.first() {
            last_due = Some(last_due.map_or(*due, |d| d.max(*due)));
        }
    }
    if let Some(due) = last_due {
        let wait = due as i64 - b.target.now_ms().await? + 2;
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
    }
    let ticker = b.queue().await?;
    let bar = b.bar(n, "promote");
    let deadline = Instant::now() + Duration::from_secs(120) + Duration::from_millis(n);
    let before = Snapshot::take(&b.target).await?;
    let t0 = Instant::now();
    let progress = AtomicU64::new(0);
    // One tick loop per partition, all at once, as the scheduler runs them.
    let loops = b.target.parts.iter().map(|physical| {
        let (ticker, bar, progress) = (&ticker, &bar, &progress);
        async move {
            let mut promoted = 0u64;
            let mut ticks = 0u64;
            loop {
                let t = raw::tick(ticker, &physical.parse()?, &BENCH_TICK)
                    .await
                    .context("promote: tick failed")?;
                ticks += 1;
                promoted += t.promoted;
                bar.set_position(progress.fetch_add(t.promoted, Ordering::Relaxed) + t.promoted);
                if t.more {
                    continue;
                }
                match t.next_due {
                    None => break,
                    Some(d) if d >= POOL_HORIZON => break,
                    Some(_) if Instant::now() > deadline => break,
                    Some(d) => tokio::time::sleep(d.max(Duration::from_millis(1))).await,
                }
            }
            Ok::<_, anyhow::Error>((promoted, ticks))
        }
    });
    let (mut promoted, mut ticks) = (0u64, 0u64);
    for r in futures::future::join_all(loops).await {
        let (p, t) = r?;
        promoted += p;
        ticks += t;
    }
    let elapsed = t0.elapsed();
    let after = Snapshot::take(&b.target).await?;
    bar.finish_and_clear();
    let sets = b.target.sets().await?;
    let ok = created == n && promoted == n && sets == [pool, n, 0, 0];
    let profile = after.profile(&before, promoted, elapsed);
    #[derive(Serialize)]
    struct Promote {
        n: u64,
        jobs_per_s: f64,
        secs: f64,
        batch: u64,
        ticks: u64,
        #[serde(skip_serializing_if = "is_zero")]
        pool: u64,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        promoted: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        left: Option<Left>,
        profile: Profile,
    }
    let mut r = Report::of(
        "promote",
        &Promote {
            n,
            jobs_per_s: per_s(promoted, elapsed),
            secs: round(elapsed.as_secs_f64(), 3),
            batch: punctual::MAX_BATCH as u64,
            ticks,
            pool,
            layout: b.layout(),
            ok,
            promoted: (!ok).then_some(promoted),
            left: (!ok).then(|| Left::of(sets, None)),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} {n} due jobs pool -> ready in {ticks} ticks of up to {}{}, {:.3} s: {:.0} jobs/s  {}\n{}",
        "promote",
        punctual::MAX_BATCH,
        with_pool(pool),
        elapsed.as_secs_f64(),
        per_s(promoted, elapsed),
        status(ok),
        profile.text()
    );
    Ok(r)
}
