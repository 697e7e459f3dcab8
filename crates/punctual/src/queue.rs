//! `Queue`: the connection to Redis and every operation on topics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use redis::{Script, Value};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::job::{
    DeadSelector, EnqueueOptions, EnqueueStatus, Enqueued, Job, JobInfo, ListPage, ReplayPace,
    State, TopicDeleted, TopicStats, Violation, When,
};
use crate::keys::{partitions_key, topics_key, validate_id, validate_topic, TopicKeys};
use crate::partition::{generate_id, partition_name, partition_of, MAX_PARTITIONS};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// Largest integer the scripts take (2^53: Lua numbers are doubles).
const MAX_SAFE: usize = 1 << 53;

/// A lease as the scripts take it: 1 ms to ten years.
fn lease_ms(lease: Duration) -> u64 {
    lease.min(crate::job::MAX_DELAY).as_millis().max(1) as u64
}

/// Default largest payload: 64 KiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 64 * 1024;
/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "punctual";
/// Most jobs one script call handles; larger batches are split.
pub const MAX_BATCH: usize = 1000;

/// Settings of a [`Queue`], built with [`Queue::builder`].
#[derive(Debug, Clone)]
pub struct QueueBuilder {
    url: String,
    prefix: String,
    max_payload: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl QueueBuilder {
    /// Key prefix (default `punctual`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Largest payload accepted, in bytes (default 64 KiB).
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// How long to wait for a TCP connection (default 2 s).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// How long to wait for a reply before the call fails (default 10 s).
    pub fn response_timeout(mut self, t: Duration) -> Self {
        self.response_timeout = t;
        self
    }

    /// Connects. Fails if Redis does not answer.
    pub async fn connect(self) -> Result<Queue> {
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "invalid prefix {:?}: prefixes must be non-empty and may not contain braces",
                self.prefix
            )));
        }
        let connected =
            crate::conn::connect(&self.url, self.connect_timeout, self.response_timeout).await?;
        Ok(Queue {
            inner: Arc::new(Inner {
                conn: connected.conn,
                pubsub: connected.pubsub,
                cluster: connected.cluster,
                url: self.url,
                prefix: self.prefix,
                max_payload: self.max_payload,
                registered: Mutex::new(HashSet::new()),
                skipped_logged: Mutex::new(HashSet::new()),
                partitions: Mutex::new(HashMap::new()),
            }),
        })
    }
}

/// Which script call each of the jobs `pending` goes in: per partition (of
/// `k`), at most 1,000 per call. A partitioned topic's missing ids are made
/// here, since the id picks the partition.
/// Decodes a record as `claim` returns it (`M:D:G:B:E:` + E bytes of last
/// error + payload, see lib.lua): max attempts (`topic_max` when M is
/// empty), due ms, created ms, payload. None when the header is not one
/// (the script has checked it with the same pattern).
fn decode_claimed(rec: &[u8], topic_max: i64) -> Option<(i64, i64, i64, Vec<u8>)> {
    let mut fields = [&rec[..0]; 5];
    let mut at = 0;
    for f in &mut fields {
        let len = rec[at..].iter().position(|&b| b == b':')?;
        *f = &rec[at..at + len];
        at += len + 1;
    }
    let [m, d, g, b, e] = fields;
    let all = |s: &[u8], ok: fn(&u8) -> bool| s.iter().all(ok);
    if !all(m, u8::is_ascii_digit)
        || d.is_empty()
        || !all(d, u8::is_ascii_alphanumeric)
        || g.is_empty()
        || !all(g, u8::is_ascii_alphanumeric)
        || !all(b, |c| c.is_ascii_digit() || *c == b',')
        || e.is_empty()
        || !all(e, u8::is_ascii_digit)
    {
        return None;
    }
    // Digits past i64 saturate, as Lua's numbers would not matter there.
    let num = |s: &[u8], radix: u32| {
        let s = std::str::from_utf8(s).ok()?;
        Some(i64::from_str_radix(s, radix).unwrap_or(i64::MAX))
    };
    let max = if m.is_empty() { topic_max } else { num(m, 10)? };
    let due = num(d, 36)?;
    let created = due.saturating_sub(num(g, 36)?);
    let err_len = usize::try_from(num(e, 10)?).unwrap_or(usize::MAX);
    let start = at.saturating_add(err_len).min(rec.len());
    Some((max, due, created, rec[start..].to_vec()))
}

fn route_jobs(
    topic: &str,
    k: u32,
    pending: &[usize],
    ids: &mut [Option<String>],
) -> Vec<(String, Vec<usize>)> {
    let mut groups = Vec::new();
    if k <= 1 {
        for chunk in pending.chunks(MAX_BATCH) {
            groups.push((topic.to_string(), chunk.to_vec()));
        }
        return groups;
    }
    let mut by_part: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &i in pending {
        let id = ids[i].get_or_insert_with(generate_id);
        by_part.entry(partition_of(id, k)).or_default().push(i);
    }
    for (p, idx) in by_part {
        for chunk in idx.chunks(MAX_BATCH) {
            groups.push((partition_name(topic, p, k), chunk.to_vec()));
        }
    }
    groups
}

/// The enqueue script's refusal of a call routed with a stale partition
/// count.
fn is_stale_layout(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.code() == Some("PUNCTUAL_STALE"))
}

/// Removes the secrets from a URL before it is printed (see [`crate::redact`]).
pub(crate) fn redact(url: &str) -> String {
    crate::redact::redact(url)
}

/// A handle on punctual's data in one Redis. Cheap to clone; clones share
/// one multiplexed connection that reconnects by itself.
///
/// ```no_run
/// # async fn demo() -> punctual::Result<()> {
/// use std::time::Duration;
/// let queue = punctual::Queue::connect("redis://127.0.0.1:6379").await?;
/// let job = punctual::Job::new("close order 10086").delay(Duration::from_secs(1800));
/// let enqueued = queue.enqueue("orders", job).await?;
/// println!("{} {:?}", enqueued.id, enqueued.status);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    pubsub: Vec<redis::Client>,
    cluster: bool,
    url: String,
    prefix: String,
    max_payload: usize,
    registered: Mutex<HashSet<String>>,
    /// Invalid names in the set of known topics, logged once each.
    skipped_logged: Mutex<HashSet<String>>,
    /// Partition counts read from Redis, with when they were read.
    partitions: Mutex<HashMap<String, (u32, std::time::Instant)>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("url", &redact(&self.inner.url))
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

/// A job handed out by [`Queue::claim`]: leased to the caller until its lease
/// deadline, which [`Queue::extend`] pushes back. Ack or fail it with its
/// `token`; a stale token (the lease expired and the job was re-delivered)
/// is refused.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Delivery {
    /// The topic.
    pub topic: String,
    /// The job id.
    pub id: String,
    /// The lease token (fencing): unique per claim within the topic, and
    /// never handed out again, even after a Redis restart or failover that
    /// lost writes (tokens are at least Redis's clock in microseconds).
    pub token: i64,
    /// Which delivery this is: 1 on the first.
    pub attempt: u32,
    /// Deliveries allowed before the job goes to dead.
    pub max_attempts: u32,
    /// When the job was due, epoch ms (Redis clock).
    pub due_ms: i64,
    /// When the job was created, epoch ms (Redis clock).
    pub created_ms: i64,
    /// The payload.
    pub payload: Vec<u8>,
    /// Redis's clock at the claim, epoch microseconds: the job started no
    /// earlier than this, and this is never before `due_ms`.
    pub claimed_us: i64,
    /// When the claim's reply arrived, on this process's monotonic clock.
    pub received: std::time::Instant,
}

impl Delivery {
    /// How late the job is now, in microseconds: Redis's clock at the claim
    /// minus the due time, plus the local time since the claim's reply (no
    /// cross-host skew). Negative would mean an early start; the claim script
    /// never hands out a job before its due time.
    pub fn lateness_us(&self) -> i64 {
        self.claimed_us - self.due_ms * 1000 + self.received.elapsed().as_micros() as i64
    }

    /// [`Delivery::lateness_us`] as a duration (0 if it were negative).
    pub fn lateness(&self) -> Duration {
        Duration::from_micros(self.lateness_us().max(0) as u64)
    }

    /// The payload parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload).map_err(|e| {
            Error::invalid(format!(
                "payload of job {:?} is not the expected JSON: {e}",
                self.id
            ))
        })
    }
}

/// The set of known topics, read by [`Queue::list_topics`].
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct Topics {
    /// The valid topic names, sorted.
    pub valid: Vec<String>,
    /// Names in the set that are not valid topics, sorted.
    pub skipped: Vec<SkippedTopic>,
}

/// A name in the set of known topics that is not a valid topic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SkippedTopic {
    /// The name, escaped for printing (bytes that are not UTF-8 as `\xNN`,
    /// invisible and control characters as `\u{..}`).
    pub name: String,
    /// Why it is not a valid topic.
    pub reason: String,
}

/// What one scheduler tick did ([`Queue::tick`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Tick {
    /// Jobs moved from pool to ready.
    pub promoted: u64,
    /// Expired leases moved back to pool (or ready) for another attempt.
    pub reclaimed: u64,
    /// Expired leases whose attempts were used up, moved to dead.
    pub dead: u64,
    /// Promotion was refused because ready holds `max_ready` jobs.
    pub refused: bool,
    /// A batch limit was hit: tick again now.
    pub more: bool,
    /// Time until the next due job in pool, by Redis's clock.
    pub next_due: Option<Duration>,
    /// Time until the next lease deadline, by Redis's clock.
    pub next_lease: Option<Duration>,
}

/// What [`Queue::fail`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failed {
    /// Back in pool (or ready), to be retried.
    Retry,
    /// Moved to dead: permanent failure or attempts used up.
    Dead,
    /// Refused: the lease is no longer this caller's.
    Stale,
}

impl Queue {
    /// Settings for a connection to `url` (`redis://`, `rediss://`, with
    /// `user:password@` when needed).
    pub fn builder(url: impl Into<String>) -> QueueBuilder {
        QueueBuilder {
            url: url.into(),
            prefix: DEFAULT_PREFIX.into(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(10),
        }
    }

    /// Connects with default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Queue> {
        Queue::builder(url).connect().await
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The largest payload accepted, in bytes.
    pub fn max_payload(&self) -> usize {
        self.inner.max_payload
    }

    /// The Redis URL with any password hidden.
    pub fn url_redacted(&self) -> String {
        redact(&self.inner.url)
    }

    /// Nodes to subscribe on for wake-ups, in order of preference.
    pub(crate) fn pubsub_clients(&self) -> &[redis::Client] {
        &self.inner.pubsub
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster
    }

    /// The connection (for `unlisted.rs`, which scans every master).
    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    pub(crate) fn keys(&self, topic: &str) -> TopicKeys {
        TopicKeys::new(&self.inner.prefix, topic)
    }

    /// Runs a script of one topic; `args` fills ARGV.
    async fn run(
        &self,
        script: &Script,
        topic: &str,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<Value> {
        let keys = self.keys(topic);
        let mut inv = script.prepare_invoke();
        for k in &keys.keys {
            inv.key(k);
        }
        args(&mut inv);
        let mut conn = self.inner.conn.clone();
        inv.invoke_async(&mut conn).await.map_err(Error::from_redis)
    }

    /// Runs a plain command.
    pub(crate) async fn cmd<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.inner.conn.clone();
        cmd.query_async(&mut conn).await.map_err(Error::Redis)
    }

    /// Runs a pipeline (a `MULTI` when it is atomic).
    pub(crate) async fn pipe<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let mut conn = self.inner.conn.clone();
        pipe.query_async(&mut conn).await.map_err(Error::Redis)
    }

    /// Adds the topic to the set of known topics, once per process.
    async fn register(&self, topic: &str) -> Result<()> {
        if self.inner.registered.lock().unwrap().contains(topic) {
            return Ok(());
        }
        let key = topics_key(&self.inner.prefix);
        self.cmd::<i64>(redis::cmd("SADD").arg(&key).arg(topic))
            .await?;
        self.inner
            .registered
            .lock()
            .unwrap()
            .insert(topic.to_string());
        Ok(())
    }

    /// How many partitions `topic` has (1: not partitioned), as stored in
    /// Redis; cached for one second.
    pub async fn partitions(&self, topic: &str) -> Result<u32> {
        validate_topic(topic)?;
        if let Some((k, at)) = self.inner.partitions.lock().unwrap().get(topic) {
            if at.elapsed() < Duration::from_secs(1) {
                return Ok(*k);
            }
        }
        let v: Option<u32> = self
            .cmd(
                redis::cmd("HGET")
                    .arg(partitions_key(&self.inner.prefix))
                    .arg(topic),
            )
            .await?;
        let k = v.unwrap_or(1).max(1);
        self.inner
            .partitions
            .lock()
            .unwrap()
            .insert(topic.to_string(), (k, std::time::Instant::now()));
        Ok(k)
    }

    /// The names of a topic's partitions (`[topic]` when not partitioned):
    /// what the low-level calls (claim, ack, tick...) take.
    pub async fn partition_names(&self, topic: &str) -> Result<Vec<String>> {
        let k = self.partitions(topic).await?;
        Ok((0..k).map(|i| partition_name(topic, i, k)).collect())
    }

    /// The partition holding `id`.
    async fn route(&self, topic: &str, id: &str) -> Result<String> {
        let k = self.partitions(topic).await?;
        Ok(partition_name(topic, partition_of(id, k), k))
    }

    /// Splits `topic` into `k` partitions (1 undoes it). Refused while the
    /// topic holds jobs, since ids would no longer map to where they are.
    /// Safe against producers enqueueing meanwhile: each partition is
    /// checked empty and marked with the new count in one script, and the
    /// enqueue script refuses a call routed with another count (the library
    /// then reads the count again and routes anew). Do not run two changes
    /// of one topic at once.
    ///
    /// A change that fails midway is undone; one that could not be undone
    /// (Redis lost meanwhile) or was cut short (a crash) may leave producers
    /// refused: run it again (with the new count, or the old one) to finish
    /// it. A call with the count the topic already has re-marks any
    /// partition whose mark disagrees.
    pub async fn set_partitions(&self, topic: &str, k: u32) -> Result<()> {
        validate_topic(topic)?;
        if k == 0 || k > MAX_PARTITIONS {
            return Err(Error::invalid(format!(
                "invalid partition count {k}: give 1 to {MAX_PARTITIONS}"
            )));
        }
        self.inner.partitions.lock().unwrap().remove(topic);
        let now = self.partitions(topic).await?;
        if now == k {
            // Finishes a change cut short after it stored the count: a
            // partition still marked with another count refuses every
            // enqueue routed with this one.
            for i in 0..k {
                let p = partition_name(topic, i, k);
                let mark: Option<String> = self
                    .cmd(
                        redis::cmd("HGET")
                            .arg(self.keys(&p).meta())
                            .arg("partitions"),
                    )
                    .await?;
                if mark.is_some_and(|m| m != k.to_string()) {
                    self.layout(&p, k, false).await?;
                }
            }
            return Ok(());
        }
        // Mark every physical topic of the current layout with the new
        // count, each in one script with the check that it holds no job:
        // from then on, an enqueue routed with the old count (a producer
        // that read it before the change, or cached it) is refused there
        // and routes again, so no job can land in the old layout after the
        // check. When one is not empty, the marks made so far are undone.
        let old: Vec<String> = (0..now).map(|i| partition_name(topic, i, now)).collect();
        let mut held = 0;
        let mut marked = Vec::new();
        for p in &old {
            match self.layout(p, k, true).await {
                Ok(0) => marked.push(p),
                Ok(n) => {
                    held = n;
                    break;
                }
                Err(e) => {
                    for m in &marked {
                        let _ = self.layout(m, now, false).await;
                    }
                    return Err(e);
                }
            }
        }
        if held > 0 {
            for m in &marked {
                self.layout(m, now, false).await?;
            }
            let s = self.stats(topic).await?;
            let live = (s.pool + s.ready + s.running + s.dead).max(held);
            return Err(Error::invalid(format!(
                "topic {topic:?} holds {live} jobs in {now} partition(s): drain it (or purge its dead jobs) before changing its partitions to {k}"
            )));
        }
        // The old layout is marked with k: store k at once, so that
        // producers read the count the marks ask for. Then mark the new
        // partitions. On an error, undo (the count, then the old marks):
        // otherwise every enqueue would be refused.
        let mut stored = false;
        let mut done = self.store_partitions(topic, k).await;
        if done.is_ok() {
            stored = true;
            for i in 0..k {
                let p = partition_name(topic, i, k);
                if !old.contains(&p) {
                    if let Err(e) = self.layout(&p, k, false).await {
                        done = Err(e);
                        break;
                    }
                }
            }
        }
        self.inner.partitions.lock().unwrap().remove(topic);
        if let Err(e) = done {
            let mut undone = !stored || self.store_partitions(topic, now).await.is_ok();
            for m in &old {
                undone &= self.layout(m, now, false).await.is_ok();
            }
            if !undone {
                tracing::warn!(topic, from = now, to = k, error = %e, "a partition change failed and could not be undone: run it again");
            }
            return Err(e);
        }
        self.register(topic).await?;
        Ok(())
    }

    /// Stores a topic's partition count in `P:partitions` (1: no entry).
    async fn store_partitions(&self, topic: &str, k: u32) -> Result<()> {
        let key = partitions_key(&self.inner.prefix);
        if k == 1 {
            self.cmd::<i64>(redis::cmd("HDEL").arg(&key).arg(topic))
                .await?;
        } else {
            self.cmd::<i64>(redis::cmd("HSET").arg(&key).arg(topic).arg(k))
                .await?;
        }
        self.inner.partitions.lock().unwrap().remove(topic);
        Ok(())
    }

    /// Runs the layout script on one physical topic; returns the jobs it
    /// holds (with `check`, anything but 0 means nothing was written).
    async fn layout(&self, physical: &str, k: u32, check: bool) -> Result<u64> {
        let v = self
            .run(&SCRIPTS.layout, physical, |inv| {
                inv.arg(k).arg(if check { "check" } else { "set" });
            })
            .await?;
        redis::from_redis_value::<i64>(v)
            .map(|n| n.max(0) as u64)
            .map_err(|e| Error::protocol("layout", e.to_string()))
    }

    /// Enqueues one job.
    pub async fn enqueue(&self, topic: &str, job: Job) -> Result<Enqueued> {
        let mut out = self
            .enqueue_with(topic, vec![job], &EnqueueOptions::default())
            .await?;
        Ok(out.remove(0))
    }

    /// Enqueues a batch: one script call per 1,000 jobs, pipelined. Every job
    /// is validated before anything is written.
    pub async fn enqueue_batch(&self, topic: &str, jobs: Vec<Job>) -> Result<Vec<Enqueued>> {
        self.enqueue_with(topic, jobs, &EnqueueOptions::default())
            .await
    }

    /// Enqueues a batch with options (e.g. replace live ids).
    pub async fn enqueue_with(
        &self,
        topic: &str,
        jobs: Vec<Job>,
        opts: &EnqueueOptions,
    ) -> Result<Vec<Enqueued>> {
        validate_topic(topic)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut encoded = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let which = || {
                if jobs.len() == 1 {
                    String::new()
                } else {
                    format!("job {}: ", i + 1)
                }
            };
            job.validate()
                .map_err(|e| Error::invalid(format!("{}{e}", which())))?;
            if job.payload.len() > self.inner.max_payload {
                return Err(Error::invalid(format!(
                    "{}payload is {} bytes, over the {}-byte limit (raise max_payload or store the data elsewhere and enqueue a reference)",
                    which(),
                    job.payload.len(),
                    self.inner.max_payload
                )));
            }
            encoded.push(job.when.encode()?);
        }
        // An id given twice in one batch: the first wins, the later ones are
        // duplicates and not sent (calls run concurrently, so Redis alone
        // could not tell which came first).
        let mut ids: Vec<Option<String>> = jobs.iter().map(|j| j.id.clone()).collect();
        let mut placed: Vec<Option<Enqueued>> = vec![None; jobs.len()];
        let mut first_of: HashMap<&str, usize> = HashMap::new();
        for (i, job) in jobs.iter().enumerate() {
            if let Some(id) = job.id.as_deref() {
                if first_of.insert(id, i).is_some() {
                    placed[i] = Some(Enqueued {
                        id: id.to_string(),
                        status: EnqueueStatus::Duplicate,
                    });
                }
            }
        }
        let replace = if opts.replace { "1" } else { "0" };
        let mut pending: Vec<usize> = (0..jobs.len()).filter(|i| placed[*i].is_none()).collect();
        let mut failed = Vec::new();
        let mut first_error = None;
        let mut accepted = false;
        let mut round = 0;
        while !pending.is_empty() {
            round += 1;
            let k = self.partitions(topic).await?;
            let groups = route_jobs(topic, k, &pending, &mut ids);
            let results: Vec<(Vec<usize>, Result<Vec<Enqueued>>)> = stream::iter(groups)
                .map(|(physical, idx)| {
                    let (jobs, encoded, ids) = (&jobs, &encoded, &ids);
                    async move {
                        let r = self
                            .enqueue_call(&physical, k, replace, &idx, jobs, encoded, ids)
                            .await;
                        (idx, r)
                    }
                })
                .buffered(8)
                .collect()
                .await;
            pending.clear();
            for (idx, out) in results {
                match out {
                    Ok(out) => {
                        accepted |= out.iter().any(|e| !e.is_duplicate());
                        for (i, e) in idx.into_iter().zip(out) {
                            placed[i] = Some(e);
                        }
                    }
                    // The partition count changed since it was read (see
                    // set_partitions): nothing was written; route again.
                    Err(e) if is_stale_layout(&e) && round < 5 => pending.extend(idx),
                    Err(e) => {
                        failed.extend(idx);
                        first_error.get_or_insert(e);
                    }
                }
            }
            if !pending.is_empty() {
                pending.sort_unstable();
                self.inner.partitions.lock().unwrap().remove(topic);
                tokio::time::sleep(Duration::from_millis(20 * round)).await;
            }
        }
        // The topic is registered only once a script has accepted a job, so
        // an enqueue refused by the script (e.g. a time more than ten years
        // ahead of Redis's clock) changes nothing.
        if accepted {
            if let Err(e) = self.register(topic).await {
                // The jobs are written: report them, not this. The topic is
                // registered by the next enqueue that reaches Redis.
                tracing::warn!(topic, error = %e, "could not add the topic to the set of known topics");
            }
        }
        if let Some(source) = first_error {
            // Each call of up to 1,000 jobs is atomic; the batch as a whole
            // is not. Say exactly what was written.
            if placed.iter().flatten().all(Enqueued::is_duplicate) {
                return Err(source);
            }
            failed.sort_unstable();
            let written = placed
                .into_iter()
                .enumerate()
                .filter_map(|(i, e)| e.map(|e| (i, e)))
                .collect();
            return Err(Error::PartialBatch {
                total: jobs.len(),
                written,
                failed,
                source: Box::new(source),
            });
        }
        Ok(placed
            .into_iter()
            .map(|e| e.expect("every job has a result"))
            .collect())
    }

    /// One call of the enqueue script: the jobs `idx` of a batch, routed
    /// with `k` partitions (sent last, so the script can refuse a stale
    /// count).
    #[allow(clippy::too_many_arguments)]
    async fn enqueue_call(
        &self,
        physical: &str,
        k: u32,
        replace: &str,
        idx: &[usize],
        jobs: &[Job],
        encoded: &[String],
        ids: &[Option<String>],
    ) -> Result<Vec<Enqueued>> {
        let v = self
            .run(&SCRIPTS.enqueue, physical, |inv| {
                inv.arg(self.inner.max_payload.min(MAX_SAFE))
                    .arg(replace)
                    .arg(idx.len());
                for &i in idx {
                    let job = &jobs[i];
                    inv.arg(ids[i].as_deref().unwrap_or(""))
                        .arg(&job.payload[..])
                        .arg(&encoded[i])
                        .arg(job.max_attempts.map(|m| m.to_string()).unwrap_or_default())
                        .arg(job.backoff_arg());
                }
                inv.arg(k);
            })
            .await?;
        let mut r = Reply::new("enqueue", v)?;
        let mut out = Vec::with_capacity(idx.len());
        while !r.is_empty() {
            let id = r.string()?;
            let status = match r.int()? {
                0 => EnqueueStatus::Duplicate,
                2 => EnqueueStatus::Replaced,
                3 => EnqueueStatus::Dead,
                1 => EnqueueStatus::Created,
                other => {
                    return Err(Error::protocol(
                        "enqueue",
                        format!("unknown status {other} for {id:?}"),
                    ))
                }
            };
            out.push(Enqueued { id, status });
        }
        if out.len() != idx.len() {
            return Err(Error::protocol("enqueue", "one result per job expected"));
        }
        Ok(out)
    }

    /// One job by id, or `None` when no such job is live.
    pub async fn get(&self, topic: &str, id: &str) -> Result<Option<JobInfo>> {
        validate_topic(topic)?;
        validate_id(id)?;
        let physical = self.route(topic, id).await?;
        let v = self
            .run(&SCRIPTS.get, &physical, |inv| {
                inv.arg(id);
            })
            .await?;
        if v == Value::Nil {
            return Ok(None);
        }
        let mut r = Reply::new("get", v)?;
        let state_name = r.string()?;
        let state = State::parse(&state_name)
            .ok_or_else(|| Error::protocol("get", format!("unknown state {state_name:?}")))?;
        let score = r.int()?;
        let attempts = r.int()? as u32;
        let max_attempts = r.int()? as u32;
        let _token = r.int()?;
        let due_ms = r.int()?;
        let created_ms = r.int()?;
        let _backoff = r.string()?;
        let err = r.string()?;
        let payload = r.bytes()?;
        let now_ms = r.int()?;
        Ok(Some(JobInfo {
            id: id.to_string(),
            state,
            attempts,
            max_attempts,
            due_ms,
            created_ms,
            state_since_ms: matches!(state, State::Running | State::Dead).then_some(score),
            last_error: (!err.is_empty()).then_some(err),
            payload,
            now_ms,
        }))
    }

    /// Cancels a job in any state. Returns the state it was in, or `None`
    /// when no such job was live.
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<Option<State>> {
        validate_topic(topic)?;
        validate_id(id)?;
        let physical = self.route(topic, id).await?;
        let v = self
            .run(&SCRIPTS.cancel, &physical, |inv| {
                inv.arg(id);
            })
            .await?;
        match v {
            Value::Nil => Ok(None),
            v => {
                let s: String = redis::from_redis_value(v)
                    .map_err(|e| Error::protocol("cancel", e.to_string()))?;
                Ok(State::parse(&s))
            }
        }
    }

    /// Lists the ids of one state (pool, ready, running or dead) that start
    /// with `id_prefix` (`""`: every id), a page at a time: pass `None`
    /// first, then the returned cursor until it is `None`. At scale: each
    /// page is one or a few `ZSCAN ... MATCH` calls per partition, so a page
    /// costs about `count` entries whatever the set's size, and the
    /// listing visits every partition of a partitioned topic. As with
    /// `ZSCAN`, a job present throughout the listing is returned at least
    /// once (possibly twice); jobs that move meanwhile may be missed or seen
    /// twice; pages are sorted by score, the whole listing is not. A page
    /// holds about `count` ids (1 to 1000; a small set is returned whole).
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let mut cursor = None;
    /// loop {
    ///     let page = queue
    ///         .list("orders", punctual::State::Pool, "order:", cursor.as_deref(), 500)
    ///         .await?;
    ///     for (id, due_ms) in &page.jobs {
    ///         println!("{id} due at {due_ms}");
    ///     }
    ///     match page.cursor {
    ///         Some(c) => cursor = Some(c),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(
        &self,
        topic: &str,
        state: State,
        id_prefix: &str,
        cursor: Option<&str>,
        count: usize,
    ) -> Result<ListPage> {
        validate_topic(topic)?;
        if count == 0 || count > MAX_BATCH {
            return Err(Error::invalid("list pages hold 1 to 1000 jobs"));
        }
        if id_prefix.len() > crate::keys::MAX_ID_LEN {
            return Err(Error::invalid("an id prefix is at most 200 bytes"));
        }
        let k = self.partitions(topic).await?;
        let bad_cursor = || {
            Error::invalid(format!(
                "cursor {:?} is not one this listing returned (start again without a cursor)",
                cursor.unwrap_or("")
            ))
        };
        let (mut part, mut at): (u32, u64) = match cursor {
            None => (0, 0),
            Some(c) => {
                let (p, z) = c.split_once('-').ok_or_else(bad_cursor)?;
                let p: u32 = p.parse().map_err(|_| bad_cursor())?;
                let z: u64 = z.parse().map_err(|_| bad_cursor())?;
                if p >= k {
                    return Err(bad_cursor());
                }
                (p, z)
            }
        };
        let mut pattern = String::with_capacity(id_prefix.len() * 2 + 1);
        for c in id_prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push('*');
        let mut jobs: Vec<(String, i64)> = Vec::new();
        loop {
            let keys = self.keys(&partition_name(topic, part, k));
            let key = match state {
                State::Pool => keys.pool(),
                State::Ready => keys.ready(),
                State::Running => keys.running(),
                State::Dead => keys.dead(),
                other => {
                    return Err(Error::invalid(format!(
                        "cannot list {other} jobs: give pool, ready, running or dead"
                    )))
                }
            };
            let want = count - jobs.len().min(count);
            let (next, items): (u64, Vec<(Vec<u8>, f64)>) = self
                .cmd(
                    redis::cmd("ZSCAN")
                        .arg(key)
                        .arg(at)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(want.max(10)),
                )
                .await?;
            jobs.extend(
                items
                    .into_iter()
                    .map(|(id, s)| (String::from_utf8_lossy(&id).into_owned(), s as i64)),
            );
            at = next;
            if at == 0 {
                part += 1;
                if part >= k {
                    jobs.sort_by_key(|(_, s)| *s);
                    return Ok(ListPage { jobs, cursor: None });
                }
            }
            if jobs.len() >= count {
                jobs.sort_by_key(|(_, s)| *s);
                return Ok(ListPage {
                    jobs,
                    cursor: Some(format!("{part}-{at}")),
                });
            }
        }
    }

    /// Cancels every job of the topic whose id starts with `id_prefix` (not
    /// empty), in any state, found by [`Queue::list`]; with `dry_run`, only
    /// finds them. Returns the ids with the state each was in (with
    /// `dry_run`: the state each is in). A job enqueued while this runs may
    /// be left alone.
    pub async fn cancel_prefix(
        &self,
        topic: &str,
        id_prefix: &str,
        dry_run: bool,
    ) -> Result<Vec<(String, State)>> {
        validate_topic(topic)?;
        if id_prefix.is_empty() {
            return Err(Error::invalid(
                "an empty id prefix would cancel every job of the topic: give a prefix",
            ));
        }
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for state in [State::Pool, State::Ready, State::Running, State::Dead] {
            let mut cursor: Option<String> = None;
            loop {
                let page = self
                    .list(topic, state, id_prefix, cursor.as_deref(), MAX_BATCH)
                    .await?;
                for (id, _) in page.jobs {
                    if validate_id(&id).is_ok() && seen.insert(id.clone()) {
                        found.push((id, state));
                    }
                }
                match page.cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        if dry_run {
            return Ok(found);
        }
        let done: Vec<Option<(String, State)>> = stream::iter(found)
            .map(|(id, _)| async move {
                Ok::<_, Error>(self.cancel(topic, &id).await?.map(|st| (id, st)))
            })
            .buffered(32)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_>>()?;
        Ok(done.into_iter().flatten().collect())
    }

    /// Deletes a topic that holds no job: every key of each of its
    /// partitions (counters, settings, pause, sequence included), then its
    /// name in the topic set and its partition count. Refused, with nothing
    /// deleted, while any job exists in any state or partition: each
    /// partition is checked and deleted in one script, so a job enqueued
    /// meanwhile is never lost (a producer that enqueues to the topic after
    /// the deletion creates it anew; a long-running producer of this library
    /// does not list it again, which `check` reports as an unlisted topic).
    pub async fn delete_topic(&self, topic: &str) -> Result<TopicDeleted> {
        validate_topic(topic)?;
        self.inner.partitions.lock().unwrap().remove(topic);
        let k = self.partitions(topic).await?;
        let mut names: Vec<String> = (0..k).map(|i| partition_name(topic, i, k)).collect();
        if k > 1 {
            // The unpartitioned name keeps a mark of the count in its meta
            // (set_partitions), and anything written before the split.
            names.push(topic.to_string());
        }
        let mut held = 0u64;
        let mut any_key = false;
        for name in &names {
            let s = self.stats_of(name).await?;
            held += s.pool + s.ready + s.running + s.dead;
            let keys = self.keys(name);
            let n: u64 = self.cmd(redis::cmd("EXISTS").arg(&keys.keys[..])).await?;
            any_key |= n > 0;
        }
        if held > 0 {
            return Ok(TopicDeleted::HoldsJobs(held));
        }
        let listed: bool = self
            .cmd(
                redis::cmd("SISMEMBER")
                    .arg(topics_key(&self.inner.prefix))
                    .arg(topic),
            )
            .await?;
        if !listed && !any_key && k == 1 {
            let counted: bool = self
                .cmd(
                    redis::cmd("HEXISTS")
                        .arg(partitions_key(&self.inner.prefix))
                        .arg(topic),
                )
                .await?;
            if !counted {
                return Ok(TopicDeleted::Unknown);
            }
        }
        for name in &names {
            let v = self.run(&SCRIPTS.topic_delete, name, |_| {}).await?;
            let n: u64 = redis::from_redis_value(v)
                .map_err(|e| Error::protocol("topic_delete", e.to_string()))?;
            if n > 0 {
                // A job arrived after the check: stop, with nothing of the
                // topic's jobs lost (earlier empty partitions lost only
                // their counters).
                return Ok(TopicDeleted::HoldsJobs(n));
            }
            self.delete_history(name).await?;
        }
        self.cmd::<i64>(
            redis::cmd("SREM")
                .arg(topics_key(&self.inner.prefix))
                .arg(topic),
        )
        .await?;
        self.cmd::<i64>(
            redis::cmd("HDEL")
                .arg(partitions_key(&self.inner.prefix))
                .arg(topic),
        )
        .await?;
        self.inner.registered.lock().unwrap().remove(topic);
        self.inner.partitions.lock().unwrap().remove(topic);
        Ok(TopicDeleted::Deleted)
    }

    /// Gives a waiting job (pool or ready) a new due time. Returns the state
    /// it was in; a running or dead job is left alone and its state returned
    /// (replay a dead job instead); `None` when no such job is live.
    pub async fn reschedule(&self, topic: &str, id: &str, when: When) -> Result<Option<State>> {
        validate_topic(topic)?;
        validate_id(id)?;
        let when = when.encode()?;
        let physical = self.route(topic, id).await?;
        let v = self
            .run(&SCRIPTS.reschedule, &physical, |inv| {
                inv.arg(id).arg(&when);
            })
            .await?;
        if v == Value::Nil {
            return Ok(None);
        }
        let mut r = Reply::new("reschedule", v)?;
        let s = r.string()?;
        Ok(State::parse(&s))
    }

    /// Sizes and counters of a topic.
    /// For a partitioned topic, the partitions add up: sizes and counters
    /// summed, the earliest next due time, the longest ready wait and
    /// overdue age.
    pub async fn stats(&self, topic: &str) -> Result<TopicStats> {
        let names = self.partition_names(topic).await?;
        let parts: Vec<TopicStats> =
            futures::future::try_join_all(names.iter().map(|p| self.stats_of(p))).await?;
        let mut total = TopicStats {
            topic: topic.to_string(),
            partitions: names.len() as u32,
            ..TopicStats::default()
        };
        for s in parts {
            total.pool += s.pool;
            total.ready += s.ready;
            total.running += s.running;
            total.dead += s.dead;
            total.paused |= s.paused;
            total.next_due_in_ms = match (total.next_due_in_ms, s.next_due_in_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            total.oldest_ready_ms = total.oldest_ready_ms.max(s.oldest_ready_ms);
            total.overdue += s.overdue;
            total.overdue_ms = total.overdue_ms.max(s.overdue_ms);
            for (k, v) in s.counters {
                *total.counters.entry(k).or_default() += v;
            }
        }
        Ok(total)
    }

    /// Stats of one partition (or unpartitioned topic).
    async fn stats_of(&self, topic: &str) -> Result<TopicStats> {
        let v = self.run(&SCRIPTS.stats, topic, |_| {}).await?;
        let mut r = Reply::new("stats", v)?;
        let (pool, ready, running, dead) = (r.int()?, r.int()?, r.int()?, r.int()?);
        let paused = r.int()? == 1;
        let next = r.int()?;
        let oldest = r.int()?;
        let mut c = r.array()?;
        let mut counters = BTreeMap::new();
        while !c.is_empty() {
            let name = c.string()?;
            counters.insert(name, c.int()?.max(0) as u64);
        }
        let overdue = r.int()?;
        let overdue_ms = r.int()?;
        Ok(TopicStats {
            topic: topic.to_string(),
            partitions: 1,
            pool: pool as u64,
            ready: ready as u64,
            running: running as u64,
            dead: dead as u64,
            paused,
            next_due_in_ms: (next >= 0).then_some(next),
            oldest_ready_ms: (oldest >= 0).then_some(oldest),
            overdue: overdue.max(0) as u64,
            overdue_ms: (overdue_ms >= 0).then_some(overdue_ms),
            counters,
        })
    }

    /// The known topics (every topic that was ever enqueued to), sorted.
    /// Names in the set that are not valid topics (anyone may `SADD` it) are
    /// left out and logged (once per name and process);
    /// [`Queue::list_topics`] reports them.
    pub async fn topics(&self) -> Result<Vec<String>> {
        let listed = self.list_topics().await?;
        let mut logged = self.inner.skipped_logged.lock().unwrap();
        for s in &listed.skipped {
            if logged.insert(s.name.clone()) {
                tracing::warn!(topic = %s.name, reason = %s.reason, "skipped an invalid name in the set of known topics");
            }
        }
        Ok(listed.valid)
    }

    /// The known topics, sorted, and the names in the set of known topics
    /// that are not valid topic names (not UTF-8, or refused by
    /// [`crate::validate_topic`]): one bad name never hides the others.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let topics = queue.list_topics().await?;
    /// for s in &topics.skipped {
    ///     eprintln!("skipped {}: {}", s.name, s.reason);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_topics(&self) -> Result<Topics> {
        let names: Vec<Vec<u8>> = self
            .cmd(redis::cmd("SMEMBERS").arg(topics_key(&self.inner.prefix)))
            .await?;
        let mut out = Topics::default();
        for raw in names {
            match String::from_utf8(raw) {
                Ok(name) => match validate_topic(&name) {
                    Ok(()) => out.valid.push(name),
                    Err(e) => out.skipped.push(SkippedTopic {
                        name: name.escape_debug().to_string(),
                        reason: e.to_string(),
                    }),
                },
                Err(e) => out.skipped.push(SkippedTopic {
                    name: e.as_bytes().escape_ascii().to_string(),
                    reason: "not valid UTF-8".into(),
                }),
            }
        }
        out.valid.sort();
        out.skipped.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// A page of dead jobs, most recent death first.
    pub async fn dead_list(
        &self,
        topic: &str,
        offset: usize,
        count: usize,
    ) -> Result<Vec<JobInfo>> {
        validate_topic(topic)?;
        if count == 0 || count > MAX_BATCH {
            return Err(Error::invalid("dead list pages hold 1 to 1000 jobs"));
        }
        let names = self.partition_names(topic).await?;
        if names.len() == 1 {
            return self.dead_page(topic, offset, count).await;
        }
        // Partitioned: the newest offset+count of each, merged by time of death.
        let want = offset + count;
        let mut all = Vec::new();
        for p in &names {
            let mut at = 0;
            while at < want {
                let page = self.dead_page(p, at, (want - at).min(MAX_BATCH)).await?;
                let n = page.len();
                all.extend(page);
                if n == 0 {
                    break;
                }
                at += n;
            }
        }
        all.sort_by_key(|j| std::cmp::Reverse(j.state_since_ms));
        Ok(all.into_iter().skip(offset).take(count).collect())
    }

    async fn dead_page(&self, topic: &str, offset: usize, count: usize) -> Result<Vec<JobInfo>> {
        let v = self
            .run(&SCRIPTS.dead_list, topic, |inv| {
                inv.arg(offset).arg(count);
            })
            .await?;
        let mut r = Reply::new("dead_list", v)?;
        let mut out = Vec::new();
        while !r.is_empty() {
            let id = r.string()?;
            let died = r.int()?;
            let attempts = r.int()? as u32;
            let max_attempts = r.int()? as u32;
            let due_ms = r.int()?;
            let created_ms = r.int()?;
            let err = r.string()?;
            let payload = r.bytes()?;
            out.push(JobInfo {
                id,
                state: State::Dead,
                attempts,
                max_attempts,
                due_ms,
                created_ms,
                state_since_ms: Some(died),
                last_error: (!err.is_empty()).then_some(err),
                payload,
                now_ms: 0,
            });
        }
        Ok(out)
    }

    /// Moves dead jobs back to ready, due now, attempts reset. Returns the
    /// ids replayed.
    pub async fn dead_replay(&self, topic: &str, which: DeadSelector) -> Result<Vec<String>> {
        self.dead_replay_paced(topic, which, ReplayPace::Now, |_| {})
            .await
    }

    /// Moves dead jobs back, attempts reset, due as `pace` says: with
    /// [`ReplayPace::Now`] to ready, due now; with a rate or a spread, the
    /// i-th replayed job is due [`ReplayPace::offset`] after the start
    /// (Redis's `TIME`, read once), in pool, so replaying 50,000 jobs does
    /// not flood their handlers, and the pacing holds after this call
    /// returns. `progress` is told how many were replayed so far after each
    /// call of the script (at most 1,000 jobs each). Returns the ids
    /// replayed, in the order they are due.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// use punctual::{DeadSelector, ReplayPace};
    ///
    /// let pace = ReplayPace::Rate { jobs: 100, per: Duration::from_secs(1) };
    /// let ids = queue
    ///     .dead_replay_paced("orders", DeadSelector::All, pace, |n| eprintln!("{n} replayed"))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn dead_replay_paced(
        &self,
        topic: &str,
        which: DeadSelector,
        pace: ReplayPace,
        progress: impl Fn(usize) + Send + Sync,
    ) -> Result<Vec<String>> {
        pace.validate()?;
        validate_topic(topic)?;
        let pacer = match pace {
            ReplayPace::Now => None,
            _ => {
                let n = match &which {
                    DeadSelector::Ids(ids) => ids.len(),
                    DeadSelector::Oldest(n) => (*n).min(self.stats(topic).await?.dead as usize),
                    _ => self.stats(topic).await?.dead as usize,
                };
                let (s, us): (i64, i64) = self.cmd(&redis::cmd("TIME")).await?;
                Some(Pacer {
                    pace,
                    n,
                    start_ms: s * 1000 + us / 1000,
                    sent: std::sync::atomic::AtomicUsize::new(0),
                })
            }
        };
        let done = std::sync::atomic::AtomicUsize::new(0);
        self.dead_op(&SCRIPTS.dead_replay, topic, which, pacer.as_ref(), |v| {
            let ids: Vec<String> = redis::from_redis_value(v)
                .map_err(|e| Error::protocol("dead_replay", e.to_string()))?;
            let n = done.fetch_add(ids.len(), std::sync::atomic::Ordering::Relaxed) + ids.len();
            progress(n);
            Ok((ids.len(), ids))
        })
        .await
        .map(|(_, ids)| ids)
    }

    /// Deletes dead jobs. Returns how many.
    pub async fn dead_purge(&self, topic: &str, which: DeadSelector) -> Result<usize> {
        self.dead_op(&SCRIPTS.dead_purge, topic, which, None, |v| {
            let n: i64 = redis::from_redis_value(v)
                .map_err(|e| Error::protocol("dead_purge", e.to_string()))?;
            Ok((n as usize, Vec::new()))
        })
        .await
        .map(|(n, _)| n)
    }

    async fn dead_op(
        &self,
        script: &Script,
        topic: &str,
        which: DeadSelector,
        pacer: Option<&Pacer>,
        read: impl Fn(Value) -> Result<(usize, Vec<String>)>,
    ) -> Result<(usize, Vec<String>)> {
        validate_topic(topic)?;
        let k = self.partitions(topic).await?;
        let (mut total, mut all) = (0, Vec::new());
        match which {
            DeadSelector::Ids(ids) => {
                for id in &ids {
                    validate_id(id)?;
                }
                let mut by_part: BTreeMap<u32, Vec<&String>> = BTreeMap::new();
                for id in &ids {
                    by_part.entry(partition_of(id, k)).or_default().push(id);
                }
                for (p, ids) in by_part {
                    let physical = partition_name(topic, p, k);
                    for chunk in ids.chunks(MAX_BATCH) {
                        let args = Pacer::args(pacer, chunk);
                        let v = self
                            .run(script, &physical, |inv| {
                                inv.arg(args);
                            })
                            .await?;
                        let (n, ids) = read(v)?;
                        total += n;
                        all.extend(ids);
                    }
                }
            }
            DeadSelector::Oldest(n) if k > 1 => {
                // The oldest across partitions: each round reads the oldest
                // deaths of every partition, merges them by time of death
                // and acts on the first ones by id (an id that left dead
                // meanwhile is skipped by the script). At most what is dead
                // now, so jobs that die again as fast as they are replayed
                // cannot keep this going.
                let mut left = n.min(self.stats(topic).await?.dead as usize);
                while left > 0 {
                    let want = left.min(MAX_BATCH);
                    let mut oldest: Vec<(i64, u32, Vec<u8>)> = Vec::new();
                    for p in 0..k {
                        let keys = self.keys(&partition_name(topic, p, k));
                        // Bytes: an id stored before ids had to be UTF-8
                        // must still be purged.
                        let items: Vec<(Vec<u8>, f64)> = self
                            .cmd(
                                redis::cmd("ZRANGE")
                                    .arg(keys.dead())
                                    .arg(0)
                                    .arg(want - 1)
                                    .arg("WITHSCORES"),
                            )
                            .await?;
                        oldest.extend(items.into_iter().map(|(id, s)| (s as i64, p, id)));
                    }
                    oldest.sort();
                    oldest.truncate(want);
                    if oldest.is_empty() {
                        break;
                    }
                    let mut by_part: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
                    for (_, p, id) in oldest {
                        by_part.entry(p).or_default().push(id);
                    }
                    let mut round = 0;
                    for (p, ids) in by_part {
                        let args = Pacer::args(pacer, &ids);
                        let v = self
                            .run(script, &partition_name(topic, p, k), |inv| {
                                inv.arg(args);
                            })
                            .await?;
                        let (done, ids) = read(v)?;
                        round += done;
                        total += done;
                        all.extend(ids);
                    }
                    if round == 0 {
                        break;
                    }
                    left = left.saturating_sub(round);
                }
            }
            DeadSelector::Oldest(_) | DeadSelector::All => {
                let mut left = match which {
                    DeadSelector::Oldest(n) => n,
                    _ => usize::MAX,
                };
                for p in 0..k {
                    let physical = partition_name(topic, p, k);
                    // At most what is dead now, so jobs that die again as fast
                    // as they are replayed cannot keep this going.
                    let mut here = self.stats_of(&physical).await?.dead as usize;
                    let keys = self.keys(&physical);
                    while left > 0 && here > 0 {
                        let n = left.min(here).min(MAX_BATCH);
                        // Read the ids, then act on them by id: a call resent
                        // after a lost reply (the cluster client does) finds
                        // them gone and cannot take the next n too. Bytes: an
                        // id stored before ids had to be UTF-8 must still go.
                        let ids: Vec<Vec<u8>> = self
                            .cmd(redis::cmd("ZRANGE").arg(keys.dead()).arg(0).arg(n - 1))
                            .await?;
                        if ids.is_empty() {
                            break;
                        }
                        let args = Pacer::args(pacer, &ids);
                        let v = self
                            .run(script, &physical, |inv| {
                                inv.arg(args);
                            })
                            .await?;
                        let (done, got) = read(v)?;
                        total += done;
                        all.extend(got);
                        // Counted by the ids read, not by the reply (a resent
                        // call reports 0): never more than n acted on.
                        left = left.saturating_sub(ids.len());
                        here = here.saturating_sub(ids.len());
                    }
                }
            }
        }
        Ok((total, all))
    }

    /// Verifies the one-state invariant on a live topic: every job id is in
    /// exactly one of pool, ready, running, dead, and has a record exactly
    /// then, and has an attempts entry only then. Scans the four sets, the
    /// records and the attempts hash in pages; each page is checked
    /// atomically, so jobs moving meanwhile are never reported falsely. For
    /// a partitioned topic, every partition is checked, and every id must be
    /// in the partition its id maps to.
    pub async fn check(&self, topic: &str) -> Result<Vec<Violation>> {
        let k = self.partitions(topic).await?;
        let mut out = Vec::new();
        for p in 0..k {
            out.extend(self.check_partition(topic, p, k).await?);
        }
        Ok(out)
    }

    async fn check_partition(&self, logical: &str, part: u32, k: u32) -> Result<Vec<Violation>> {
        let topic = &partition_name(logical, part, k);
        let keys = self.keys(topic);
        let mut found: BTreeMap<String, String> = BTreeMap::new();
        let scans = [
            ("HSCAN", keys.jobs().to_string()),
            ("ZSCAN", keys.pool().to_string()),
            ("ZSCAN", keys.ready().to_string()),
            ("ZSCAN", keys.running().to_string()),
            ("ZSCAN", keys.dead().to_string()),
            ("HSCAN", keys.attempts().to_string()),
        ];
        for (scan, key) in &scans {
            let mut cursor: u64 = 0;
            loop {
                let (next, items): (u64, Vec<Vec<u8>>) = self
                    .cmd(redis::cmd(scan).arg(key).arg(cursor).arg("COUNT").arg(500))
                    .await?;
                // Both scans return member, value pairs: keep the members.
                let ids: Vec<&[u8]> = items.iter().step_by(2).map(|v| &v[..]).collect();
                for id in &ids {
                    let id = String::from_utf8_lossy(id);
                    let home = partition_of(&id, k);
                    if home != part {
                        found.insert(
                            id.into_owned(),
                            format!("in partition {part}, but its id maps to partition {home}"),
                        );
                    }
                }
                for page in ids.chunks(MAX_BATCH) {
                    let v = self
                        .run(&SCRIPTS.check, topic, |inv| {
                            inv.arg(page);
                        })
                        .await?;
                    let mut r = Reply::new("check", v)?;
                    while !r.is_empty() {
                        let id = r.string()?;
                        let problem = r.string()?;
                        found.insert(id, problem);
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|(id, problem)| Violation {
                topic: topic.to_string(),
                id,
                problem,
            })
            .collect())
    }

    /// Stops workers from claiming jobs of this topic (jobs still become due).
    pub async fn pause(&self, topic: &str) -> Result<()> {
        for p in self.partition_names(topic).await? {
            let keys = self.keys(&p);
            self.cmd::<i64>(redis::cmd("HSET").arg(keys.meta()).arg("paused").arg("1"))
                .await?;
        }
        Ok(())
    }

    /// Lets workers claim from this topic again, and wakes them.
    pub async fn resume(&self, topic: &str) -> Result<()> {
        for p in self.partition_names(topic).await? {
            let keys = self.keys(&p);
            self.cmd::<i64>(redis::cmd("HDEL").arg(keys.meta()).arg("paused"))
                .await?;
            self.cmd::<i64>(redis::cmd("PUBLISH").arg(keys.ready()).arg(""))
                .await?;
        }
        Ok(())
    }

    /// Stores a topic's defaults in Redis (its `meta` hash), where every
    /// script reads them: max attempts and the backoff ladder for jobs that
    /// do not carry their own. `None` restores the built-in default.
    pub async fn set_topic_defaults(
        &self,
        topic: &str,
        max_attempts: Option<u32>,
        backoff: Option<&[Duration]>,
    ) -> Result<()> {
        validate_topic(topic)?;
        if let Some(m) = max_attempts {
            crate::job::check_max_attempts(m)?;
        }
        if let Some(step) = backoff
            .into_iter()
            .flatten()
            .find(|d| **d > crate::job::MAX_DELAY)
        {
            return Err(Error::invalid(format!(
                "invalid backoff step {}s: steps are at most ten years",
                step.as_secs()
            )));
        }
        // Separate commands: on a cluster the meta hashes and the topic set
        // live in different slots. Each is idempotent.
        for p in self.partition_names(topic).await? {
            self.set_meta(&p, max_attempts, backoff).await?;
        }
        self.register(topic).await?;
        Ok(())
    }

    async fn set_meta(
        &self,
        topic: &str,
        max_attempts: Option<u32>,
        backoff: Option<&[Duration]>,
    ) -> Result<()> {
        let keys = self.keys(topic);
        let max = match max_attempts {
            Some(m) => redis::cmd("HSET")
                .arg(keys.meta())
                .arg("max_attempts")
                .arg(m)
                .clone(),
            None => redis::cmd("HDEL")
                .arg(keys.meta())
                .arg("max_attempts")
                .clone(),
        };
        self.cmd::<i64>(&max).await?;
        match backoff {
            Some(l) if !l.is_empty() => {
                let s = l
                    .iter()
                    .map(|d| crate::job::ceil_ms(*d).to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                self.cmd::<i64>(redis::cmd("HSET").arg(keys.meta()).arg("backoff").arg(s))
                    .await?
            }
            _ => {
                self.cmd::<i64>(redis::cmd("HDEL").arg(keys.meta()).arg("backoff"))
                    .await?
            }
        };
        Ok(())
    }

    /// The first `count` (1 to 1000) ids of one state, in score order, with
    /// their scores in epoch ms: for [`State::Pool`] and [`State::Ready`]
    /// the next due jobs and their due times, for [`State::Running`] the
    /// leases that expire next, for [`State::Dead`] the oldest deaths. A
    /// partitioned topic's partitions are merged. Read-only: one `ZRANGE`
    /// per partition. For dashboards; use [`Queue::get`] for a job's record.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// for (id, due_ms) in queue.peek("orders", punctual::State::Pool, 10).await? {
    ///     println!("{id} is due at {due_ms}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn peek(
        &self,
        topic: &str,
        state: State,
        count: usize,
    ) -> Result<Vec<(String, i64)>> {
        validate_topic(topic)?;
        if count == 0 || count > MAX_BATCH {
            return Err(Error::invalid("peek shows 1 to 1000 jobs"));
        }
        if !matches!(
            state,
            State::Pool | State::Ready | State::Running | State::Dead
        ) {
            return Err(Error::invalid(format!(
                "cannot peek at {state} jobs: give pool, ready, running or dead"
            )));
        }
        let mut all: Vec<(String, i64)> = Vec::new();
        for name in self.partition_names(topic).await? {
            let keys = self.keys(&name);
            let key = match state {
                State::Pool => keys.pool(),
                State::Ready => keys.ready(),
                State::Running => keys.running(),
                _ => keys.dead(),
            };
            let items: Vec<(Vec<u8>, f64)> = self
                .cmd(
                    redis::cmd("ZRANGE")
                        .arg(key)
                        .arg(0)
                        .arg(count - 1)
                        .arg("WITHSCORES"),
                )
                .await?;
            all.extend(
                items
                    .into_iter()
                    .map(|(id, s)| (String::from_utf8_lossy(&id).into_owned(), s as i64)),
            );
        }
        all.sort_by_key(|(_, score)| *score);
        all.truncate(count);
        Ok(all)
    }

    // ---- the runtime's operations -------------------------------------

    /// Pops up to `k` ready jobs and leases them for `lease`, counting the
    /// attempt. Most callers use [`crate::Worker`] instead.
    pub async fn claim(&self, topic: &str, k: usize, lease: Duration) -> Result<Vec<Delivery>> {
        let v = self
            .run(&SCRIPTS.claim, topic, |inv| {
                inv.arg(k.clamp(1, MAX_BATCH)).arg(lease_ms(lease));
            })
            .await?;
        let received = std::time::Instant::now();
        let mut r = Reply::new("claim", v)?;
        if r.is_empty() {
            return Ok(Vec::new());
        }
        let claimed_us = r.int()?;
        let topic_max = r.int()?;
        let mut out = Vec::with_capacity(r.len() / 4);
        let mut not_text = Vec::new();
        while !r.is_empty() {
            let raw = r.bytes()?;
            let token = r.int()?;
            let attempt = r.int()?.clamp(0, u32::MAX as i64) as u32;
            let record = r.bytes()?;
            let (max_attempts, due_ms, created_ms, payload) = decode_claimed(&record, topic_max)
                .ok_or_else(|| {
                    Error::protocol("claim", "a record the script passed cannot be decoded")
                })?;
            let max_attempts = max_attempts.clamp(0, u32::MAX as i64) as u32;
            let id = match String::from_utf8(raw) {
                Ok(id) => id,
                Err(e) => {
                    not_text.push((e.into_bytes(), token));
                    continue;
                }
            };
            out.push(Delivery {
                topic: topic.to_string(),
                id,
                token,
                attempt,
                max_attempts,
                due_ms,
                created_ms,
                payload,
                claimed_us,
                received,
            });
        }
        // An id that is not UTF-8 (stored before enqueue refused them)
        // cannot be handed out: a Delivery's id is text, and its ack would
        // name another id. It goes to dead at once, for a person to see.
        for (raw, token) in not_text {
            let dead = self
                .run(&SCRIPTS.fail, topic, |inv| {
                    inv.arg(&raw[..])
                        .arg(token)
                        .arg("the id is not valid UTF-8, so no client can ack it (stored before punctual refused such ids): purge it, or enqueue it again under a UTF-8 id")
                        .arg("")
                        .arg("1");
                })
                .await;
            if let Err(e) = dead {
                // Its lease expires and a later claim tries again.
                tracing::warn!(topic, id = %raw.escape_ascii(), error = %e, "could not move a job whose id is not UTF-8 to dead");
            }
        }
        Ok(out)
    }

    /// Acks (id, token) pairs: the jobs are done and deleted. Returns one
    /// flag per pair: acked, or refused because the lease is no longer held.
    pub async fn ack(&self, topic: &str, done: &[(String, i64)]) -> Result<Vec<bool>> {
        let mut flags = Vec::with_capacity(done.len());
        for chunk in done.chunks(MAX_BATCH) {
            let v = self
                .run(&SCRIPTS.ack, topic, |inv| {
                    for (id, token) in chunk {
                        inv.arg(id).arg(token);
                    }
                })
                .await?;
            let f: Vec<i64> =
                redis::from_redis_value(v).map_err(|e| Error::protocol("ack", e.to_string()))?;
            flags.extend(f.into_iter().map(|x| x == 1));
        }
        Ok(flags)
    }

    /// Fails an attempt: retry after `retry_after` (or the backoff ladder),
    /// or dead when `permanent` or the attempts are used up. Fenced by `token`.
    pub async fn fail(
        &self,
        topic: &str,
        id: &str,
        token: i64,
        error: &str,
        retry_after: Option<Duration>,
        permanent: bool,
    ) -> Result<Failed> {
        let v = self
            .run(&SCRIPTS.fail, topic, |inv| {
                inv.arg(id)
                    .arg(token)
                    .arg(error)
                    .arg(
                        retry_after
                            .map(|d| crate::job::ceil_ms(d.min(crate::job::MAX_DELAY)).to_string())
                            .unwrap_or_default(),
                    )
                    .arg(if permanent { "1" } else { "0" });
            })
            .await?;
        let mut r = Reply::new("fail", v)?;
        Ok(match r.string()?.as_str() {
            "retry" => Failed::Retry,
            "dead" => Failed::Dead,
            _ => Failed::Stale,
        })
    }

    /// Extends leases to now + `lease`, never earlier than they were (a
    /// deadline already later stays); returns one flag per pair: extended,
    /// or lost (stop working on that job: it was reclaimed or cancelled).
    pub async fn extend(
        &self,
        topic: &str,
        held: &[(String, i64)],
        lease: Duration,
    ) -> Result<Vec<bool>> {
        let mut flags = Vec::with_capacity(held.len());
        for chunk in held.chunks(MAX_BATCH) {
            let v = self
                .run(&SCRIPTS.extend, topic, |inv| {
                    inv.arg(lease_ms(lease));
                    for (id, token) in chunk {
                        inv.arg(id).arg(token);
                    }
                })
                .await?;
            let f: Vec<i64> =
                redis::from_redis_value(v).map_err(|e| Error::protocol("extend", e.to_string()))?;
            flags.extend(f.into_iter().map(|x| x == 1));
        }
        Ok(flags)
    }

    /// One scheduler step: reclaim expired leases, then promote due jobs, at
    /// most a batch of each. Most callers use [`crate::Scheduler`] instead.
    pub async fn tick(
        &self,
        topic: &str,
        batch: usize,
        max_ready: usize,
        reclaim_batch: usize,
    ) -> Result<Tick> {
        let v = self
            .run(&SCRIPTS.tick, topic, |inv| {
                inv.arg(batch.clamp(1, MAX_BATCH))
                    .arg(max_ready.clamp(1, MAX_SAFE))
                    .arg(reclaim_batch.clamp(1, MAX_BATCH));
            })
            .await?;
        let mut r = Reply::new("tick", v)?;
        let ms = |v: i64| (v >= 0).then(|| Duration::from_millis(v as u64));
        Ok(Tick {
            promoted: r.int()? as u64,
            reclaimed: r.int()? as u64,
            dead: r.int()? as u64,
            refused: r.int()? == 1,
            more: r.int()? == 1,
            next_due: ms(r.int()?),
            next_lease: ms(r.int()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::decode_claimed;

    #[test]
    fn claimed_records_decode_as_the_lua_did() {
        // The example of docs/PROTOCOL.md ("A record decoded by hand").
        let r = b"5:mx34zkpw:0:60000,300000:0:{\"order\":10086}";
        let (max, due, created, payload) = decode_claimed(r, 6).unwrap();
        assert_eq!(max, 5);
        assert_eq!(due, i64::from_str_radix("mx34zkpw", 36).unwrap());
        assert_eq!(created, due);
        assert_eq!(payload, b"{\"order\":10086}");
        // Topic default, a gap, a last error, colons in the payload.
        let (max, due, created, payload) = decode_claimed(b":1z:a::4:boom:x:y", 6).unwrap();
        assert_eq!((max, due, created), (6, 71, 61));
        assert_eq!(payload, b":x:y");
        // An error length past the end leaves an empty payload.
        assert_eq!(decode_claimed(b":1:1::9:ab", 6).unwrap().3, b"");
        for bad in [
            &b"1:2:3:4"[..],
            b"x:1:1::0:",
            b":1::a:0:",
            b":1:1:a:0:",
            b":1:1::-1:",
        ] {
            assert!(
                decode_claimed(bad, 6).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}

/// The due times of a paced replay: the i-th id sent (over every call) is
/// due `start_ms + pace.offset(i, n)`, an absolute time of Redis's clock.
#[derive(Debug)]
struct Pacer {
    pace: ReplayPace,
    n: usize,
    start_ms: i64,
    sent: std::sync::atomic::AtomicUsize,
}

impl Pacer {
    /// The script's ARGV for these ids: `"ids", id...` without a pacer,
    /// else `"due", id, "a<ms>", ...`. Built before the call, so a resent
    /// call carries the same due times.
    fn args<I: AsRef<[u8]>>(pacer: Option<&Pacer>, ids: &[I]) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 2 + 1);
        match pacer {
            None => {
                out.push(b"ids".to_vec());
                out.extend(ids.iter().map(|id| id.as_ref().to_vec()));
            }
            Some(p) => {
                out.push(b"due".to_vec());
                let first = p
                    .sent
                    .fetch_add(ids.len(), std::sync::atomic::Ordering::Relaxed);
                for (j, id) in ids.iter().enumerate() {
                    let off = p.pace.offset(first + j, p.n).as_millis() as i64;
                    out.push(id.as_ref().to_vec());
                    out.push(format!("a{}", p.start_ms.saturating_add(off)).into_bytes());
                }
            }
        }
        out
    }
}
