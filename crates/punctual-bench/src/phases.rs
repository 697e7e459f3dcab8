//! The phases of the bench protocol, and the segments and the `serve` path.
//!
//! Each job's payload carries its number (`{"order_id": <n>, ...}`); the
//! in-process no-op handler counts the calls per number, so a lost or a
//! doubled job shows in the phase's `ok`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use indicatif::ProgressBar;
use punctual::raw;
use punctual::{
    Delivery, EnqueueStatus, Job, Outcome, Queue, Scheduler, SchedulerConfig, TopicKeys, When,
    Worker, WorkerConfig,
};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::probe::{round, Profile, Snapshot};
use super::target::{keys_of, PREFIX, TOPIC};
use super::{Bench, Report};

/// Bytes of each payload, as the protocol asks.
pub(crate) const PAYLOAD_BYTES: usize = 100;
/// Most jobs per enqueue call (the script's limit).
const CHUNK: u64 = punctual::MAX_BATCH as u64;

/// Ticks of the promote phases: full batches, promotion never refused.
const BENCH_TICK: raw::TickLimits = raw::TickLimits {
    promote_batch: punctual::MAX_BATCH,
    max_ready: 1_000_000_000,
    reclaim_batch: punctual::MAX_BATCH,
};

/// The payload of job `n`: `{"order_id": n, "action": "close", "pad": "xx…"}`,
/// padded to [`PAYLOAD_BYTES`].
pub(crate) fn payload(n: u64) -> Vec<u8> {
    let head = format!("{{\"order_id\": {n}, \"action\": \"close\", \"pad\": \"");
    let tail = "\"}";
    let pad = PAYLOAD_BYTES.saturating_sub(head.len() + tail.len());
    let mut s = head;
    s.push_str(&"x".repeat(pad));
    s.push_str(tail);
    s.into_bytes()
}

/// The job number in a payload made by [`payload`].
fn order_id(p: &[u8]) -> Option<usize> {
    let rest = p.strip_prefix(b"{\"order_id\": ")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// Counts handler calls per job number; optionally keeps each lateness.
struct Recorder {
    seen: Vec<AtomicU32>,
    handled: AtomicU64,
    strays: AtomicU64,
    /// (lateness, Redis clock at claim - due), microseconds.
    lateness: Option<Mutex<Vec<(i64, i64)>>>,
    expected: u64,
    all_in: Notify,
}

/// What the handler saw.
#[derive(Debug, Clone, Copy)]
struct Tally {
    handled: u64,
    /// Jobs never handled.
    lost: u64,
    /// Jobs handled more than once.
    doubled: u64,
    /// Calls for payloads that are not one of this phase's jobs.
    strays: u64,
}

impl Tally {
    fn exact(&self, n: u64) -> bool {
        self.handled == n && self.lost == 0 && self.doubled == 0 && self.strays == 0
    }
}

impl Recorder {
    fn new(expected: u64, lateness: bool) -> Arc<Recorder> {
        Arc::new(Recorder {
            seen: (0..expected).map(|_| AtomicU32::new(0)).collect(),
            handled: AtomicU64::new(0),
            strays: AtomicU64::new(0),
            lateness: lateness.then(|| Mutex::new(Vec::with_capacity(expected as usize))),
            expected,
            all_in: Notify::new(),
        })
    }

    /// The handler's work: note the start (lateness) and count the call.
    fn record(&self, d: &Delivery) {
        if let Some(l) = &self.lateness {
            let late = d.lateness_us();
            l.lock()
                .unwrap()
                .push((late, d.claimed_us - d.due_ms * 1000));
        }
        match order_id(&d.payload) {
            Some(i) if i < self.seen.len() => {
                self.seen[i].fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.strays.fetch_add(1, Ordering::Relaxed);
            }
        }
        if self.handled.fetch_add(1, Ordering::AcqRel) + 1 == self.expected {
            self.all_in.notify_one();
        }
    }

    fn handled(&self) -> u64 {
        self.handled.load(Ordering::Acquire)
    }

    fn tally(&self) -> Tally {
        let (mut lost, mut doubled) = (0, 0);
        for c in &self.seen {
            match c.load(Ordering::Relaxed) {
                0 => lost += 1,
                1 => {}
                _ => doubled += 1,
            }
        }
        Tally {
            handled: self.handled(),
            lost,
            doubled,
            strays: self.strays.load(Ordering::Relaxed),
        }
    }

    /// Waits until every expected call arrived or `deadline`; true when all did.
    async fn wait_all(&self, bar: &ProgressBar, deadline: Instant) -> bool {
        loop {
            let h = self.handled();
            bar.set_position(h);
            if h >= self.expected {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::select! {
                _ = self.all_in.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }
}

/// In-process consumers: workers (--consumers, usually one), and a
/// scheduler when asked, each on a connection of its own (as the processes
/// of `punctual serve` are).
struct Consumer {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<punctual::Result<()>>>,
}

/// The connections of a consumer, opened before the clock starts.
struct Connections {
    workers: Vec<Queue>,
    scheduler: Option<Queue>,
}

impl Consumer {
    async fn connect(b: &Bench, workers: u64, scheduler: bool) -> Result<Connections> {
        let mut queues = Vec::new();
        for _ in 0..workers {
            queues.push(b.queue().await?);
        }
        Ok(Connections {
            workers: queues,
            scheduler: if scheduler {
                Some(b.queue().await?)
            } else {
                None
            },
        })
    }

    fn start(conns: Connections, rec: Arc<Recorder>, config: WorkerConfig) -> Consumer {
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        for q in conns.workers {
            let rec = rec.clone();
            let worker = Worker::new(q, config.clone()).handle(TOPIC, move |d: Delivery| {
                let rec = rec.clone();
                async move {
                    rec.record(&d);
                    Outcome::Done
                }
            });
            let s = stop.clone();
            tasks.push(tokio::spawn(async move {
                worker.run(s.cancelled_owned()).await.map(drop)
            }));
        }
        if let Some(q) = conns.scheduler {
            let scheduler = Scheduler::new(q, SchedulerConfig::default()).topic(TOPIC);
            tasks.push(tokio::spawn(scheduler.run(stop.clone().cancelled_owned())));
        }
        Consumer { stop, tasks }
    }

    async fn stop(self) -> Result<()> {
        self.stop.cancel();
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .context("the bench's consumer did not stop within 30 s")?
                .context("the bench's consumer panicked")?
                .context("the bench's consumer failed")?;
        }
        Ok(())
    }
}

impl Bench {
    /// A new connection (a `Queue` of its own) under the bench prefix.
    pub(super) async fn queue(&self) -> Result<Queue> {
        Ok(Queue::builder(self.target.url.as_str())
            .prefix(PREFIX)
            .response_timeout(Duration::from_secs(30))
            .connect()
            .await?)
    }

    /// `partitions`, when the topic has more than one (generated ids are
    /// then made by the client, 21 bytes instead of 12), and `id_bytes`.
    fn layout(&self) -> Layout {
        Layout {
            partitions: (self.args.partitions > 1).then_some(self.args.partitions),
            id_bytes: self.args.id_bytes,
        }
    }

    /// On a cluster: which master serves each partition of the topic.
    async fn placement(&self) -> Result<Option<Placement>> {
        let placement = self.target.placement().await?;
        if placement.is_empty() {
            return Ok(None);
        }
        let masters: std::collections::BTreeSet<&str> =
            placement.iter().map(|(_, m)| m.as_str()).collect();
        Ok(Some(Placement {
            masters: self.target.masters.len() as u64,
            masters_used: masters.len() as u64,
            placement: placement.iter().cloned().collect(),
        }))
    }

    fn consumer_config(&self) -> WorkerConfig {
        WorkerConfig::default()
            .concurrency(self.args.concurrency as usize)
            .claim_batch(self.args.claim_batch as usize)
    }

    /// Waits until `n` workers and one scheduler listen for wake-ups (on
    /// every partition).
    async fn wait_listening(&self, workers: u64, scheduler: bool, why: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (mut w, mut s) = (u64::MAX, u64::MAX);
            for p in &self.target.parts {
                w = w.min(self.target.subscribers(keys_of(p).ready()).await?);
                s = s.min(self.target.subscribers(keys_of(p).pool()).await?);
            }
            if w >= workers && (!scheduler || s >= 1) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{why}: the consumers did not subscribe to their wake-ups within 20 s ({w} workers, {s} schedulers listening)");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until every job record is gone (every ack landed); true when so.
    async fn wait_acked(&self, deadline: Instant) -> Result<bool> {
        loop {
            if self.target.records().await? == 0 {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Enqueues jobs `0..n` due `when`, in calls of 1,000 with `--inflight` at
/// once. Returns the time taken (jobs are built before the clock starts) and
/// how many were created.
async fn load(
    b: &Bench,
    queue: &Queue,
    n: u64,
    when: When,
    bar: &ProgressBar,
) -> Result<(Duration, u64)> {
    let chunks: Vec<Vec<Job>> = (0..n)
        .step_by(CHUNK as usize)
        .map(|s| {
            (s..(s + CHUNK).min(n))
                .map(|i| {
                    match b.args.id_bytes {
                        Some(w) => Job::new(payload(i)).id(format!("{i:0>w$}", w = w as usize)),
                        None => Job::new(payload(i)),
                    }
                    .when(when)
                })
                .collect()
        })
        .collect();
    let t0 = Instant::now();
    let mut calls = futures::stream::iter(chunks)
        .map(|jobs| {
            let q = queue.clone();
            async move {
                let k = jobs.len() as u64;
                q.enqueue_batch(TOPIC, jobs).await.map(|r| (k, r))
            }
        })
        .buffer_unordered(b.args.inflight as usize);
    let mut created = 0;
    while let Some(r) = calls.next().await {
        let (k, r) = r.context("enqueue failed")?;
        created += r
            .iter()
            .filter(|e| e.status == EnqueueStatus::Created)
            .count() as u64;
        bar.inc(k);
    }
    Ok((t0.elapsed(), created))
}

/// Min, p50, p99 and max of samples in microseconds, reported in ms.
struct Spread {
    sorted: Vec<i64>,
}

impl Spread {
    fn of(mut v: Vec<i64>) -> Spread {
        v.sort_unstable();
        Spread { sorted: v }
    }

    /// Nearest-rank percentile, in ms (0 when empty).
    fn ms(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let n = self.sorted.len();
        let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
        round(self.sorted[i] as f64 / 1000.0, 2)
    }

    fn percentiles(&self) -> Percentiles {
        Percentiles {
            min: self.ms(0.0),
            p50: self.ms(0.5),
            p99: self.ms(0.99),
            max: self.ms(1.0),
        }
    }

    fn text(&self) -> String {
        format!(
            "min {} ms, p50 {} ms, p99 {} ms, max {} ms",
            self.ms(0.0),
            self.ms(0.5),
            self.ms(0.99),
            self.ms(1.0)
        )
    }
}

fn per_s(n: u64, d: Duration) -> f64 {
    (n as f64 / d.as_secs_f64().max(1e-9)).round()
}

/// `partitions` (when more than one) and `id_bytes` (when given).
#[derive(Serialize)]
struct Layout {
    #[serde(skip_serializing_if = "Option::is_none")]
    partitions: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id_bytes: Option<u64>,
}

/// On a cluster: the masters, how many the topic's partitions use, and
/// which serves each partition.
#[derive(Serialize)]
struct Placement {
    masters: u64,
    masters_used: u64,
    placement: std::collections::BTreeMap<String, String>,
}

/// Lateness percentiles, ms.
#[derive(Serialize)]
struct Percentiles {
    min: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

/// What the topic still holds (in a phase that is not ok).
#[derive(Serialize)]
pub(crate) struct Left {
    pool: u64,
    ready: u64,
    running: u64,
    dead: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<u64>,
}

impl Left {
    pub(crate) fn of(sets: [u64; 4], records: Option<u64>) -> Left {
        let [pool, ready, running, dead] = sets;
        Left {
            pool,
            ready,
            running,
            dead,
            records,
        }
    }
}

/// The counts of a phase with an in-process handler that is not ok.
#[derive(Serialize)]
struct Counts {
    handled: u64,
    lost: u64,
    doubled: u64,
    strays: u64,
    left: Left,
}

fn counts(t: &Tally, left: [u64; 4], records: u64) -> Counts {
    Counts {
        handled: t.handled,
        lost: t.lost,
        doubled: t.doubled,
        strays: t.strays,
        left: Left::of(left, Some(records)),
    }
}

fn status(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "NOT OK"
    }
}

/// `enqueue` and `memory`: N jobs due in 1 h; jobs/s, and Redis memory per
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
                total += b
                    .target
                    .query::<Option<u64>>(
                        redis::cmd("MEMORY")
                            .arg("USAGE")
                            .arg(k)
                            .arg("SAMPLES")
                            .arg(0),
                    )
                    .await?
                    .unwrap_or(0);
            }
            Ok::<u64, anyhow::Error>(total)
        }
    };
    let (pool, jobs) = (usage(TopicKeys::pool).await?, usage(TopicKeys::jobs).await?);
    let nf = n as f64;
    #[derive(Serialize)]
    struct KeysBytes {
        pool: f64,
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
                jobs: round(jobs as f64 / nf, 1),
            },
            layout: b.layout(),
            ok,
        },
    );
    m.text = format!(
        "{:<10} {:.0} bytes per waiting job ({PAYLOAD_BYTES}-byte payload{}): pool ZSET {:.0} + records HASH {:.0}, the rest allocator and dict overhead  {}",
        "memory",
        used / nf,
        match b.args.id_bytes {
            Some(w) => format!(", {w}-byte ids of the caller's"),
            None if b.args.partitions > 1 => ", partitioned: 21-byte ids made by the client".into(),
            None => String::new(),
        },
        pool as f64 / nf,
        jobs as f64 / nf,
        status(ok)
    );
    Ok((e, m))
}

/// `drain` (worker + scheduler) and the `consume` segment (worker alone):
/// N due jobs loaded first, then one consumer; time to the last ack.
pub(crate) async fn drain(b: &Bench, scheduler: bool) -> Result<Report> {
    let name = if scheduler { "drain" } else { "consume" };
    let n = b.args.n;
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
    let acked = all && b.wait_acked(deadline).await?;
    let elapsed = t0.elapsed();
    let after = Snapshot::take(&b.target).await?;
    bar.finish_and_clear();
    consumer.stop().await?;
    let tally = rec.tally();
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = created == n && acked && tally.exact(n) && sets == [0; 4] && records == 0;
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
        "{name:<10} {n} due jobs, {} (concurrency {}, claims of up to {}{}): last ack after {:.3} s: {:.0} jobs/s  {}\n{}",
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

/// `precision`: consumers running; --rate jobs/s for --secs, each due in
/// [100, 2000] ms; lateness = handler start - due.
pub(crate) async fn precision(b: &Bench) -> Result<Report> {
    let (rate, secs) = (b.args.rate, b.args.secs);
    let total = rate * secs;
    let rec = Recorder::new(total, true);
    let producer = b.queue().await?;
    let conns = Consumer::connect(b, b.args.consumers, true).await?;
    let consumer = Consumer::start(conns, rec.clone(), b.consumer_config());
    b.wait_listening(b.args.consumers, true, "precision")
        .await?;
    let bar = b.bar(total, "precision");
    let before = Snapshot::take(&b.target).await?;
    let t0 = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(20_000);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    while sent < total {
        tick.tick().await;
        let due = ((t0.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        if due > sent {
            let jobs: Vec<Job> = (sent..due)
                .map(|i| {
                    let delay = Duration::from_millis(rng.random_range(100..=2000));
                    Job::new(payload(i)).delay(delay)
                })
                .collect();
            producer
                .enqueue_batch(TOPIC, jobs)
                .await
                .context("precision: enqueue failed")?;
            sent = due;
        }
        bar.set_position(rec.handled());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let all = rec.wait_all(&bar, deadline).await;
    let acked = all && b.wait_acked(deadline).await?;
    let elapsed = t0.elapsed();
    let after = Snapshot::take(&b.target).await?;
    bar.finish_and_clear();
    consumer.stop().await?;
    let tally = rec.tally();
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = acked && tally.exact(total) && sets == [0; 4] && records == 0;
    let samples = rec
        .lateness
        .as_ref()
        .map(|l| std::mem::take(&mut *l.lock().unwrap()))
        .unwrap_or_default();
    let late = Spread::of(samples.iter().map(|s| s.0).collect());
    let at_claim = Spread::of(samples.iter().map(|s| s.1).collect());
    let to_start = Spread::of(samples.iter().map(|s| s.0 - s.1).collect());
    let early = samples.iter().filter(|s| s.0 < 0).count() as u64;
    let profile = after.profile(&before, tally.handled, elapsed);

    #[derive(Serialize)]
    struct Parts {
        due_to_claim: Percentiles,
        claim_to_start: Percentiles,
    }
    #[derive(Serialize)]
    struct Precision {
        rate: u64,
        secs: u64,
        n: u64,
        lateness_ms: Percentiles,
        early: u64,
        parts_ms: Parts,
        #[serde(skip_serializing_if = "Option::is_none")]
        consumers: Option<u64>,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(flatten)]
        counts: Option<Counts>,
        profile: Profile,
    }
    let mut r = Report::of(
        "precision",
        &Precision {
            rate,
            secs,
            n: total,
            lateness_ms: late.percentiles(),
            early,
            parts_ms: Parts {
                due_to_claim: at_claim.percentiles(),
                claim_to_start: to_start.percentiles(),
            },
            consumers: (b.args.consumers > 1).then_some(b.args.consumers),
            layout: b.layout(),
            ok,
            counts: (!ok).then(|| counts(&tally, sets, records)),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} {total} jobs at {rate}/s for {secs} s, due in 100..2000 ms: lateness {}; {early} started early  {}\n           due -> claim (Redis clock) {}; claim -> handler start (local) {}\n{}",
        "precision",
        late.text(),
        status(ok),
        at_claim.text(),
        to_start.text(),
        profile.text()
    );
    Ok(r)
}

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

/// The `promote` segment: N jobs in pool, all due; scheduler ticks (batches
/// of 1,000, one tick at a time, as the scheduler does) until pool is empty.
pub(crate) async fn promote(b: &Bench) -> Result<Report> {
    let n = b.args.n;
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
    // Wait until the last job is due.
    let mut last_due: Option<f64> = None;
    for k in b.target.keys(TopicKeys::pool) {
        let last: Vec<(String, f64)> = b
            .target
            .query(
                redis::cmd("ZRANGE")
                    .arg(k)
                    .arg(-1)
                    .arg(-1)
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
    let ok = created == n && promoted == n && sets == [0, n, 0, 0];
    let profile = after.profile(&before, promoted, elapsed);
    #[derive(Serialize)]
    struct Promote {
        n: u64,
        jobs_per_s: f64,
        secs: f64,
        batch: u64,
        ticks: u64,
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
            layout: b.layout(),
            ok,
            promoted: (!ok).then_some(promoted),
            left: (!ok).then(|| Left::of(sets, None)),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} {n} due jobs pool -> ready in {ticks} ticks of up to {}, {:.3} s: {:.0} jobs/s  {}\n{}",
        "promote",
        punctual::MAX_BATCH,
        elapsed.as_secs_f64(),
        per_s(promoted, elapsed),
        status(ok),
        profile.text()
    );
    Ok(r)
}

/// `scripts`: the Redis cost of each script on a job's path, alone: N jobs
/// enqueued (due in 50 ms), promoted, claimed and acked, one call of 1,000
/// jobs at a time, nothing else running. The sum bounds what one Redis core
/// can drain.
pub(crate) async fn scripts(b: &Bench) -> Result<Report> {
    let n = b.args.n;
    let q = b.queue().await?;
    let chunk = CHUNK as usize;
    let bar = b.bar(4 * n, "scripts");
    let mut cost = serde_json::Map::new();
    let mut cpu = serde_json::Map::new();
    let mut total_us = 0.0;
    let mut measure = |name: &str, before: &Snapshot, after: &Snapshot, jobs: u64| {
        let (_, usec) = after.scripts_since(before);
        let us = usec as f64 / jobs.max(1) as f64;
        if name != "enqueue" {
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
            if !t.more && t.next_due.is_none() {
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
    // Per partition: the lease of each claimed job.
    let mut claimed: Vec<Vec<raw::Lease>> = vec![Vec::new(); parts.len()];
    for (physical, held) in parts.iter().zip(claimed.iter_mut()) {
        let part = physical.parse()?;
        loop {
            let got = raw::claim(&q, &part, chunk, Duration::from_secs(60)).await?;
            if got.is_empty() {
                break;
            }
            bar.inc(got.len() as u64);
            held.extend(got.iter().map(|d| d.lease()));
        }
    }
    let n_claimed: u64 = claimed.iter().map(|c| c.len() as u64).sum();
    let after = Snapshot::take(&b.target).await?;
    measure("claim", &before, &after, n_claimed);

    let before = Snapshot::take(&b.target).await?;
    let mut acked = 0u64;
    for (physical, held) in parts.iter().zip(&claimed) {
        for pairs in held.chunks(chunk) {
            acked += raw::ack(&q, &physical.parse()?, pairs)
                .await?
                .iter()
                .filter(|ok| **ok)
                .count() as u64;
            bar.inc(pairs.len() as u64);
        }
    }
    let after = Snapshot::take(&b.target).await?;
    measure("ack", &before, &after, acked);
    bar.finish_and_clear();

    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = created == n
        && promoted == n
        && n_claimed == n
        && acked == n
        && sets == [0; 4]
        && records == 0;
    let ceiling = (1e6 / total_us.max(1e-9)).round();
    /// The counts of a `scripts` run that is not ok.
    #[derive(Serialize)]
    struct Steps {
        created: u64,
        promoted: u64,
        claimed: u64,
        acked: u64,
    }
    #[derive(Serialize)]
    struct Scripts<'a> {
        n: u64,
        batch: u64,
        script_us_per_job: &'a serde_json::Map<String, serde_json::Value>,
        redis_cpu_us_per_job: &'a serde_json::Map<String, serde_json::Value>,
        drain_ceiling_jobs_per_s: f64,
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
            layout: b.layout(),
            ok,
            steps: (!ok).then_some(Steps {
                created,
                promoted,
                claimed: n_claimed,
                acked,
            }),
        },
    );
    let part = |k: &str| cost.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
    r.text = format!(
        "{:<10} Redis µs per job inside each script (batches of {CHUNK}): enqueue {}, promote {}, claim {}, ack {}; promote + claim + ack = {:.2} µs: at most {ceiling:.0} jobs/s per Redis core  {}",
        "scripts",
        part("enqueue"),
        part("promote"),
        part("claim"),
        part("ack"),
        total_us,
        status(ok)
    );
    Ok(r)
}

/// The `serve` path: `punctual serve` (this binary) with an exec handler
/// running `true`; --serve-n jobs due now; time until all are done.
pub(crate) async fn serve(b: &Bench) -> Result<Report> {
    let true_path = which("true").unwrap_or_else(|| "true".into());
    let handler = Handler {
        toml: format!("exec = [{true_path:?}]"),
        label: "exec true".into(),
        text: "exec `true` per job".into(),
    };
    let dir = tempfile::Builder::new()
        .prefix("punctual-bench-serve-")
        .tempdir()?;
    serve_path(b, "serve", b.args.serve_n, &handler, dir.path()).await
}

/// A handler of the `serve` path: its TOML lines and how reports name it.
struct Handler {
    toml: String,
    label: String,
    text: String,
}

/// A no-op resident handler in PHP: the protocol in 15 lines.
const PHP_NOOP: &str = r#"<?php
// A no-op resident handler (docs/RESIDENT.md): every job is done.
$jobs = fopen('php://fd/' . (getenv('PUNCTUAL_JOBS_FD') ?: 3), 'r');
$replies = fopen('php://fd/' . (getenv('PUNCTUAL_REPLIES_FD') ?: 4), 'w');
fwrite($replies, "{\"type\":\"ready\",\"protocol\":1,\"inflight\":1}\n");
fflush($replies);
while (($line = fgets($jobs)) !== false) {
    $job = json_decode($line, true);
    fwrite($replies, json_encode(['type' => 'done', 'id' => $job['id']]) . "\n");
    fflush($replies);
}
exit(0);
"#;

/// The same in Python, where PHP is not installed.
const PYTHON_NOOP: &str = r#"import json, os
jobs = os.fdopen(int(os.environ.get("PUNCTUAL_JOBS_FD", "3")), "rb")
replies = os.fdopen(int(os.environ.get("PUNCTUAL_REPLIES_FD", "4")), "w")
replies.write('{"type":"ready","protocol":1,"inflight":1}\n')
replies.flush()
for line in jobs:
    replies.write(json.dumps({"type": "done", "id": json.loads(line)["id"]}) + "\n")
    replies.flush()
"#;

/// The resident phase: in one run, a no-op exec handler (`php -r ''`, or
/// `python3 -c ''` without PHP) on --serve-n jobs, then a no-op resident
/// handler in the same language on --resident-n jobs; jobs/s, serve's CPU
/// per job (handler processes included) and the ratio.
pub(crate) async fn resident(b: &Bench) -> Result<Report> {
    let dir = tempfile::Builder::new()
        .prefix("punctual-bench-resident-")
        .tempdir()?;
    let (lang, exec_argv, resident_argv) = match which("php") {
        Some(php) => {
            let script = dir.path().join("noop.php");
            std::fs::write(&script, PHP_NOOP)?;
            (
                "php",
                vec![php.clone(), "-r".into(), String::new()],
                vec![php, script.display().to_string()],
            )
        }
        None => {
            let py = which("python3").context("the resident phase needs php or python3 on PATH")?;
            let script = dir.path().join("noop.py");
            std::fs::write(&script, PYTHON_NOOP)?;
            (
                "python",
                vec![py.clone(), "-c".into(), String::new()],
                vec![py, script.display().to_string()],
            )
        }
    };
    let exec = Handler {
        toml: format!("exec = {exec_argv:?}"),
        label: format!("exec {lang} no-op"),
        text: format!("exec {exec_argv:?} per job"),
    };
    let processes = b.args.resident_processes;
    let res = Handler {
        toml: format!("resident = {resident_argv:?}\nprocesses = {processes}"),
        label: format!("resident {lang} no-op"),
        text: format!("resident {lang} no-op, {processes} per worker"),
    };
    let e = serve_path(b, "resident-exec", b.args.serve_n, &exec, dir.path()).await?;
    b.clean().await?;
    let r = serve_path(b, "resident", b.args.resident_n, &res, dir.path()).await?;
    let f = |rep: &Report, k: &str| {
        rep.get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    };
    let (ej, rj) = (f(&e, "jobs_per_s"), f(&r, "jobs_per_s"));
    let (ec, rc) = (f(&e, "serve_cpu_us_per_job"), f(&r, "serve_cpu_us_per_job"));
    let ratio = if ej > 0.0 { rj / ej } else { 0.0 };
    let ok = e.ok() && r.ok();
    let (workers, concurrency) = b.args.serve_workers;
    #[derive(Serialize)]
    struct Resident<'a> {
        language: &'a str,
        workers: u64,
        concurrency: u64,
        processes: u64,
        exec_n: u64,
        exec_jobs_per_s: f64,
        exec_cpu_us_per_job: f64,
        resident_n: u64,
        resident_jobs_per_s: f64,
        resident_cpu_us_per_job: f64,
        ratio: f64,
        jobs_per_s: f64,
        ok: bool,
        /// The two runs' lines, when not ok.
        #[serde(skip_serializing_if = "Option::is_none")]
        exec: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        resident_run: Option<String>,
    }
    let mut rep = Report::of(
        "resident",
        &Resident {
            language: lang,
            workers: workers as u64,
            concurrency: concurrency as u64,
            processes,
            exec_n: b.args.serve_n,
            exec_jobs_per_s: round(ej, 1),
            exec_cpu_us_per_job: ec,
            resident_n: b.args.resident_n,
            resident_jobs_per_s: round(rj, 1),
            resident_cpu_us_per_job: rc,
            ratio: round(ratio, 1),
            jobs_per_s: round(rj, 1),
            ok,
            exec: (!ok).then(|| e.line()),
            resident_run: (!ok).then(|| r.line()),
        },
    );
    rep.text = format!(
        "{}\n{}\n{:<10} resident {lang} no-op: {rj:.0} jobs/s, {rc:.0} µs CPU/job; exec {lang} no-op: {ej:.0} jobs/s, {ec:.0} µs CPU/job: {ratio:.1}x the jobs/s  {}",
        e.text,
        r.text,
        "resident",
        status(ok)
    );
    Ok(rep)
}

/// `punctual serve` (this binary) with `handler` on `n` jobs due now; time
/// until all are done.
async fn serve_path(
    b: &Bench,
    phase: &str,
    n: u64,
    handler: &Handler,
    dir: &std::path::Path,
) -> Result<Report> {
    let (workers, concurrency) = b.args.serve_workers;
    let config = dir.join(format!("{phase}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"redis = {url:?}
prefix = {PREFIX:?}
workers = {workers}
concurrency = {concurrency}
schedulers = 1
lease = "30s"
shutdown_timeout = "10s"

[topics.{TOPIC}]
{handler}
timeout = "30s"
partitions = {partitions}
"#,
            url = b.target.url,
            handler = handler.toml,
            partitions = b.args.partitions,
        ),
    )?;
    let log = dir.join(format!("{phase}.log"));
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PUNCTUAL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("PUNCTUAL_LOG", "warn");
    let mut child = cmd.spawn().context("cannot start punctual serve")?;
    let tail = |log: &std::path::Path| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    };
    if let Err(e) = b.wait_listening(workers as u64, true, phase).await {
        let _ = child.start_kill();
        bail!("{e:#}; serve's log: {}", tail(&log));
    }

    let producer = b.queue().await?;
    let jobs: Vec<Job> = (0..n).map(|i| Job::new(payload(i))).collect();
    let bar = b.bar(n, phase);
    let deadline = Instant::now() + Duration::from_secs(120) + Duration::from_millis(10 * n);
    let before = Snapshot::take(&b.target).await?;
    let t0 = Instant::now();
    let enqueued = producer.enqueue_batch(TOPIC, jobs).await?;
    let created = enqueued
        .iter()
        .filter(|e| e.status == EnqueueStatus::Created)
        .count() as u64;
    let mut finished = false;
    while Instant::now() < deadline {
        // Every job was enqueued above: the records left are the jobs not
        // yet acked (one HLEN per poll, the least Redis work).
        let left = b.target.records().await?;
        bar.set_position(n.saturating_sub(left));
        if left == 0 {
            finished = true;
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "punctual serve exited during the bench ({status}); its log: {}",
                tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = t0.elapsed();
    let after = Snapshot::take(&b.target).await?;
    bar.finish_and_clear();
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let cpu = Snapshot::take(&b.target).await?.children_cpu_since(&before);
    let stats = b.target.stats().await?;
    let get = |k: &str| stats.counters.get(k).copied().unwrap_or(0);
    let done = get("done");
    let sets = [stats.pool, stats.ready, stats.running, stats.dead];
    let records = b.target.records().await?;
    let ok = finished
        && created == n
        && done == n
        && get("retried") == 0
        && get("dead") == 0
        && sets == [0; 4]
        && records == 0;
    let profile = after.profile(&before, done, elapsed);
    /// The counts of a serve run that is not ok.
    #[derive(Serialize)]
    struct Done {
        done: u64,
        retried: u64,
        dead: u64,
        left: Left,
    }
    #[derive(Serialize)]
    struct Serve<'a> {
        n: u64,
        workers: u64,
        concurrency: u64,
        handler: &'a str,
        jobs_per_s: f64,
        secs: f64,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(flatten)]
        done: Option<Done>,
        serve_cpu_us_per_job: f64,
        profile: Profile,
    }
    let mut r = Report::of(
        phase,
        &Serve {
            n,
            workers: workers as u64,
            concurrency: concurrency as u64,
            handler: handler.label.as_str(),
            jobs_per_s: per_s(done, elapsed),
            secs: round(elapsed.as_secs_f64(), 3),
            layout: b.layout(),
            ok,
            done: (!ok).then(|| Done {
                done,
                retried: get("retried"),
                dead: get("dead"),
                left: Left::of(sets, Some(records)),
            }),
            serve_cpu_us_per_job: round(cpu as f64 / n.max(1) as f64, 1),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} punctual serve, {workers} workers x {concurrency}, {}: {n} jobs in {:.3} s: {:.0} jobs/s; serve's processes used {:.0} µs CPU per job (start and stop included)  {}\n           Redis {:.2} µs/job ({:.0}% busy), {:.1} script calls/1k jobs",
        phase,
        handler.text,
        elapsed.as_secs_f64(),
        per_s(done, elapsed),
        cpu as f64 / n.max(1) as f64,
        status(ok),
        profile.redis_cpu_us_per_job,
        profile.redis_busy_pct,
        profile.script_calls_per_1k_jobs,
    );
    Ok(r)
}

/// The full path of a program on PATH.
fn which(program: &str) -> Option<String> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
            .map(|p| p.display().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_100_bytes_and_carry_their_number() {
        for n in [0, 7, 99_999, 1_999_999] {
            let p = payload(n);
            assert_eq!(p.len(), PAYLOAD_BYTES, "{}", String::from_utf8_lossy(&p));
            assert_eq!(order_id(&p), Some(n as usize));
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
            assert_eq!(v["order_id"], n);
        }
        assert_eq!(order_id(b"{\"other\": 1}"), None);
    }
}
