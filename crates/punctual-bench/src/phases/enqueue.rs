//! The `enqueue` and `memory` phases.

use std::time::Duration;

use anyhow::{Context, Result};
use punctual::internal::TopicKeys;
use punctual::{Job, When};
use serde::Serialize;

use crate::harness::{first_tick, load, payload, status, Layout, Left, PAYLOAD_BYTES};
use crate::probe::{round, Profile, Snapshot};
use crate::stats::per_s;
use crate::target::{keys_of, TOPIC};
use crate::{Bench, Report};

/// `enqueue` and `memory`: N jobs due in 1 h, on a topic a scheduler has
/// ticked once (so they wait in the cold pool); jobs/s, and Redis memory per
/// waiting job (used_memory before and after, on an empty prefix).
pub(crate) async fn enqueue(b: &Bench) -> Result<(Report, Report)> {
    let n = b.args.n;
    let queue = b.queue().await?;
    // Load the script and register the topic, then start from nothing.
    if b.args.partitions > 1 {
        // Every partition, so every master holding one, loads the script.
        let warm = 16 * b.args.partitions as u64;
        queue
            .enqueue_batch(
                TOPIC,
                (0..warm)
                    .map(|i| Job::new(payload(i)).delay(Duration::from_secs(3600)))
                    .collect(),
            )
            .await?;
    } else {
        queue
            .enqueue(TOPIC, Job::new(payload(0)).delay(Duration::from_secs(3600)))
            .await?;
    }
    b.clean().await?;
    // The jobs due in 1 h wait in the cold pool.
    first_tick(b, &queue).await.context("enqueue")?;
    let before = Snapshot::take(&b.target).await?;
    let bar = b.bar(n, "enqueue");
    let (elapsed, created) =
        load(b, &queue, n, When::Delay(Duration::from_secs(3600)), &bar).await?;
    bar.finish_and_clear();
    let after = Snapshot::take(&b.target).await?;
    let profile = after.profile(&before, n, elapsed);
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = created == n && sets == [n, 0, 0, 0] && records == n;

    #[derive(Serialize)]
    struct Enqueue {
        n: u64,
        jobs_per_s: f64,
        secs: f64,
        payload_bytes: u64,
        enqueue_chunk: u64,
        inflight: u64,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        created: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        left: Option<Left>,
        profile: Profile,
    }
    let mut e = Report::of(
        "enqueue",
        &Enqueue {
            n,
            jobs_per_s: per_s(n, elapsed),
            secs: round(elapsed.as_secs_f64(), 3),
            payload_bytes: PAYLOAD_BYTES as u64,
            enqueue_chunk: b.args.enqueue_chunk,
            inflight: b.args.inflight,
            layout: b.layout(),
            ok,
            created: (!ok).then_some(created),
            left: (!ok).then(|| Left::of(sets, Some(records))),
            profile: profile.clone(),
        },
    );
    e.text = format!(
        "{:<10} {n} jobs due in 1 h, in {:.3} s: {:.0} jobs/s  {}\n{}",
        "enqueue",
        elapsed.as_secs_f64(),
        per_s(n, elapsed),
        status(ok),
        profile.text()
    );

    // Memory: what Redis holds per waiting job, all in.
    let used = after.used_memory as f64 - before.used_memory as f64;
    let usage = |key: fn(&TopicKeys) -> &str| {
        let keys = b.target.keys(key);
        async move {
            let mut total = 0;
            for k in keys {
                total += memory_usage(b, &k).await?;
            }
            Ok::<u64, anyhow::Error>(total)
        }
    };
    let (pool, jobs) = (usage(TopicKeys::pool).await?, usage(TopicKeys::jobs).await?);
    let cold = cold_usage(b).await?;
    let nf = n as f64;
    #[derive(Serialize)]
    struct KeysBytes {
        pool: f64,
        /// The cold pool (PROTOCOL.md "The cold pool"): its index and lists.
        cold: f64,
        jobs: f64,
    }
    #[derive(Serialize)]
    struct Memory {
        n: u64,
        bytes_per_job: f64,
        payload_bytes: u64,
        keys_bytes_per_job: KeysBytes,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
    }
    let mut m = Report::of(
        "memory",
        &Memory {
            n,
            bytes_per_job: round(used / nf, 1),
            payload_bytes: PAYLOAD_BYTES as u64,
            keys_bytes_per_job: KeysBytes {
                pool: round(pool as f64 / nf, 1),
                cold: round(cold as f64 / nf, 1),
                jobs: round(jobs as f64 / nf, 1),
            },
            layout: b.layout(),
            ok,
        },
    );
    m.text = format!(
        "{:<10} {:.0} bytes per waiting job ({PAYLOAD_BYTES}-byte payload{}): pool ZSET {:.0} + cold pool lists {:.0} + records HASH {:.0}, the rest allocator and dict overhead  {}",
        "memory",
        used / nf,
        match b.args.id_bytes {
            Some(w) => format!(", {w}-byte ids of the caller's"),
            None if b.args.partitions > 1 => ", partitioned: 21-byte ids made by the client".into(),
            None => String::new(),
        },
        pool as f64 / nf,
        cold as f64 / nf,
        jobs as f64 / nf,
        status(ok)
    );
    Ok((e, m))
}

/// `MEMORY USAGE` of the cold pool's keys, every partition's: the index
/// `P:{T}:cold` and each list it names.
async fn cold_usage(b: &Bench) -> Result<u64> {
    let mut total = 0;
    for physical in &b.target.parts {
        let tk = keys_of(physical);
        let index = tk.cold();
        let starts: Vec<i64> = b
            .target
            .query(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))
            .await?;
        let keys = std::iter::once(index).chain(starts.iter().map(|&s| tk.cold_bucket(s)));
        for k in keys {
            total += memory_usage(b, &k).await?;
        }
    }
    Ok(total)
}

/// `MEMORY USAGE key SAMPLES 0` (every element counted), 0 when the key is
/// absent.
async fn memory_usage(b: &Bench, key: &str) -> Result<u64> {
    Ok(b.target
        .query::<Option<u64>>(
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(0),
        )
        .await?
        .unwrap_or(0))
}
