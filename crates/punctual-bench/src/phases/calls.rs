//! The `calls` phase.

use std::time::Duration;

use anyhow::Result;
use punctual::{EnqueueStatus, Job};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::client_enqueue::{self, client_enqueue};
use super::floor;
use crate::harness::{ack_all, claim_all, payload, status, Left};
use crate::probe::{round, Snapshot};
use crate::target::TOPIC;
use crate::{Bench, Report};

/// Jobs of the `calls` phase at most: every call is a round trip.
const CALLS_MAX: u64 = 2_000;

/// `calls`: one job per call, the shape of a producer that enqueues a job
/// per request and of a light steady flow. The floor's four steps with one
/// job per call, then punctual's enqueue (due in 50 ms), claim straight
/// from the pool (no tick) and ack, one job per call, on N jobs (at most
/// 2,000): Redis µs per call of each, and each over the floor's, measured
/// in this phase (a per-call cost the batches of the `floor` and `scripts`
/// phases spread over 1,000 jobs). Without --pool's jobs: the floor
/// checks that it leaves every set empty. Then the one-job enqueue of
/// each client, Rust, PHP, Python and Node, on N jobs each
/// (`client_enqueue`): Redis µs per call, jobs/s, and each client's ratio
/// to Rust in this run.
pub(crate) async fn calls(b: &Bench) -> Result<Report> {
    let n = b.args.n.min(CALLS_MAX);
    let floor = floor::run(b, n, 1).await?;
    b.clean().await?;
    let q = b.queue().await?;
    let parts = &b.target.parts;
    let bar = b.bar(3 * n, "calls");
    let mut cost = Map::new();
    let mut measure = |name: &str, before: &Snapshot, after: &Snapshot, calls: u64| {
        let (_, usec) = after.scripts_since(before);
        cost.insert(
            name.into(),
            json!(round(usec as f64 / calls.max(1) as f64, 2)),
        );
    };
    let before = Snapshot::take(&b.target).await?;
    let mut created = 0u64;
    for i in 0..n {
        let e = q
            .enqueue(TOPIC, Job::new(payload(i)).delay(Duration::from_millis(50)))
            .await?;
        created += u64::from(e.status == EnqueueStatus::Created);
        bar.inc(1);
    }
    let after = Snapshot::take(&b.target).await?;
    measure("enqueue", &before, &after, n);
    // Every job is due once the last one is (each was due 50 ms after its
    // own call): the claims take them straight from the pool.
    tokio::time::sleep(Duration::from_millis(60)).await;
    let before = Snapshot::take(&b.target).await?;
    let claimed = claim_all(&q, parts, 1, &bar).await?;
    let n_claimed: u64 = claimed.iter().map(|c| c.len() as u64).sum();
    let after = Snapshot::take(&b.target).await?;
    // (One more call per partition, empty, ends the loop: as in the floor.)
    measure("claim_pool", &before, &after, n_claimed);
    let before = Snapshot::take(&b.target).await?;
    let acked = ack_all(&q, parts, &claimed, 1, &bar).await?;
    let after = Snapshot::take(&b.target).await?;
    measure("ack", &before, &after, acked);
    bar.finish_and_clear();
    // Each claim took its job straight from the pool.
    let promoted = q
        .stats(TOPIC)
        .await?
        .counters
        .get("promoted")
        .copied()
        .unwrap_or(0);
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let mine_ok = created == n
        && n_claimed == n
        && acked == n
        && promoted == n
        && sets == [0; 4]
        && records == 0;
    // Then the one-job enqueue from each client, Rust's again first.
    let (clients, clients_ok) = client_enqueue(b, n).await?;
    let ok = floor.ok && mine_ok && clients_ok;

    let f = floor.script_us();
    let get = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let ratio = |x: f64, f: f64| (f > 0.0 && x > 0.0).then(|| round(x / f, 2));
    let mut ratios = Map::new();
    for (k, x, fl) in [
        ("enqueue", get(&cost, "enqueue"), get(f, "enqueue")),
        (
            "claim_pool",
            get(&cost, "claim_pool"),
            get(f, "promote") + get(f, "claim"),
        ),
        ("ack", get(&cost, "ack"), get(f, "ack")),
        (
            "steady_path",
            get(&cost, "enqueue") + get(&cost, "claim_pool") + get(&cost, "ack"),
            ["enqueue", "promote", "claim", "ack"]
                .iter()
                .map(|k| get(f, k))
                .sum(),
        ),
    ] {
        if let Some(r) = ratio(x, fl) {
            ratios.insert(k.into(), json!(r));
        }
    }
    /// The counts of a `calls` run that is not ok.
    #[derive(Serialize)]
    struct Counts<'a> {
        created: u64,
        claimed: u64,
        acked: u64,
        promoted: u64,
        left: Left,
        #[serde(skip_serializing_if = "Option::is_none")]
        floor: Option<&'a floor::Counts>,
    }
    #[derive(Serialize)]
    struct Calls<'a> {
        n: u64,
        batch: u64,
        script_us_per_call: &'a Map<String, Value>,
        floor_us_per_call: &'a Map<String, Value>,
        floor_ratio: &'a Map<String, Value>,
        /// Per client (rust, php, python, node): Redis µs per one-job
        /// enqueue call, jobs/s, and the ratio to Rust's; or skipped.
        client_enqueue: &'a Map<String, Value>,
        ok: bool,
        #[serde(flatten)]
        counts: Option<Counts<'a>>,
    }
    let mut r = Report::of(
        "calls",
        &Calls {
            n,
            batch: 1,
            script_us_per_call: &cost,
            floor_us_per_call: f,
            floor_ratio: &ratios,
            client_enqueue: &clients,
            ok,
            counts: (!ok).then(|| Counts {
                created,
                claimed: n_claimed,
                acked,
                promoted,
                left: Left::of(sets, Some(records)),
                floor: floor.counts.as_ref(),
            }),
        },
    );
    let c = |k: &str| get(&cost, k);
    let x = |k: &str| get(&ratios, k);
    r.text = format!(
        "{:<10} one job per call, Redis µs per call: enqueue {} ({}× the floor's), claim from the pool {} ({}× the floor's promote + claim), ack {} ({}×); the steady path {}× the floor's four calls  {}",
        "calls",
        c("enqueue"),
        x("enqueue"),
        c("claim_pool"),
        x("claim_pool"),
        c("ack"),
        x("ack"),
        x("steady_path"),
        status(ok)
    );
    r.text = format!("{}\n{:<10} {}", r.text, "", client_enqueue::line(&clients));
    Ok(r)
}
