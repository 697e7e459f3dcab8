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
use serde_json::{json, Map, Value};
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
    /// (lateness, Redis clock at claim - due) in microseconds, and the due
    /// time (epoch ms).
    lateness: Option<Mutex<Vec<(i64, i64, i64)>>>,
    /// The jobs expected: `seen`'s length, or fewer once a producer that
    /// ran flat out says how many it sent ([`Recorder::expect`]).
    expected: AtomicU64,
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
            lateness: lateness
                .then(|| Mutex::new(Vec::with_capacity(expected.min(1 << 20) as usize))),
            expected: AtomicU64::new(expected),
            all_in: Notify::new(),
        })
    }

    /// The handler's work: note the start (lateness) and count the call.
    fn record(&self, d: &Delivery) {
        if let Some(l) = &self.lateness {
            let late = d.lateness_us();
            l.lock()
                .unwrap()
                .push((late, d.claimed_us - d.due_ms * 1000, d.due_ms));
        }
        match order_id(&d.payload) {
            Some(i) if i < self.seen.len() => {
                self.seen[i].fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.strays.fetch_add(1, Ordering::Relaxed);
            }
        }
        if self.handled.fetch_add(1, Ordering::AcqRel) + 1 == self.expected() {
            self.all_in.notify_one();
        }
    }

    fn expected(&self) -> u64 {
        self.expected.load(Ordering::Acquire)
    }

    /// Expects jobs `0..n` only (n at most the capacity it was made with).
    fn expect(&self, n: u64) {
        self.expected
            .store(n.min(self.seen.len() as u64), Ordering::Release);
        self.all_in.notify_one();
    }

    fn handled(&self) -> u64 {
        self.handled.load(Ordering::Acquire)
    }

    fn tally(&self) -> Tally {
        let (mut lost, mut doubled) = (0, 0);
        let n = self.expected() as usize;
        let strays: u64 = self.seen[n..]
            .iter()
            .map(|c| u64::from(c.load(Ordering::Relaxed)))
            .sum();
        for c in &self.seen[..n] {
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
            strays: self.strays.load(Ordering::Relaxed) + strays,
        }
    }

    /// Waits until every expected call arrived or `deadline`; true when all did.
    async fn wait_all(&self, bar: &ProgressBar, deadline: Instant) -> bool {
        loop {
            let h = self.handled();
            bar.set_position(h);
            if h >= self.expected() {
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

/// In-process consumers: workers (--consumers, two by default), and a
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
    /// Generous timeouts: a loaded machine, or Redis freeing millions of
    /// jobs (--pool), can keep it from answering for seconds.
    pub(super) async fn queue(&self) -> Result<Queue> {
        self.queue_chunked(self.args.enqueue_chunk as usize).await
    }

    /// [`Bench::queue`] sending enqueue calls of `chunk` jobs.
    pub(super) async fn queue_chunked(&self, chunk: usize) -> Result<Queue> {
        Ok(Queue::builder(self.target.url.as_str())
            .prefix(PREFIX)
            .enqueue_chunk(chunk)
            .connect_timeout(Duration::from_secs(30))
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

    /// Waits until the records left are the pool's (`pool`, see
    /// [`fill_pool`]): every ack landed; true when so.
    async fn wait_acked(&self, deadline: Instant, pool: u64) -> Result<bool> {
        loop {
            if self.target.records().await? == pool {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Enqueues jobs `0..n` due `when`, in batches of 1,000 (each in calls of
/// --enqueue-chunk) with `--inflight` batches at once. Returns the time taken (jobs are built before the clock starts) and
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

/// The first job number of the pool's jobs (--pool): their payloads carry
/// numbers no phase expects, so a pool job handled by mistake is a stray.
const POOL_BASE: u64 = 1_000_000_000;

/// A pool job's delay: 1 day, plus up to 30 days spread over the jobs;
/// the jobs of one batch (1,000, in calls of --enqueue-chunk) share theirs,
/// so the script builds one record header per call and millions load
/// quickly.
fn pool_delay(i: u64) -> Duration {
    Duration::from_secs(86_400 + (i / CHUNK * 7_919) % (30 * 86_400))
}

/// Delays at least this long are the pool's (--pool), not a phase's jobs.
const POOL_HORIZON: Duration = Duration::from_secs(3_600 * 12);

/// Loads --pool jobs due in 1 to 31 days (after the phase's cleaning,
/// before its own jobs and its first snapshot), in batches of 1,000 (calls
/// of --enqueue-chunk) with --inflight batches at once, built as they go. Returns how many: the phase
/// expects that many jobs left in the pool, and records, at its end.
pub(crate) async fn fill_pool(b: &Bench) -> Result<u64> {
    let n = b.args.pool;
    if n == 0 {
        return Ok(0);
    }
    let queue = b.queue().await?;
    // As under `serve`, these jobs (1 to 31 days ahead) wait in the cold pool.
    first_tick(b, &queue).await.context("pool")?;
    let bar = b.bar(n, "pool");
    let mut calls = futures::stream::iter((0..n).step_by(CHUNK as usize))
        .map(|s| {
            let q = queue.clone();
            async move {
                let jobs: Vec<Job> = (s..(s + CHUNK).min(n))
                    .map(|i| Job::new(payload(POOL_BASE + i)).delay(pool_delay(i)))
                    .collect();
                let k = jobs.len() as u64;
                q.enqueue_batch(TOPIC, jobs).await.map(|r| {
                    let created = r
                        .iter()
                        .filter(|e| e.status == EnqueueStatus::Created)
                        .count() as u64;
                    (k, created)
                })
            }
        })
        .buffer_unordered(b.args.inflight as usize);
    let mut created = 0;
    while let Some(r) = calls.next().await {
        let (k, c) = r.context("pool: enqueue failed")?;
        created += c;
        bar.inc(k);
    }
    bar.finish_and_clear();
    if created != n {
        bail!("pool: {created} of {n} jobs created");
    }
    Ok(n)
}

/// One tick per partition, as a scheduler (`serve`) runs at its start: a
/// topic gets its cold pool, where jobs due `cold_after` (10 minutes) or
/// more ahead wait, only once a scheduler ticked on it (PROTOCOL.md "The
/// cold pool").
async fn first_tick(b: &Bench, queue: &Queue) -> Result<()> {
    for physical in &b.target.parts {
        raw::tick(queue, &physical.parse()?, &BENCH_TICK)
            .await
            .context("the first tick failed")?;
    }
    Ok(())
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

/// For `skip_serializing_if`: a pool of 0 is not reported.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// ", with N jobs waiting in the pool" (--pool), or nothing.
fn with_pool(pool: u64) -> String {
    if pool == 0 {
        String::new()
    } else {
        format!(", with {pool} jobs waiting in the pool")
    }
}

fn status(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "NOT OK"
    }
}

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

/// `precision`: consumers running; --rate jobs/s for --secs, each due in
/// [100, 2000] ms; lateness = handler start - due.
pub(crate) async fn precision(b: &Bench) -> Result<Report> {
    precision_at(b, "precision", Flow::Rate(b.args.rate), None).await
}

/// Targets of precision under load, ms: p99 ≤ 10 ms, max ≤ 50 ms, never
/// early, each run counted only with the producer at ≥ 95 % of its rate.
const LOAD_P99_MS: f64 = 10.0;
const LOAD_MAX_MS: f64 = 50.0;
/// The shares of the ceiling the target is measured at, %.
const CEILING_PCTS: [u64; 2] = [50, 80];
/// Jobs per second the flat-out run can hold at most, and jobs in all (its
/// recorder's size).
const FLAT_OUT_MAX_RATE: u64 = 400_000;
const FLAT_OUT_MAX_JOBS: u64 = 5_000_000;

/// `precision-load`: the precision phase at --load-rate jobs/s; then the
/// producer flat out for --secs (its ceiling: the rate it reaches with a
/// due time per job); then at 50 % and at 80 % of that ceiling. One line
/// each; every run but the flat-out one with the target (p99 ≤ 10 ms,
/// max ≤ 50 ms, never early, the producer at ≥ 95 % of the rate).
pub(crate) async fn precision_load(b: &Bench) -> Result<Vec<Report>> {
    let fixed = precision_at(
        b,
        "precision-load",
        Flow::Rate(b.args.load_rate),
        Some(LoadRate {
            rate_from: "fixed",
            ceiling_jobs_per_s: None,
            ceiling_pct: None,
        }),
    )
    .await?;
    b.clean().await?;
    let flat = precision_at(
        b,
        "precision-load",
        Flow::FlatOut,
        Some(LoadRate {
            rate_from: "flat-out",
            ceiling_jobs_per_s: None,
            ceiling_pct: None,
        }),
    )
    .await?;
    b.clean().await?;
    let ceiling = flat
        .get("achieved_rate")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let mut out = vec![fixed, flat];
    for pct in CEILING_PCTS {
        let rate = ((ceiling * pct as f64 / 100.0).round() as u64).clamp(1, 1_000_000);
        out.push(
            precision_at(
                b,
                "precision-load",
                Flow::Rate(rate),
                Some(LoadRate {
                    rate_from: "ceiling",
                    ceiling_jobs_per_s: Some(ceiling),
                    ceiling_pct: Some(pct),
                }),
            )
            .await?,
        );
        b.clean().await?;
    }
    Ok(out)
}

/// How a precision-load run got its rate.
#[derive(Serialize)]
struct LoadRate {
    /// "fixed" (--load-rate), "flat-out" (the ceiling's own run) or
    /// "ceiling" (a share of the flat-out run's rate).
    rate_from: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ceiling_jobs_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ceiling_pct: Option<u64>,
}

/// The producer of a precision run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// This many jobs per second (a batch every 10 ms), for --secs.
    Rate(u64),
    /// Batches of 1,000 back to back, each awaited, for --secs: the rate
    /// the producer reaches with a due time per job.
    FlatOut,
}

/// A probe sample: when it ended (local ms since the run's start) and how
/// long it was stuck, µs.
type Sample = (f64, i64);

/// Two probes running through a precision run, to tell where lateness
/// comes from. `lag`: how late a 1-ms timer of the bench's own runtime
/// fires (the producer and the consumers run on it: a late timer is a
/// process that had no core, or a runtime kept busy). `rtt`: the round
/// trip of a PING every 5 ms (Redis busy with a script or waiting for a
/// core, or the bench late to read the reply).
struct Probes {
    stop: CancellationToken,
    lag: JoinHandle<Vec<Sample>>,
    rtt: JoinHandle<Vec<Sample>>,
}

/// A probe sample longer than this is a stall.
const STALL_US: i64 = 5_000;

impl Probes {
    fn start(b: &Bench, t0: Instant) -> Probes {
        let stop = CancellationToken::new();
        let s = stop.clone();
        let lag = tokio::spawn(async move {
            let mut out = Vec::new();
            let tick = Duration::from_millis(1);
            while !s.is_cancelled() {
                let t = Instant::now();
                tokio::time::sleep(tick).await;
                let over = t.elapsed().saturating_sub(tick);
                out.push((t0.elapsed().as_secs_f64() * 1e3, over.as_micros() as i64));
            }
            out
        });
        let s = stop.clone();
        let mut conn = b.target.masters[0].node.conn();
        let rtt = tokio::spawn(async move {
            let mut out = Vec::new();
            let mut every = tokio::time::interval(Duration::from_millis(5));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !s.is_cancelled() {
                every.tick().await;
                let t = Instant::now();
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                if pong.is_err() {
                    break;
                }
                out.push((
                    t0.elapsed().as_secs_f64() * 1e3,
                    t.elapsed().as_micros() as i64,
                ));
            }
            out
        });
        Probes { stop, lag, rtt }
    }

    async fn stop(self) -> Result<(Vec<Sample>, Vec<Sample>)> {
        self.stop.cancel();
        Ok((self.lag.await?, self.rtt.await?))
    }
}

/// The stalls among `samples` as disjoint intervals of local ms, sorted.
fn stalls(samples: &[Sample]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.1 > STALL_US)
        .map(|&(end, us)| (end - us as f64 / 1e3, end))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (a, z) in v {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(z),
            _ => merged.push((a, z)),
        }
    }
    merged
}

/// Whether [from, to] (local ms) meets one of `stalls`.
fn meets(stalls: &[(f64, f64)], from: f64, to: f64) -> bool {
    let i = stalls.partition_point(|s| s.1 < from);
    stalls.get(i).is_some_and(|s| s.0 <= to)
}

/// The jobs later than [`LOAD_P99_MS`], and what their wait met: a stall of
/// the bench's runtime (`lag`), else a slow PING only (Redis's side), else
/// neither (the path itself: scheduler, wake-up, claim).
#[derive(Serialize)]
struct Late {
    over_ms: f64,
    jobs: u64,
    in_bench_stall: u64,
    in_redis_stall_only: u64,
    in_neither: u64,
}

/// The probes' spread, ms.
#[derive(Serialize)]
struct ProbesMs {
    bench_lag: Percentiles,
    bench_stalls: u64,
    redis_rtt: Percentiles,
    redis_stalls: u64,
}

/// The precision phase with `flow` for --secs; `load`: a run of
/// precision-load, with its target (but for the flat-out run).
async fn precision_at(
    b: &Bench,
    phase: &str,
    flow: Flow,
    load: Option<LoadRate>,
) -> Result<Report> {
    let secs = b.args.secs;
    let cap = match flow {
        Flow::Rate(rate) => rate * secs,
        Flow::FlatOut => (FLAT_OUT_MAX_RATE * secs).min(FLAT_OUT_MAX_JOBS),
    };
    let pool = fill_pool(b).await?;
    let rec = Recorder::new(cap, true);
    let producer = b.queue().await?;
    let conns = Consumer::connect(b, b.args.consumers, true).await?;
    let consumer = Consumer::start(conns, rec.clone(), b.consumer_config());
    b.wait_listening(b.args.consumers, true, phase).await?;
    let bar = b.bar(cap, phase);
    let before = Snapshot::take(&b.target).await?;
    // Redis's clock at the start, to place due times on the local clock.
    let redis_t0_ms = b.target.now_ms().await? as f64;
    let t0 = Instant::now();
    let probes = Probes::start(b, t0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(20_000);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    let run_for = Duration::from_secs(secs);
    loop {
        let due = match flow {
            Flow::Rate(rate) => {
                if sent >= cap {
                    break;
                }
                tick.tick().await;
                ((t0.elapsed().as_secs_f64() * rate as f64) as u64).min(cap)
            }
            Flow::FlatOut => {
                if sent >= cap || t0.elapsed() >= run_for {
                    break;
                }
                (sent + CHUNK).min(cap)
            }
        };
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
    let total = sent;
    rec.expect(total);
    bar.set_length(total);
    // How long the producer took to send them all: longer than --secs when
    // Redis could not take them at this rate (each call awaited in turn).
    let sent_secs = t0.elapsed().as_secs_f64();
    let achieved = (total as f64 / sent_secs.max(1e-9)).round();
    let rate = match flow {
        Flow::Rate(rate) => rate,
        Flow::FlatOut => achieved as u64,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let all = rec.wait_all(&bar, deadline).await;
    let acked = all && b.wait_acked(deadline, pool).await?;
    let elapsed = t0.elapsed();
    let after = Snapshot::take(&b.target).await?;
    let (lag, rtt) = probes.stop().await?;
    bar.finish_and_clear();
    consumer.stop().await?;
    let tally = rec.tally();
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = acked && tally.exact(total) && sets == [pool, 0, 0, 0] && records == pool;
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

    // Where the late jobs' waits went.
    let (bench_stalls, redis_stalls) = (stalls(&lag), stalls(&rtt));
    let over_us = (LOAD_P99_MS * 1000.0) as i64;
    let mut lates = Late {
        over_ms: LOAD_P99_MS,
        jobs: 0,
        in_bench_stall: 0,
        in_redis_stall_only: 0,
        in_neither: 0,
    };
    for s in samples.iter().filter(|s| s.0 > over_us) {
        lates.jobs += 1;
        let due = s.2 as f64 - redis_t0_ms;
        let started = due + s.0 as f64 / 1e3;
        if meets(&bench_stalls, due, started) {
            lates.in_bench_stall += 1;
        } else if meets(&redis_stalls, due, started) {
            lates.in_redis_stall_only += 1;
        } else {
            lates.in_neither += 1;
        }
    }
    let probes_ms = ProbesMs {
        bench_lag: Spread::of(lag.iter().map(|s| s.1).collect()).percentiles(),
        bench_stalls: bench_stalls.len() as u64,
        redis_rtt: Spread::of(rtt.iter().map(|s| s.1).collect()).percentiles(),
        redis_stalls: redis_stalls.len() as u64,
    };

    #[derive(Serialize)]
    struct Parts {
        due_to_claim: Percentiles,
        claim_to_start: Percentiles,
    }
    /// The target of precision under load, and whether the run met it.
    #[derive(Serialize)]
    struct Target {
        p99_ms: f64,
        max_ms: f64,
        never_early: bool,
        /// The producer sent at ≥ 95 % of the rate (else the run did not
        /// test that rate).
        rate_reached: bool,
        met: bool,
    }
    #[derive(Serialize)]
    struct Precision {
        rate: u64,
        secs: u64,
        n: u64,
        /// The rate the producer reached: n over the time it took to send
        /// them all (the jobs/s Redis took).
        achieved_rate: f64,
        sent_secs: f64,
        #[serde(flatten)]
        load: Option<LoadRate>,
        lateness_ms: Percentiles,
        early: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        target: Option<Target>,
        parts_ms: Parts,
        late: Late,
        probes_ms: ProbesMs,
        #[serde(skip_serializing_if = "Option::is_none")]
        consumers: Option<u64>,
        #[serde(skip_serializing_if = "is_zero")]
        pool: u64,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(flatten)]
        counts: Option<Counts>,
        profile: Profile,
    }
    let pct = late.percentiles();
    let rate_reached = achieved >= 0.95 * rate as f64;
    let target = (load.is_some() && flow != Flow::FlatOut).then_some(Target {
        p99_ms: LOAD_P99_MS,
        max_ms: LOAD_MAX_MS,
        never_early: true,
        rate_reached,
        met: ok && early == 0 && rate_reached && pct.p99 <= LOAD_P99_MS && pct.max <= LOAD_MAX_MS,
    });
    let met = target.as_ref().map(|t| t.met);
    let late_text = format!(
        "{} jobs later than {LOAD_P99_MS} ms: {} met a stall of the bench's runtime, {} a slow PING only, {} neither; bench timer lag p99 {} ms ({} stalls > {} ms), PING p99 {} ms ({} stalls)",
        lates.jobs,
        lates.in_bench_stall,
        lates.in_redis_stall_only,
        lates.in_neither,
        probes_ms.bench_lag.p99,
        probes_ms.bench_stalls,
        STALL_US / 1000,
        probes_ms.redis_rtt.p99,
        probes_ms.redis_stalls,
    );
    let mut r = Report::of(
        phase,
        &Precision {
            rate,
            secs,
            n: total,
            achieved_rate: achieved,
            sent_secs: round(sent_secs, 3),
            load,
            lateness_ms: pct,
            early,
            target,
            parts_ms: Parts {
                due_to_claim: at_claim.percentiles(),
                claim_to_start: to_start.percentiles(),
            },
            late: lates,
            probes_ms,
            consumers: (b.args.consumers > 1).then_some(b.args.consumers),
            pool,
            layout: b.layout(),
            ok,
            counts: (!ok).then(|| counts(&tally, sets, records)),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} {total} jobs at {rate}/s for {secs} s (sent in {sent_secs:.1} s: {achieved:.0}/s), due in 100..2000 ms{}: lateness {}; {early} started early{}  {}\n           due -> claim (Redis clock) {}; claim -> handler start (local) {}\n           {late_text}\n{}",
        phase,
        with_pool(pool),
        late.text(),
        match met {
            Some(true) => format!("; target (p99 ≤ {LOAD_P99_MS} ms, max ≤ {LOAD_MAX_MS} ms, never early) met"),
            Some(false) => format!(
                "; target (p99 ≤ {LOAD_P99_MS} ms, max ≤ {LOAD_MAX_MS} ms, never early{}) NOT met",
                if rate_reached { "" } else { ", at the rate: not reached" }
            ),
            None => String::new(),
        },
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

/// `scripts`: the Redis cost of each script on a job's path, alone: N jobs
/// enqueued (due in 50 ms), promoted, claimed and acked, one call of 1,000
/// jobs at a time, nothing else running. The sum bounds what one Redis core
/// can drain.
/// Claims in calls of `chunk`, one call at a time, partition after
/// partition, until a claim comes back empty: per partition, the lease of
/// each claimed job.
async fn claim_all(
    q: &Queue,
    parts: &[String],
    chunk: usize,
    bar: &ProgressBar,
) -> Result<Vec<Vec<raw::Lease>>> {
    let mut claimed: Vec<Vec<raw::Lease>> = vec![Vec::new(); parts.len()];
    for (physical, held) in parts.iter().zip(claimed.iter_mut()) {
        let part = physical.parse()?;
        loop {
            let got = raw::claim(q, &part, chunk, Duration::from_secs(60)).await?;
            if got.is_empty() {
                break;
            }
            bar.inc(got.len() as u64);
            held.extend(got.iter().map(|d| d.lease()));
        }
    }
    Ok(claimed)
}

/// Acks what [`claim_all`] claimed, in calls of `chunk`: how many acks
/// were accepted.
async fn ack_all(
    q: &Queue,
    parts: &[String],
    claimed: &[Vec<raw::Lease>],
    chunk: usize,
    bar: &ProgressBar,
) -> Result<u64> {
    let mut acked = 0u64;
    for (physical, held) in parts.iter().zip(claimed) {
        for pairs in held.chunks(chunk) {
            acked += raw::ack(q, &physical.parse()?, pairs)
                .await?
                .iter()
                .filter(|ok| **ok)
                .count() as u64;
            bar.inc(pairs.len() as u64);
        }
    }
    Ok(acked)
}

/// Jobs of the `calls` phase at most: every call is a round trip.
const CALLS_MAX: u64 = 2_000;

/// `calls`: one job per call, the shape of a producer that enqueues a job
/// per request and of a light steady flow. The floor's four steps with one
/// job per call, then punctual's enqueue (due in 50 ms), claim straight
/// from the pool (no tick) and ack, one job per call, on N jobs (at most
/// 2,000): Redis µs per call of each, and each over the floor's, measured
/// in this phase (a per-call cost the batches of the `floor` and `scripts`
/// phases spread over 1,000 jobs). Without --pool's jobs: the floor
/// checks that it leaves every set empty.
pub(crate) async fn calls(b: &Bench) -> Result<Report> {
    let n = b.args.n.min(CALLS_MAX);
    let floor = super::floor::run(b, n, 1).await?;
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
    let ok = floor.ok && mine_ok;

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
        floor: Option<&'a super::floor::Counts>,
    }
    #[derive(Serialize)]
    struct Calls<'a> {
        n: u64,
        batch: u64,
        script_us_per_call: &'a Map<String, Value>,
        floor_us_per_call: &'a Map<String, Value>,
        floor_ratio: &'a Map<String, Value>,
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
    Ok(r)
}

pub(crate) async fn scripts(b: &Bench) -> Result<Report> {
    let n = b.args.n;
    // The floor's four steps on the same layout right before this phase's
    // own (and, without --pool's jobs, right after them): a ratio of two
    // figures measured seconds apart, where the floor phase's came earlier
    // in the run, while the machine's speed drifts (BENCHMARKS.md at 509d4c9, round 11).
    b.clean().await?;
    let floor_before = super::floor::run(b, n, CHUNK as usize).await?;
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
        Some(super::floor::run(b, n, CHUNK as usize).await?)
    } else {
        None
    };
    let floors: Vec<&super::floor::Run> = std::iter::once(&floor_before)
        .chain(floor_after.as_ref())
        .collect();
    ok &= floors.iter().all(|f| f.ok);
    // A floor run that is not ok reports its own counts.
    let floor_counts: Vec<&super::floor::Counts> =
        floors.iter().filter_map(|f| f.counts.as_ref()).collect();
    let paired = super::floor::mean_script_us(&floors);
    let paired_ratio = super::floor::path_ratios(&cost, &paired);
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
        paired_floor_counts: Vec<&'a super::floor::Counts>,
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
        super::floor::ratios_text(&paired_ratio)
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

/// A case of the groups phase: how its N jobs are spread over groups.
#[derive(Debug, Clone, Copy)]
enum GroupCase {
    /// No group: the topic never switches groups on.
    Off,
    /// Job i in group `g<i mod K>`.
    Even(u64),
    /// Two tenants: jobs 0..big in group `big`, then the rest in `small`
    /// (100,000 : 100 scaled to N): the flood first, the small one after.
    Tenants { big: u64 },
}

impl GroupCase {
    /// The case's name in the phase's line.
    fn name(&self) -> String {
        match self {
            GroupCase::Off => "off".into(),
            GroupCase::Even(k) => k.to_string(),
            GroupCase::Tenants { .. } => "2_tenants".into(),
        }
    }

    fn group_of(&self, i: u64) -> Option<String> {
        match self {
            GroupCase::Off => None,
            GroupCase::Even(k) => Some(format!("g{}", i % k)),
            GroupCase::Tenants { big } if i < *big => Some("big".into()),
            GroupCase::Tenants { .. } => Some("small".into()),
        }
    }
}

/// What one case of the groups phase measured.
struct GroupRun {
    enqueue_us: f64,
    claim_us: f64,
    ack_us: f64,
    /// 1-based position, in claim order, of the last job numbered at or
    /// above `big` (the small tenant's jobs).
    last_small: u64,
    /// What went wrong (empty when every job was claimed once and acked).
    problems: Vec<String>,
}

/// One case: N jobs due now enqueued (their groups indexed on the way to
/// ready), all claimed, then all acked, one call of 1,000 at a time,
/// nothing else running; Redis µs per job inside each script (EVALSHA's
/// commandstats). Every job must be claimed once, in its own group, and
/// acked.
async fn groups_case(b: &Bench, q: &Queue, case: GroupCase, big: u64) -> Result<GroupRun> {
    let n = b.args.n;
    let us = |before: &Snapshot, after: &Snapshot, jobs: u64| {
        round(after.scripts_since(before).1 as f64 / jobs.max(1) as f64, 2)
    };
    let mut problems = Vec::new();
    let before = Snapshot::take(&b.target).await?;
    let mut created = 0u64;
    for s in (0..n).step_by(CHUNK as usize) {
        let jobs: Vec<Job> = (s..(s + CHUNK).min(n))
            .map(|i| match case.group_of(i) {
                Some(g) => Job::new(payload(i)).group(g),
                None => Job::new(payload(i)),
            })
            .collect();
        created += q
            .enqueue_batch(TOPIC, jobs)
            .await
            .context("groups: enqueue failed")?
            .iter()
            .filter(|e| e.status == EnqueueStatus::Created)
            .count() as u64;
    }
    let after = Snapshot::take(&b.target).await?;
    let enqueue_us = us(&before, &after, n);
    if created != n {
        problems.push(format!("{created} of {n} created"));
    }

    let mut seen = vec![0u32; n as usize];
    let (mut strays, mut wrong_group, mut position, mut last_small) = (0u64, 0u64, 0u64, 0u64);
    let mut held: Vec<Vec<raw::Lease>> = vec![Vec::new(); b.target.parts.len()];
    let before = Snapshot::take(&b.target).await?;
    for (physical, held) in b.target.parts.iter().zip(held.iter_mut()) {
        let part = physical.parse()?;
        loop {
            let got = raw::claim(q, &part, CHUNK as usize, Duration::from_secs(60)).await?;
            if got.is_empty() {
                break;
            }
            for d in &got {
                position += 1;
                match order_id(&d.payload) {
                    Some(i) if (i as u64) < n => {
                        seen[i] += 1;
                        if d.group != case.group_of(i as u64) {
                            wrong_group += 1;
                        }
                        if i as u64 >= big {
                            last_small = position;
                        }
                    }
                    _ => strays += 1,
                }
                held.push(d.lease());
            }
        }
    }
    let after = Snapshot::take(&b.target).await?;
    let claimed: u64 = held.iter().map(|h| h.len() as u64).sum();
    let claim_us = us(&before, &after, claimed);
    let lost = seen.iter().filter(|c| **c == 0).count();
    let doubled = seen.iter().filter(|c| **c > 1).count();
    if claimed != n || lost > 0 || doubled > 0 || strays > 0 {
        problems.push(format!(
            "claimed {claimed}: {lost} never, {doubled} twice, {strays} strays"
        ));
    }
    if wrong_group > 0 {
        problems.push(format!("{wrong_group} claimed with another group"));
    }
    let groups_left = b.target.queue.groups(TOPIC).await?.len();
    if groups_left > 0 {
        problems.push(format!("{groups_left} groups still indexed"));
    }

    let before = Snapshot::take(&b.target).await?;
    let mut acked = 0u64;
    for (physical, held) in b.target.parts.iter().zip(&held) {
        let part = physical.parse()?;
        for leases in held.chunks(CHUNK as usize) {
            acked += raw::ack(q, &part, leases)
                .await?
                .iter()
                .filter(|ok| **ok)
                .count() as u64;
        }
    }
    let after = Snapshot::take(&b.target).await?;
    let ack_us = us(&before, &after, acked);
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    if acked != n || sets != [0; 4] || records != 0 {
        problems.push(format!(
            "acked {acked}; left pool/ready/running/dead {sets:?}, {records} records"
        ));
    }
    Ok(GroupRun {
        enqueue_us,
        claim_us,
        ack_us,
        last_small,
        problems,
    })
}

/// `groups`: the claim's Redis µs per job with groups off, then with
/// --groups counts of groups (jobs spread evenly), then two tenants
/// (100,000 : 100 jobs, scaled to N; the small tenant's jobs enqueued after
/// the flood), each against groups off (and against the floor's claim, when
/// the floor ran). Also enqueue and ack per job, and where in the claim
/// order the small tenant's last job came, groups off and on.
pub(crate) async fn groups(b: &Bench) -> Result<Report> {
    let n = b.args.n;
    let small = ((n as f64 * 100.0 / 100_100.0).round() as u64).clamp(1, n);
    let big = n - small;
    let mut cases = vec![GroupCase::Off];
    cases.extend(b.args.groups.iter().map(|k| GroupCase::Even(*k)));
    cases.push(GroupCase::Tenants { big });
    // Calls of 1,000, one at a time, as the floor's.
    let q = b.queue_chunked(CHUNK as usize).await?;
    let bar = b.bar(cases.len() as u64, "groups");
    let (mut enqueue, mut claim, mut ack, mut x_off) =
        (Map::new(), Map::new(), Map::new(), Map::new());
    let mut last_small = Map::new();
    let mut problems = Map::new();
    let mut off_us = 0.0;
    let mut names = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        if c > 0 {
            b.clean().await?;
        }
        let name = case.name();
        let run = groups_case(b, &q, *case, big).await?;
        if matches!(case, GroupCase::Off) {
            off_us = run.claim_us;
        }
        if matches!(case, GroupCase::Off | GroupCase::Tenants { .. }) {
            last_small.insert(name.clone(), json!(run.last_small));
        }
        enqueue.insert(name.clone(), json!(run.enqueue_us));
        claim.insert(name.clone(), json!(run.claim_us));
        ack.insert(name.clone(), json!(run.ack_us));
        if off_us > 0.0 {
            x_off.insert(name.clone(), json!(round(run.claim_us / off_us, 2)));
        }
        if !run.problems.is_empty() {
            problems.insert(name.clone(), json!(run.problems.join("; ")));
        }
        names.push(name);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let ok = problems.is_empty();
    #[derive(Serialize)]
    struct SmallTenant<'a> {
        jobs: u64,
        /// Its last job's place in the claim order, groups off and on.
        last_claimed_at: &'a Map<String, Value>,
    }
    #[derive(Serialize)]
    struct Groups<'a> {
        n: u64,
        batch: u64,
        cases: &'a [String],
        claim_us_per_job: &'a Map<String, Value>,
        claim_x_off: &'a Map<String, Value>,
        enqueue_us_per_job: &'a Map<String, Value>,
        ack_us_per_job: &'a Map<String, Value>,
        small_tenant: SmallTenant<'a>,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(skip_serializing_if = "Map::is_empty")]
        problems: &'a Map<String, Value>,
    }
    let mut r = Report::of(
        "groups",
        &Groups {
            n,
            batch: CHUNK,
            cases: &names,
            claim_us_per_job: &claim,
            claim_x_off: &x_off,
            enqueue_us_per_job: &enqueue,
            ack_us_per_job: &ack,
            small_tenant: SmallTenant {
                jobs: small,
                last_claimed_at: &last_small,
            },
            layout: b.layout(),
            ok,
            problems: &problems,
        },
    );
    let f = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let each: Vec<String> = names
        .iter()
        .map(|k| {
            let label = match k.as_str() {
                "off" => "off".to_string(),
                "2_tenants" => format!("2 tenants {big} : {small}"),
                g => format!("{g} groups"),
            };
            format!("{label} {} ({}x)", f(&claim, k), f(&x_off, k))
        })
        .collect();
    r.text = format!(
        "{:<10} claim, Redis µs per job (batches of {CHUNK}, {n} jobs): {}; the small tenant's last job claimed {} of {n} with groups off, {} with groups on  {}",
        "groups",
        each.join(", "),
        f(&last_small, "off"),
        f(&last_small, "2_tenants"),
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
pub(crate) struct Handler {
    pub toml: String,
    pub label: String,
    pub text: String,
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
/// until all are done. serve's own CPU and its handlers' are read from
/// /proc right before the jobs are enqueued and right after the last is
/// done (start and stop left out).
pub(crate) async fn serve_path(
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
    let pid = child.id();
    let tree_before = pid.and_then(crate::proctree::tree_cpu);
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
    let tree = match (tree_before, pid.and_then(crate::proctree::tree_cpu)) {
        (Some(a), Some(z)) => Some(z.since(&a)),
        _ => None,
    };
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
        /// serve's own processes (supervisor, workers, scheduler) from
        /// the first job enqueued to the last done, per job.
        #[serde(skip_serializing_if = "Option::is_none")]
        serve_own_cpu_us_per_job: Option<f64>,
        /// The handlers' processes over the same span, per job.
        #[serde(skip_serializing_if = "Option::is_none")]
        handler_cpu_us_per_job: Option<f64>,
        profile: Profile,
    }
    let per_job = |us: u64| round(us as f64 / n.max(1) as f64, 1);
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
            serve_own_cpu_us_per_job: tree.map(|t| per_job(t.serve_us)),
            handler_cpu_us_per_job: tree.map(|t| per_job(t.handlers_us)),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} punctual serve, {workers} workers x {concurrency}, {}: {n} jobs in {:.3} s: {:.0} jobs/s; serve's processes used {:.0} µs CPU per job (start and stop included){}  {}\n           Redis {:.2} µs/job ({:.0}% busy), {:.1} script calls/1k jobs",
        phase,
        handler.text,
        elapsed.as_secs_f64(),
        per_s(done, elapsed),
        cpu as f64 / n.max(1) as f64,
        tree.map(|t| format!(
            "; while the jobs ran, serve itself {:.1} µs, its handlers {:.1} µs",
            per_job(t.serve_us),
            per_job(t.handlers_us)
        ))
        .unwrap_or_default(),
        status(ok),
        profile.redis_cpu_us_per_job,
        profile.redis_busy_pct,
        profile.script_calls_per_1k_jobs,
    );
    Ok(r)
}

/// The full path of a program on PATH.
pub(crate) fn which(program: &str) -> Option<String> {
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

    #[test]
    fn stalls_merge_and_a_wait_meets_one_only_when_they_overlap() {
        // (end ms, stuck µs): 3 ms and 12 ms long are below and above 5 ms.
        let samples = [(10.0, 3_000), (30.0, 12_000), (35.0, 8_000), (100.0, 6_000)];
        let s = stalls(&samples);
        // 18..30 and 27..35 merge; 94..100 stays apart; the 3-ms one is none.
        assert_eq!(s, vec![(18.0, 35.0), (94.0, 100.0)]);
        assert!(meets(&s, 0.0, 18.0));
        assert!(meets(&s, 20.0, 21.0));
        assert!(meets(&s, 35.0, 40.0));
        assert!(!meets(&s, 36.0, 93.9));
        assert!(meets(&s, 50.0, 200.0));
        assert!(!meets(&s, 101.0, 300.0));
        assert!(!meets(&[], 0.0, 1e9));
    }

    #[test]
    fn group_cases_spread_the_jobs_as_named() {
        assert_eq!(GroupCase::Off.group_of(7), None);
        assert_eq!(GroupCase::Even(10).group_of(17).as_deref(), Some("g7"));
        let t = GroupCase::Tenants { big: 3 };
        assert_eq!(t.group_of(2).as_deref(), Some("big"));
        assert_eq!(t.group_of(3).as_deref(), Some("small"));
        assert_eq!(
            [GroupCase::Off, GroupCase::Even(1000), t].map(|c| c.name()),
            ["off", "1000", "2_tenants"]
        );
        for g in ["g7", "big", "small"] {
            punctual::validate_group(g).unwrap();
        }
    }

    #[test]
    fn pool_jobs_are_due_in_1_to_31_days_and_past_the_horizon() {
        for i in [0, 1, 999, 327_272, 9_999_999] {
            let d = pool_delay(i);
            assert!(d >= Duration::from_secs(86_400) && d < Duration::from_secs(31 * 86_400));
            assert!(d >= POOL_HORIZON);
        }
        assert_eq!(payload(POOL_BASE + 9_999_999).len(), PAYLOAD_BYTES);
    }
}
