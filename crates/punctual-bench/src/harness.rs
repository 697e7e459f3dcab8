//! What every phase stands on: the jobs (each payload carries its number),
//! the recorder that counts the in-process handler's calls, the in-process
//! consumer, the bench's connections, loading jobs and the pool (--pool),
//! the claim and ack loops of the script phases, and the parts of a
//! report the phases share.
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
    Delivery, EnqueueStatus, Job, Outcome, Queue, Scheduler, SchedulerConfig, When, Worker,
    WorkerConfig,
};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::target::{keys_of, PREFIX, TOPIC};
use crate::Bench;

/// Bytes of each payload, as the protocol asks.
pub(crate) const PAYLOAD_BYTES: usize = 100;
/// Most jobs per enqueue call (the script's limit).
pub(crate) const CHUNK: u64 = punctual::MAX_BATCH as u64;

/// Ticks of the promote phases: full batches, promotion never refused.
pub(crate) const BENCH_TICK: raw::TickLimits = raw::TickLimits {
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
pub(crate) fn order_id(p: &[u8]) -> Option<usize> {
    let rest = p.strip_prefix(b"{\"order_id\": ")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// Counts handler calls per job number; optionally keeps each lateness.
pub(crate) struct Recorder {
    seen: Vec<AtomicU32>,
    handled: AtomicU64,
    strays: AtomicU64,
    /// (lateness, Redis clock at claim - due) in microseconds, and the due
    /// time (epoch ms).
    pub(crate) lateness: Option<Mutex<Vec<(i64, i64, i64)>>>,
    /// The jobs expected: `seen`'s length, or fewer once a producer that
    /// ran flat out says how many it sent ([`Recorder::expect`]).
    expected: AtomicU64,
    all_in: Notify,
}

/// What the handler saw.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) handled: u64,
    /// Jobs never handled.
    lost: u64,
    /// Jobs handled more than once.
    doubled: u64,
    /// Calls for payloads that are not one of this phase's jobs.
    strays: u64,
}

impl Tally {
    pub(crate) fn exact(&self, n: u64) -> bool {
        self.handled == n && self.lost == 0 && self.doubled == 0 && self.strays == 0
    }
}

impl Recorder {
    pub(crate) fn new(expected: u64, lateness: bool) -> Arc<Recorder> {
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
    pub(crate) fn record(&self, d: &Delivery) {
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

    pub(crate) fn expected(&self) -> u64 {
        self.expected.load(Ordering::Acquire)
    }

    /// Expects jobs `0..n` only (n at most the capacity it was made with).
    pub(crate) fn expect(&self, n: u64) {
        self.expected
            .store(n.min(self.seen.len() as u64), Ordering::Release);
        self.all_in.notify_one();
    }

    pub(crate) fn handled(&self) -> u64 {
        self.handled.load(Ordering::Acquire)
    }

    pub(crate) fn tally(&self) -> Tally {
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
    pub(crate) async fn wait_all(&self, bar: &ProgressBar, deadline: Instant) -> bool {
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
pub(crate) struct Consumer {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<punctual::Result<()>>>,
}

/// The connections of a consumer, opened before the clock starts.
pub(crate) struct Connections {
    workers: Vec<Queue>,
    scheduler: Option<Queue>,
}

impl Consumer {
    pub(crate) async fn connect(b: &Bench, workers: u64, scheduler: bool) -> Result<Connections> {
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

    pub(crate) fn start(conns: Connections, rec: Arc<Recorder>, config: WorkerConfig) -> Consumer {
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

    pub(crate) async fn stop(self) -> Result<()> {
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
    pub(crate) async fn queue(&self) -> Result<Queue> {
        self.queue_chunked(self.args.enqueue_chunk as usize).await
    }

    /// [`Bench::queue`] sending enqueue calls of `chunk` jobs.
    pub(crate) async fn queue_chunked(&self, chunk: usize) -> Result<Queue> {
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
    pub(crate) fn layout(&self) -> Layout {
        Layout {
            partitions: (self.args.partitions > 1).then_some(self.args.partitions),
            id_bytes: self.args.id_bytes,
        }
    }

    /// On a cluster: which master serves each partition of the topic.
    pub(crate) async fn placement(&self) -> Result<Option<Placement>> {
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

    pub(crate) fn consumer_config(&self) -> WorkerConfig {
        WorkerConfig::default()
            .concurrency(self.args.concurrency as usize)
            .claim_batch(self.args.claim_batch as usize)
    }

    /// Waits until `n` workers and one scheduler listen for wake-ups (on
    /// every partition).
    pub(crate) async fn wait_listening(
        &self,
        workers: u64,
        scheduler: bool,
        why: &str,
    ) -> Result<()> {
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
    pub(crate) async fn wait_acked(&self, deadline: Instant, pool: u64) -> Result<bool> {
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
pub(crate) async fn load(
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
pub(crate) const POOL_BASE: u64 = 1_000_000_000;

/// A pool job's delay: 1 day, plus up to 30 days spread over the jobs;
/// the jobs of one batch (1,000, in calls of --enqueue-chunk) share theirs,
/// so the script builds one record header per call and millions load
/// quickly.
pub(crate) fn pool_delay(i: u64) -> Duration {
    Duration::from_secs(86_400 + (i / CHUNK * 7_919) % (30 * 86_400))
}

/// Delays at least this long are the pool's (--pool), not a phase's jobs.
pub(crate) const POOL_HORIZON: Duration = Duration::from_secs(3_600 * 12);

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
pub(crate) async fn first_tick(b: &Bench, queue: &Queue) -> Result<()> {
    for physical in &b.target.parts {
        raw::tick(queue, &physical.parse()?, &BENCH_TICK)
            .await
            .context("the first tick failed")?;
    }
    Ok(())
}

/// `partitions` (when more than one) and `id_bytes` (when given).
#[derive(Serialize)]
pub(crate) struct Layout {
    #[serde(skip_serializing_if = "Option::is_none")]
    partitions: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id_bytes: Option<u64>,
}

/// On a cluster: the masters, how many the topic's partitions use, and
/// which serves each partition.
#[derive(Serialize)]
pub(crate) struct Placement {
    masters: u64,
    masters_used: u64,
    placement: std::collections::BTreeMap<String, String>,
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
pub(crate) struct Counts {
    handled: u64,
    lost: u64,
    doubled: u64,
    strays: u64,
    left: Left,
}

pub(crate) fn counts(t: &Tally, left: [u64; 4], records: u64) -> Counts {
    Counts {
        handled: t.handled,
        lost: t.lost,
        doubled: t.doubled,
        strays: t.strays,
        left: Left::of(left, Some(records)),
    }
}

/// For `skip_serializing_if`: a pool of 0 is not reported.
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// ", with N jobs waiting in the pool" (--pool), or nothing.
pub(crate) fn with_pool(pool: u64) -> String {
    if pool == 0 {
        String::new()
    } else {
        format!(", with {pool} jobs waiting in the pool")
    }
}

pub(crate) fn status(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "NOT OK"
    }
}

/// Claims in calls of `chunk`, one call at a time, partition after
/// partition, until a claim comes back empty: per partition, the lease of
/// each claimed job.
pub(crate) async fn claim_all(
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
pub(crate) async fn ack_all(
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
    fn pool_jobs_are_due_in_1_to_31_days_and_past_the_horizon() {
        for i in [0, 1, 999, 327_272, 9_999_999] {
            let d = pool_delay(i);
            assert!(d >= Duration::from_secs(86_400) && d < Duration::from_secs(31 * 86_400));
            assert!(d >= POOL_HORIZON);
        }
        assert_eq!(payload(POOL_BASE + 9_999_999).len(), PAYLOAD_BYTES);
    }
}
