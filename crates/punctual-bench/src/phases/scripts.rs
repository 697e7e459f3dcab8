//! The `scripts` phase.

use std::time::Duration;

use anyhow::Result;
use indicatif::ProgressBar;
use punctual::{raw, EnqueueStatus, Job};
use serde::Serialize;
use serde_json::json;

use super::floor;
use crate::harness::{
    ack_all, claim_all, fill_pool, is_zero, payload, status, with_pool, Layout, BENCH_TICK, CHUNK,
    POOL_HORIZON,
};
use crate::probe::{round, Snapshot};
use crate::target::{keys_of, PREFIX, TOPIC};
use crate::{Bench, Report};

/// `scripts`: the Redis cost of each script on a job's path, alone: N jobs
/// enqueued (due in 50 ms), promoted, claimed and acked, one call of 1,000
/// jobs at a time, nothing else running. The sum bounds what one Redis core
/// can drain.
pub(crate) async fn scripts(b: &Bench) -> Result<Report> {
    let n = b.args.n;
    // The floor's four steps on the same layout right before this phase's
    // own (and, without --pool's jobs, right after them): a ratio of two
    // figures measured seconds apart, where the floor phase's came earlier
    // in the run, while the machine's speed drifts (BENCHMARKS.md at 509d4c9, round 11).
    b.clean().await?;
    let floor_before = floor::run(b, n, CHUNK as usize).await?;
    let pool = fill_pool(b).await?;
    // Calls of 1,000 jobs, as the floor's.
    let q = b.queue_chunked(CHUNK as usize).await?;
    let chunk = CHUNK as usize;
    let bar = b.bar(4 * n, "scripts");
    let mut cost = serde_json::Map::new();
    let mut cpu = serde_json::Map::new();
    let mut total_us = 0.0;
    let mut measure = |name: &str, before: &Snapshot, after: &Snapshot, jobs: u64| {
        let (_, usec) = after.scripts_since(before);
        let us = usec as f64 / jobs.max(1) as f64;
        if matches!(name, "promote" | "claim" | "ack") {
            total_us += us;
        }
        cost.insert(name.into(), json!(round(us, 2)));
        cpu.insert(
            name.into(),
            json!(round(
                after.redis_cpu_us_since(before) / jobs.max(1) as f64,
                2
            )),
        );
    };

    let before = Snapshot::take(&b.target).await?;
    let mut created = 0u64;
    for s in (0..n).step_by(chunk) {
        let jobs: Vec<Job> = (s..(s + CHUNK).min(n))
            .map(|i| Job::new(payload(i)).delay(Duration::from_millis(50)))
            .collect();
        let k = jobs.len() as u64;
        created += q
            .enqueue_batch(TOPIC, jobs)
            .await?
            .iter()
            .filter(|e| e.status == EnqueueStatus::Created)
            .count() as u64;
        bar.inc(k);
    }
    let after = Snapshot::take(&b.target).await?;
    measure("enqueue", &before, &after, n);
    tokio::time::sleep(Duration::from_millis(60)).await;

    // Partitions one after the other: one call at a time throughout.
    let parts = &b.target.parts;
    let before = Snapshot::take(&b.target).await?;
    let mut promoted = 0;
    for physical in parts {
        loop {
            let t = raw::tick(&q, &physical.parse()?, &BENCH_TICK).await?;
            promoted += t.promoted;
            bar.inc(t.promoted);
            if !t.more && t.next_due.is_none_or(|d| d >= POOL_HORIZON) {
                break;
            }
            if !t.more {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let after = Snapshot::take(&b.target).await?;
    measure("promote", &before, &after, promoted);

    let before = Snapshot::take(&b.target).await?;
    let claimed = claim_all(&q, parts, chunk, &bar).await?;
    let n_claimed: u64 = claimed.iter().map(|c| c.len() as u64).sum();
    let after = Snapshot::take(&b.target).await?;
    measure("claim", &before, &after, n_claimed);

    let before = Snapshot::take(&b.target).await?;
    let acked = ack_all(&q, parts, &claimed, chunk, &bar).await?;
    let after = Snapshot::take(&b.target).await?;
    measure("ack", &before, &after, acked);
    bar.finish_and_clear();

    // The steady flow's path (ARCHITECTURE.md "Workers claim due jobs
    // straight from the pool"): the same jobs again, due in 50 ms, claimed
    // once due with no tick in between, so each claim takes them from the
    // pool; then acked (not measured: the ack above is the same script).
    for s in (0..n).step_by(chunk) {
        let jobs: Vec<Job> = (s..(s + CHUNK).min(n))
            .map(|i| Job::new(payload(i)).delay(Duration::from_millis(50)))
            .collect();
        q.enqueue_batch(TOPIC, jobs).await?;
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    let before = Snapshot::take(&b.target).await?;
    let hidden = ProgressBar::hidden();
    let from_pool = claim_all(&q, parts, chunk, &hidden).await?;
    let n_pool: u64 = from_pool.iter().map(|c| c.len() as u64).sum();
    let after = Snapshot::take(&b.target).await?;
    measure("claim_pool", &before, &after, n_pool);
    let acked_pool = ack_all(&q, parts, &from_pool, chunk, &hidden).await?;

    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let mut ok = created == n
        && promoted == n
        && n_claimed == n
        && acked == n
        && n_pool == n
        && acked_pool == n
        && sets == [pool, 0, 0, 0]
        && records == pool;

    // The enqueue script in two more shapes, each on a topic of its own
    // (deleted after): a due time per job (as in the precision phases), and
    // ids given by the caller, 16 and 36 bytes long (`order:0000000042`, a
    // UUID), with one shared delay as above.
    for case in EnqueueCase::ALL {
        let topic = case.topic();
        let before = Snapshot::take(&b.target).await?;
        let mut made = 0u64;
        for s in (0..n).step_by(chunk) {
            let jobs: Vec<Job> = (s..(s + CHUNK).min(n)).map(|i| case.job(i)).collect();
            made += q
                .enqueue_batch(topic, jobs)
                .await?
                .iter()
                .filter(|e| e.status == EnqueueStatus::Created)
                .count() as u64;
        }
        let after = Snapshot::take(&b.target).await?;
        measure(case.name(), &before, &after, n);
        ok &= made == n;
        let keys = keys_of(topic);
        for k in keys.all() {
            b.target.query::<u64>(redis::cmd("UNLINK").arg(k)).await?;
        }
        b.target
            .query::<u64>(
                redis::cmd("SREM")
                    .arg(format!("{PREFIX}:topics"))
                    .arg(topic),
            )
            .await?;
    }
    let floor_after = if pool == 0 {
        Some(floor::run(b, n, CHUNK as usize).await?)
    } else {
        None
    };
    let floors: Vec<&floor::Run> = std::iter::once(&floor_before)
        .chain(floor_after.as_ref())
        .collect();
    ok &= floors.iter().all(|f| f.ok);
    // A floor run that is not ok reports its own counts.
    let floor_counts: Vec<&floor::Counts> =
        floors.iter().filter_map(|f| f.counts.as_ref()).collect();
    let paired = floor::mean_script_us(&floors);
    let paired_ratio = floor::path_ratios(&cost, &paired);
    let ceiling = (1e6 / total_us.max(1e-9)).round();
    /// The counts of a `scripts` run that is not ok.
    #[derive(Serialize)]
    struct Steps {
        created: u64,
        promoted: u64,
        claimed: u64,
        acked: u64,
        claimed_from_pool: u64,
        acked_from_pool: u64,
    }
    #[derive(Serialize)]
    struct Scripts<'a> {
        n: u64,
        batch: u64,
        script_us_per_job: &'a serde_json::Map<String, serde_json::Value>,
        redis_cpu_us_per_job: &'a serde_json::Map<String, serde_json::Value>,
        drain_ceiling_jobs_per_s: f64,
        /// The floor measured in this phase: its script µs per job (the
        /// mean of its runs before and after), and the ratios to it.
        paired_floor_runs: usize,
        paired_floor_us_per_job: &'a serde_json::Map<String, serde_json::Value>,
        paired_floor_ratio: &'a serde_json::Map<String, serde_json::Value>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        paired_floor_counts: Vec<&'a floor::Counts>,
        #[serde(skip_serializing_if = "is_zero")]
        pool: u64,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(flatten)]
        steps: Option<Steps>,
    }
    let mut r = Report::of(
        "scripts",
        &Scripts {
            n,
            batch: CHUNK,
            script_us_per_job: &cost,
            redis_cpu_us_per_job: &cpu,
            drain_ceiling_jobs_per_s: ceiling,
            paired_floor_runs: floors.len(),
            paired_floor_us_per_job: &paired,
            paired_floor_ratio: &paired_ratio,
            paired_floor_counts: floor_counts,
            pool,
            layout: b.layout(),
            ok,
            steps: (!ok).then_some(Steps {
                created,
                promoted,
                claimed: n_claimed,
                acked,
                claimed_from_pool: n_pool,
                acked_from_pool: acked_pool,
            }),
        },
    );
    let part = |k: &str| cost.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
    r.text = format!(
        "{:<10} Redis µs per job inside each script (batches of {CHUNK}{}): enqueue {}, promote {}, claim {}, ack {}; promote + claim + ack = {:.2} µs: at most {ceiling:.0} jobs/s per Redis core  {}\n           claim of due jobs straight from the pool (no promote) {}; enqueue with a due time per job {}, with given ids of 16 bytes {}, of 36 bytes {}",
        "scripts",
        with_pool(pool),
        part("enqueue"),
        part("promote"),
        part("claim"),
        part("ack"),
        total_us,
        status(ok),
        part("claim_pool"),
        part("enqueue_distinct"),
        part("enqueue_ids16"),
        part("enqueue_ids36"),
    );
    r.text.push_str(&format!(
        "\n           × the floor measured in this phase ({} run{}): {}",
        floors.len(),
        if floors.len() == 1 {
            ""
        } else {
            "s, before and after"
        },
        floor::ratios_text(&paired_ratio)
    ));
    Ok(r)
}

/// The `scripts` phase's extra enqueue cases (see there).
#[derive(Debug, Clone, Copy)]
enum EnqueueCase {
    /// Generated ids, each job its own delay (100 to 2,000 ms).
    Distinct,
    /// Given ids of this many bytes (16 or 36), one shared delay.
    Ids(usize),
}

impl EnqueueCase {
    const ALL: [EnqueueCase; 3] = [
        EnqueueCase::Distinct,
        EnqueueCase::Ids(16),
        EnqueueCase::Ids(36),
    ];

    /// Its key in `script_us_per_job`.
    fn name(&self) -> &'static str {
        match self {
            EnqueueCase::Distinct => "enqueue_distinct",
            EnqueueCase::Ids(16) => "enqueue_ids16",
            EnqueueCase::Ids(_) => "enqueue_ids36",
        }
    }

    /// The topic it runs on, deleted after.
    fn topic(&self) -> &'static str {
        match self {
            EnqueueCase::Distinct => "bench-distinct",
            EnqueueCase::Ids(16) => "bench-ids16",
            EnqueueCase::Ids(_) => "bench-ids36",
        }
    }

    fn job(&self, i: u64) -> Job {
        match self {
            // Spread over 100..=2,000 ms, as the precision phases' delays.
            EnqueueCase::Distinct => {
                Job::new(payload(i)).delay(Duration::from_millis(100 + i * 7919 % 1901))
            }
            EnqueueCase::Ids(len) => {
                let id = if *len == 16 {
                    format!("order:{i:010}")
                } else {
                    // UUID-shaped: 32 hex digits of a mix of i, dashed.
                    let h = (i as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
                    let x = format!("{h:032x}");
                    format!(
                        "{}-{}-{}-{}-{}",
                        &x[..8],
                        &x[8..12],
                        &x[12..16],
                        &x[16..20],
                        &x[20..]
                    )
                };
                Job::new(payload(i)).id(id).delay(Duration::from_secs(3600))
            }
        }
    }
}
