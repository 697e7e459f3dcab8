//! The dead letters through [`Queue`]: list them, replay them (now or
//! paced), purge them.

use std::collections::BTreeMap;

use redis::{Script, Value};

use super::{Queue, MAX_BATCH};
use crate::error::{Error, Result};
use crate::job::{DeadSelector, JobInfo, ReplayPace, State};
use crate::keys::{validate_id, validate_topic};
use crate::partition::{partition_name, partition_of};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

impl Queue {
    /// A page of dead jobs, most recent death first: `count` (1 to 1000)
    /// jobs after skipping `offset`.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// for job in queue.dead_list("orders", 0, 20).await? {
    ///     println!("{}: {}", job.id, job.last_error.as_deref().unwrap_or("-"));
    /// }
    /// # Ok(()) }
    /// ```
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
            let opts = crate::options::parse_field(&r.bytes()?).unwrap_or_default();
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
                deadline_ms: opts.deadline_ms,
                timeout_ms: opts.timeout_ms,
                group: opts.group,
                traceparent: opts.traceparent,
                tracestate: opts.tracestate,
            });
        }
        Ok(out)
    }

    /// Moves dead jobs back to ready, due now, attempts reset. Returns the
    /// ids replayed. A job with an expiry deadline has it moved by as much
    /// as its due time moves (the window is kept), so a job that expired
    /// gets a fresh window and runs.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use punctual::DeadSelector;
    /// // The upstream is fixed: run the jobs that died of it again.
    /// let ids = queue.dead_replay("orders", DeadSelector::All).await?;
    /// println!("replayed {}", ids.len());
    /// # Ok(()) }
    /// ```
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
                Some(Pacer {
                    pace,
                    n,
                    start_ms: self.redis_now_ms().await?,
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
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use punctual::DeadSelector;
    /// let n = queue.dead_purge("orders", DeadSelector::Oldest(1000)).await?;
    /// println!("purged {n}");
    /// # Ok(()) }
    /// ```
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
                        let (n, ids) = self
                            .dead_call(script, &physical, pacer, chunk, &read)
                            .await?;
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
                        let physical = partition_name(topic, p, k);
                        let (done, ids) = self
                            .dead_call(script, &physical, pacer, &ids, &read)
                            .await?;
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
                        let (done, got) = self
                            .dead_call(script, &physical, pacer, &ids, &read)
                            .await?;
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

    /// One call of a dead-letter script on these ids of one partition
    /// (with the pacer's due times, if any); `read` makes its reply a count
    /// and the ids acted on.
    async fn dead_call<I: AsRef<[u8]>>(
        &self,
        script: &Script,
        physical: &str,
        pacer: Option<&Pacer>,
        ids: &[I],
        read: &impl Fn(Value) -> Result<(usize, Vec<String>)>,
    ) -> Result<(usize, Vec<String>)> {
        let args = Pacer::args(pacer, ids);
        let v = self
            .run(script, physical, |inv| {
                inv.arg(args);
            })
            .await?;
        read(v)
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
