//! Per-minute history of a topic, kept in Redis for 7 days.
//!
//! The counters in `P:{T}:stats` only grow, so a minute's figures are the
//! difference between two snapshots of them: once a minute every
//! [`crate::Scheduler`] offers a copy of the counters to `P:{T}:hist:<M>`
//! (M: the epoch minute by Redis's clock; the first offer wins). Nothing is
//! added to the per-job scripts. Lateness is known only where a job starts,
//! so every [`crate::Worker`] adds its per-minute aggregates (count, sum,
//! max and coarse buckets) to `P:{T}:late:<M>` every few seconds and when it
//! stops. [`Queue::history`] reads both. docs/PROTOCOL.md ("History") has
//! the keys.

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use redis::{Script, Value};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::queue::Queue;

/// How long history keys are kept (7 days).
///
/// ```
/// use punctual::internal::{HISTORY_TTL, MAX_HISTORY_MINUTES};
/// assert_eq!(HISTORY_TTL.as_secs() / 60, u64::from(MAX_HISTORY_MINUTES));
/// ```
pub const HISTORY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most minutes [`Queue::history`] returns: 7 days.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// use punctual::internal::MAX_HISTORY_MINUTES;
/// use punctual::ErrorKind;
/// let week = queue.history("orders", MAX_HISTORY_MINUTES).await?;
/// assert_eq!(week.minutes.len(), 10_080);
/// let err = queue.history("orders", MAX_HISTORY_MINUTES + 1).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// # Ok(()) }
/// ```
pub const MAX_HISTORY_MINUTES: u32 = 7 * 24 * 60;

/// Upper bounds (inclusive, ms) of the lateness buckets; one more bucket
/// takes everything later than the last bound.
///
/// ```
/// use punctual::internal::LATENESS_BUCKETS_MS;
/// use punctual::Lateness;
/// let mut l = Lateness::default();
/// l.record(2_500); // 2.5 ms late: in the bucket "up to 10 ms"
/// let i = l.buckets.iter().position(|&n| n == 1).unwrap();
/// assert_eq!(LATENESS_BUCKETS_MS[i], 10);
/// assert_eq!(l.buckets.len(), LATENESS_BUCKETS_MS.len() + 1);
/// ```
pub const LATENESS_BUCKETS_MS: [u64; 6] = [1, 10, 100, 1_000, 10_000, 60_000];

/// The fields of the buckets in `P:{T}:late:<M>`.
const BUCKET_FIELDS: [&str; 7] = [
    "le_1ms", "le_10ms", "le_100ms", "le_1s", "le_10s", "le_60s", "le_inf",
];

/// How often a worker adds what it measured to Redis.
pub(crate) const LATENESS_FLUSH: Duration = Duration::from_secs(5);

/// A flush that cannot reach Redis keeps its figures for the next one, but
/// only the last this many minutes of them.
const LATENESS_KEEP_MINUTES: i64 = 10;

/// After the minute turns, schedulers wait this long before their offer, so
/// a little clock jitter does not make them offer for the old minute.
const SNAPSHOT_MARGIN: Duration = Duration::from_millis(100);

static SNAPSHOT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/history/snapshot.lua")));
static LATENESS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/history/lateness.lua")));

/// How late jobs started after their due time, over some set of starts.
///
/// ```
/// let mut l = punctual::Lateness::default();
/// for us in [300, 700, 45_000] {
///     l.record(us);
/// }
/// assert_eq!(l.count, 3);
/// assert_eq!(l.max_us, 45_000);
/// assert_eq!(l.mean_us(), Some(15_333));
/// assert_eq!(l.buckets, [2, 0, 1, 0, 0, 0, 0]); // two within 1 ms, one within 100 ms
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Lateness {
    /// Starts measured.
    pub count: u64,
    /// Their lateness added up, µs.
    pub sum_us: u64,
    /// The largest, µs (0 with no starts).
    pub max_us: u64,
    /// Starts per bucket: lateness up to 1 ms, 10 ms, 100 ms, 1 s, 10 s,
    /// 60 s ([`LATENESS_BUCKETS_MS`]) and over 60 s. Each start is in one.
    pub buckets: [u64; 7],
}

impl Lateness {
    /// Adds one start, `us` late (a negative value counts as 0).
    ///
    /// ```
    /// let mut l = punctual::Lateness::default();
    /// l.record(-20); // a clock step: counted as on time
    /// l.record(90_000_000); // 90 s late: the last bucket
    /// assert_eq!(l.buckets, [1, 0, 0, 0, 0, 0, 1]);
    /// assert_eq!(l.sum_us, 90_000_000);
    /// ```
    pub fn record(&mut self, us: i64) {
        let us = us.max(0) as u64;
        self.count += 1;
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
        let i = LATENESS_BUCKETS_MS
            .iter()
            .position(|b| us <= b * 1000)
            .unwrap_or(LATENESS_BUCKETS_MS.len());
        self.buckets[i] += 1;
    }

    /// Adds another aggregate to this one.
    ///
    /// ```
    /// use punctual::Lateness;
    /// let (mut a, mut b) = (Lateness::default(), Lateness::default());
    /// a.record(1_000);
    /// b.record(5_000);
    /// b.record(3_000);
    /// a.add(&b);
    /// assert_eq!((a.count, a.sum_us, a.max_us), (3, 9_000, 5_000));
    /// ```
    pub fn add(&mut self, other: &Lateness) {
        self.count += other.count;
        self.sum_us += other.sum_us;
        self.max_us = self.max_us.max(other.max_us);
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
    }

    /// The mean lateness, µs (`None` with no starts).
    ///
    /// ```
    /// let mut l = punctual::Lateness::default();
    /// assert_eq!(l.mean_us(), None);
    /// l.record(1_000);
    /// l.record(2_000);
    /// assert_eq!(l.mean_us(), Some(1_500));
    /// ```
    pub fn mean_us(&self) -> Option<u64> {
        (self.count > 0).then(|| self.sum_us / self.count)
    }

    fn from_hash(h: &HashMap<String, i64>) -> Lateness {
        let get = |k: &str| h.get(k).copied().unwrap_or(0).max(0) as u64;
        let mut l = Lateness {
            count: get("count"),
            sum_us: get("sum_us"),
            max_us: get("max_us"),
            buckets: [0; 7],
        };
        for (b, f) in l.buckets.iter_mut().zip(BUCKET_FIELDS) {
            *b = get(f);
        }
        l
    }
}

/// The figures of one minute of a topic ([`Queue::history`]).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for m in queue.history("orders", 15).await?.minutes {
///     let done = m.counters.as_ref().map(|c| c.get("done").copied().unwrap_or(0));
///     let late = m.lateness.mean_us().map(|us| format!("{:.1} ms", us as f64 / 1000.0));
///     println!(
///         "{}{}: done {}, mean lateness {}",
///         m.minute,
///         if m.partial { " (so far)" } else { "" },
///         done.map_or("?".to_string(), |n| n.to_string()),
///         late.unwrap_or_else(|| "-".into()),
///     );
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct MinuteFigures {
    /// The minute: epoch ms / 60,000 (Redis's clock).
    pub minute: i64,
    /// The current minute: the figures so far.
    pub partial: bool,
    /// When the minute's first snapshot was taken (epoch ms), normally just
    /// after the minute began; later when no scheduler ran at its start, and
    /// then the figures cover less than the minute. `None` with a gap.
    pub start_ms: Option<i64>,
    /// How much each counter grew in the minute (PROTOCOL.md, "Counters").
    /// `None`: a gap, since no scheduler took the snapshot at the minute's
    /// start or end, so the figures are not known. A counter that went back
    /// (the stats were reset) counts from 0: never negative.
    pub counters: Option<BTreeMap<String, u64>>,
    /// How late the jobs started in the minute were, as the workers
    /// measured it.
    pub lateness: Lateness,
}

/// Per-minute figures of a topic, oldest first, ending with the current
/// (partial) minute ([`Queue::history`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// let h = queue.history("orders", 3).await?;
/// assert_eq!(h.partitions, 1);
/// assert_eq!(h.minutes.len(), 3);
/// assert!(h.minutes[2].partial && !h.minutes[1].partial);
/// assert_eq!(h.minutes[2].minute, h.now_ms / 60_000);
/// // No scheduler ran: every minute is a gap, not zeros.
/// assert!(h.minutes.iter().all(|m| m.counters.is_none()));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct History {
    /// The topic.
    pub topic: String,
    /// Its partitions (summed in every figure).
    pub partitions: u32,
    /// Redis's clock when read, epoch ms.
    pub now_ms: i64,
    /// The upper bounds of the lateness buckets ([`LATENESS_BUCKETS_MS`]).
    pub bucket_bounds_ms: Vec<u64>,
    /// One entry per minute, oldest first; the last is the current minute.
    pub minutes: Vec<MinuteFigures>,
}

fn hist_key(prefix: &str, topic: &str, minute: i64) -> String {
    format!("{prefix}:{{{topic}}}:hist:{minute}")
}

fn late_key(prefix: &str, topic: &str, minute: i64) -> String {
    format!("{prefix}:{{{topic}}}:late:{minute}")
}

fn stats_key(prefix: &str, topic: &str) -> String {
    format!("{prefix}:{{{topic}}}:stats")
}

fn local_minute() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64 / 60_000)
        .unwrap_or(0)
}

fn int_map(v: Value) -> Result<HashMap<String, i64>> {
    let raw: HashMap<String, String> =
        redis::from_redis_value(v).map_err(|e| Error::protocol("history", e.to_string()))?;
    Ok(raw
        .into_iter()
        .filter_map(|(k, v)| v.parse::<i64>().ok().map(|n| (k, n)))
        .collect())
}

/// How much each counter grew from `start` to `end`; a counter that went
/// back was reset and counts from 0.
fn growth(start: &HashMap<String, i64>, end: &HashMap<String, i64>) -> BTreeMap<String, u64> {
    end.iter()
        .filter(|(k, _)| k.as_str() != "at")
        .map(|(k, &e)| {
            let e = e.max(0);
            let s = start.get(k).copied().unwrap_or(0).max(0);
            let d = if e >= s { e - s } else { e };
            (k.clone(), d as u64)
        })
        .collect()
}

/// One partition's minutes: (start of the snapshot, growth, lateness).
type PartMinutes = Vec<(Option<i64>, Option<BTreeMap<String, u64>>, Lateness)>;

impl Queue {
    /// Offers a snapshot of the counters of `topic` (every partition) for
    /// the current minute by Redis's clock, as a [`crate::Scheduler`] does
    /// once a minute; the first offer of a minute wins. Returns the time
    /// until the next minute begins.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::Job;
    /// queue.enqueue("orders", Job::new("1")).await?;
    /// let next = queue.snapshot_history("orders").await?;
    /// assert!(next <= Duration::from_secs(60));
    /// # if next < Duration::from_secs(2) {
    /// #     tokio::time::sleep(next).await; // too close to the minute's end for this example
    /// #     queue.snapshot_history("orders").await?;
    /// # }
    /// queue.enqueue("orders", Job::new("2")).await?;
    /// // The current minute's figures so far: what grew since the snapshot.
    /// let h = queue.history("orders", 1).await?;
    /// assert_eq!(h.minutes[0].counters.as_ref().unwrap()["enqueued"], 1);
    /// # Ok(()) }
    /// ```
    pub async fn snapshot_history(&self, topic: &str) -> Result<Duration> {
        let mut next = Duration::from_secs(60);
        for p in self.partition_names(topic).await? {
            next = next.min(self.snapshot_partition(&p).await?);
        }
        Ok(next)
    }

    /// [`Queue::snapshot_history`] of one partition (or unpartitioned topic).
    pub(crate) async fn snapshot_partition(&self, topic: &str) -> Result<Duration> {
        let prefix = self.prefix();
        let mut minute = local_minute();
        let mut next = 60_000;
        // The local clock guesses the minute; the script says if it was wrong.
        for _ in 0..3 {
            let mut conn = self.conn();
            let (written, current, next_ms): (i64, i64, i64) = SNAPSHOT
                .key(stats_key(prefix, topic))
                .key(hist_key(prefix, topic, minute))
                .arg(minute)
                .arg(HISTORY_TTL.as_millis() as u64)
                .invoke_async(&mut conn)
                .await
                .map_err(Error::from_redis)?;
            next = next_ms;
            if written >= 0 {
                break;
            }
            minute = current;
        }
        Ok(Duration::from_millis(next.clamp(0, 60_000) as u64))
    }

    /// Adds a worker's lateness aggregate of `minute` to Redis.
    /// Deletes the history of one topic or partition: every minute key of
    /// the last 7 days (and a little ahead, for clocks that run fast), by
    /// name, in `DEL`s of 1,000 keys (one slot: no `SCAN` needed).
    pub(crate) async fn delete_history(&self, name: &str) -> Result<()> {
        let now = self.redis_now_ms().await? / 60_000;
        let first = now - i64::from(MAX_HISTORY_MINUTES) - 2;
        let keys: Vec<String> = (first..=now + 2)
            .flat_map(|m| {
                [
                    hist_key(self.prefix(), name, m),
                    late_key(self.prefix(), name, m),
                ]
            })
            .collect();
        for chunk in keys.chunks(1000) {
            self.cmd::<i64>(redis::cmd("DEL").arg(chunk)).await?;
        }
        Ok(())
    }

    pub(crate) async fn add_lateness(&self, topic: &str, minute: i64, l: &Lateness) -> Result<()> {
        let mut conn = self.conn();
        let mut inv = LATENESS.key(late_key(self.prefix(), topic, minute));
        inv.arg(HISTORY_TTL.as_millis() as u64)
            .arg(l.max_us)
            .arg("count")
            .arg(l.count)
            .arg("sum_us")
            .arg(l.sum_us);
        for (f, n) in BUCKET_FIELDS.iter().zip(l.buckets) {
            if n > 0 {
                inv.arg(*f).arg(n);
            }
        }
        let _: i64 = inv
            .invoke_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        Ok(())
    }

    /// The figures of the last `minutes` minutes of `topic` (1 to 10,080,
    /// 7 days), oldest first, ending with the current minute (its figures
    /// so far): how much each counter grew per minute, from the snapshots
    /// the schedulers take, and how late jobs started, as the workers
    /// measured it. A minute without snapshots (no scheduler ran) is a gap
    /// (`counters` is `None`), never zeros. The partitions of a partitioned
    /// topic are summed; a minute any of them misses is a gap.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let h = queue.history("orders", 60).await?;
    /// for m in &h.minutes {
    ///     match &m.counters {
    ///         Some(c) => println!("{}: {} done", m.minute, c.get("done").unwrap_or(&0)),
    ///         None => println!("{}: no data", m.minute),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn history(&self, topic: &str, minutes: u32) -> Result<History> {
        validate_topic(topic)?;
        if minutes == 0 || minutes > MAX_HISTORY_MINUTES {
            return Err(Error::invalid(format!(
                "history of {minutes} minutes: give 1 to {MAX_HISTORY_MINUTES} (7 days)"
            )));
        }
        let names = self.partition_names(topic).await?;
        let now_ms = self.redis_now_ms().await?;
        let last = now_ms / 60_000;
        let first = last - i64::from(minutes) + 1;
        let parts: Vec<PartMinutes> =
            futures::future::try_join_all(names.iter().map(|p| self.history_of(p, first, last)))
                .await?;
        let mut out = Vec::with_capacity(minutes as usize);
        for (i, minute) in (first..=last).enumerate() {
            let mut start_ms: Option<i64> = None;
            let mut counters = Some(BTreeMap::<String, u64>::new());
            let mut lateness = Lateness::default();
            for part in &parts {
                let (at, grown, late) = &part[i];
                lateness.add(late);
                start_ms = match (start_ms, at) {
                    (Some(a), Some(b)) => Some(a.min(*b)),
                    (a, b) => a.or(*b),
                };
                match (counters.as_mut(), grown) {
                    (Some(total), Some(g)) => {
                        for (k, v) in g {
                            *total.entry(k.clone()).or_default() += v;
                        }
                    }
                    _ => counters = None,
                }
            }
            if counters.is_none() {
                start_ms = None;
            }
            out.push(MinuteFigures {
                minute,
                partial: minute == last,
                start_ms,
                counters,
                lateness,
            });
        }
        Ok(History {
            topic: topic.to_string(),
            partitions: names.len() as u32,
            now_ms,
            bucket_bounds_ms: LATENESS_BUCKETS_MS.to_vec(),
            minutes: out,
        })
    }

    /// The minutes `first..=last` of one partition: the snapshots of
    /// `first..=last`, the live counters (the end of `last`) and the
    /// lateness, in one pipeline.
    async fn history_of(&self, topic: &str, first: i64, last: i64) -> Result<PartMinutes> {
        let prefix = self.prefix();
        let mut pipe = redis::pipe();
        for m in first..=last {
            pipe.cmd("HGETALL").arg(hist_key(prefix, topic, m));
        }
        pipe.cmd("HGETALL").arg(stats_key(prefix, topic));
        for m in first..=last {
            pipe.cmd("HGETALL").arg(late_key(prefix, topic, m));
        }
        let mut conn = self.conn();
        let replies: Vec<Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        let n = (last - first + 1) as usize;
        if replies.len() != 2 * n + 1 {
            return Err(Error::protocol("history", "wrong number of replies"));
        }
        let mut replies = replies.into_iter();
        let mut snaps: Vec<Option<HashMap<String, i64>>> = Vec::with_capacity(n + 1);
        for v in replies.by_ref().take(n) {
            let h = int_map(v)?;
            snaps.push((!h.is_empty()).then_some(h));
        }
        // The live counters end the current minute.
        let live = int_map(replies.next().expect("counted above"))?;
        snaps.push(Some(live));
        let mut out = Vec::with_capacity(n);
        for (i, v) in replies.enumerate() {
            let late = Lateness::from_hash(&int_map(v)?);
            let (start, end) = (&snaps[i], &snaps[i + 1]);
            let figures = match (start, end) {
                (Some(s), Some(e)) => (s.get("at").copied(), Some(growth(s, e))),
                _ => (None, None),
            };
            out.push((figures.0, figures.1, late));
        }
        Ok(out)
    }
}

/// Offers a snapshot of each of `topics` (partitions) once a minute, just
/// after the minute begins by Redis's clock, until `stop`.
pub(crate) async fn snapshot_loop(queue: Queue, topics: Vec<String>, stop: CancellationToken) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let offers = topics.iter().map(|t| queue.snapshot_partition(t));
        let mut wait = Duration::from_secs(60);
        let mut failed = false;
        for (t, r) in topics.iter().zip(futures::future::join_all(offers).await) {
            match r {
                Ok(next) => wait = wait.min(next),
                Err(e) => {
                    tracing::warn!(topic = %t, error = %e, "history snapshot failed; retrying in {backoff:?}");
                    failed = true;
                }
            }
        }
        let wait = if failed {
            let b = backoff;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            b
        } else {
            backoff = Duration::from_secs(1);
            wait + SNAPSHOT_MARGIN
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// What a worker measured and has not yet added to Redis: per topic (or
/// partition) and minute.
#[derive(Debug, Default)]
pub(crate) struct LatenessBook {
    open: Mutex<HashMap<(String, i64), Lateness>>,
}

impl LatenessBook {
    /// Notes the starts of one claim's jobs, claimed at `claimed_us`
    /// (Redis's clock): one lock and one key per claim, not per job.
    pub(crate) fn record(&self, topic: &str, claimed_us: i64, starts: &Lateness) {
        let minute = claimed_us.div_euclid(60_000_000);
        self.open
            .lock()
            .unwrap()
            .entry((topic.to_string(), minute))
            .or_default()
            .add(starts);
    }

    /// Adds everything noted to Redis. What cannot be added is kept for the
    /// next flush (the last few minutes of it).
    pub(crate) async fn flush(&self, queue: &Queue) {
        let taken = std::mem::take(&mut *self.open.lock().unwrap());
        let newest = taken.keys().map(|(_, m)| *m).max().unwrap_or(0);
        for ((topic, minute), l) in taken {
            if let Err(e) = queue.add_lateness(&topic, minute, &l).await {
                tracing::debug!(topic = %topic, error = %e, "could not add lateness to the history; will retry");
                if minute > newest - LATENESS_KEEP_MINUTES {
                    self.open
                        .lock()
                        .unwrap()
                        .entry((topic, minute))
                        .or_default()
                        .add(&l);
                }
            }
        }
    }

    /// Flushes every [`LATENESS_FLUSH`] until `stop`, then once more.
    pub(crate) async fn run(&self, queue: &Queue, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(LATENESS_FLUSH) => {}
            }
            self.flush(queue).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.flush(queue)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_take_their_upper_bound_and_the_rest_goes_last() {
        let mut l = Lateness::default();
        for us in [-5, 0, 1_000, 1_001, 5_000, 60_000_000, 60_000_001] {
            l.record(us);
        }
        assert_eq!(l.buckets, [3, 2, 0, 0, 0, 1, 1]);
        assert_eq!(l.count, 7);
        assert_eq!(l.max_us, 60_000_001);
    }

    #[test]
    fn growth_never_goes_negative() {
        let m = |v: &[(&str, i64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        let g = growth(
            &m(&[("at", 1), ("done", 10), ("dead", 3)]),
            &m(&[("at", 2), ("done", 4), ("dead", 5), ("enqueued", 7)]),
        );
        let want: BTreeMap<String, u64> = [
            ("dead".into(), 2),
            ("done".into(), 4),
            ("enqueued".into(), 7),
        ]
        .into();
        assert_eq!(g, want);
    }
}
