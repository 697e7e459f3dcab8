//! The producers' side of [`Queue`]: enqueue, and change one's mind
//! (cancel, reschedule).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use redis::Value;

use super::Queue;
use crate::error::{Error, Result};
use crate::job::{EnqueueOptions, EnqueueStatus, Enqueued, Job, State, When};
use crate::keys::{validate_id, validate_topic};
use crate::partition::{generate_id, partition_name, partition_of};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// Which script call each of the jobs `pending` goes in: per partition (of
/// `k`), at most `chunk` per call. A partitioned topic's missing ids are
/// made here, since the id picks the partition.
fn route_jobs(
    topic: &str,
    k: u32,
    chunk: usize,
    pending: &[usize],
    ids: &mut [Option<String>],
) -> Vec<(String, Vec<usize>)> {
    let mut groups = Vec::new();
    if k <= 1 {
        for part in pending.chunks(chunk) {
            groups.push((topic.to_string(), part.to_vec()));
        }
        return groups;
    }
    let mut by_part: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &i in pending {
        let id = ids[i].get_or_insert_with(generate_id);
        by_part.entry(partition_of(id, k)).or_default().push(i);
    }
    for (p, idx) in by_part {
        for part in idx.chunks(chunk) {
            groups.push((partition_name(topic, p, k), part.to_vec()));
        }
    }
    groups
}

/// Waits out a Redis that answers `LOADING` (it runs no command while it
/// reads its dataset, so a resend cannot write twice), for at most the
/// queue's `loading_wait` since `since`.
struct LoadingWait {
    since: std::time::Instant,
    backoff: Duration,
}

impl LoadingWait {
    fn new() -> Self {
        LoadingWait {
            since: std::time::Instant::now(),
            backoff: Duration::from_millis(100),
        }
    }

    /// Whether to send again after `e`: when it is `LOADING` and the wait
    /// is not over, after a sleep (with a warning).
    async fn again(&mut self, queue: &Queue, e: &Error) -> bool {
        let limit = queue.inner.loading_wait;
        let waited = self.since.elapsed();
        if !e.is_loading() || waited >= limit {
            return false;
        }
        let nap = self.backoff.min(limit - waited);
        tracing::warn!(
            "Redis at {} is loading its dataset; enqueueing again in {nap:?} (waiting up to {limit:?} in all)",
            queue.url_redacted()
        );
        tokio::time::sleep(nap).await;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(2));
        true
    }
}

/// The enqueue script's refusal of a call routed with a stale partition
/// count.
fn is_stale_layout(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.code() == Some("PUNCTUAL_STALE"))
}

impl Queue {
    /// Enqueues one job.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// use punctual::{EnqueueStatus, Job};
    /// let job = Job::new(r#"{"order":10086}"#).id("close:10086").delay(Duration::from_secs(1800));
    /// let first = queue.enqueue("orders", job.clone()).await?;
    /// assert_eq!(first.status, EnqueueStatus::Created);
    /// // The same id again while it is live: nothing changes.
    /// assert!(queue.enqueue("orders", job).await?.is_duplicate());
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(&self, topic: &str, job: Job) -> Result<Enqueued> {
        let mut out = self
            .enqueue_with(topic, vec![job], &EnqueueOptions::default())
            .await?;
        Ok(out.remove(0))
    }

    /// Enqueues a batch: one script call per [`enqueue_chunk`](Queue::enqueue_chunk)
    /// jobs (250 by default), pipelined. Every job is validated before
    /// anything is written. Each call is atomic, a batch of several calls
    /// is not: when some fail, the error is [`Error::PartialBatch`], with
    /// the jobs written and those not. (A caller that needs up to 1,000
    /// jobs written by one atomic call sets
    /// [`QueueBuilder::enqueue_chunk`](crate::QueueBuilder::enqueue_chunk)
    /// to [`MAX_BATCH`](crate::MAX_BATCH).)
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// let jobs: Vec<_> = (1..=3)
    ///     .map(|n| punctual::Job::new(format!("reminder {n}")).delay(Duration::from_secs(n * 3600)))
    ///     .collect();
    /// let out = queue.enqueue_batch("reminders", jobs).await?;
    /// assert_eq!(out.len(), 3); // one result per job, in order
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_batch(&self, topic: &str, jobs: Vec<Job>) -> Result<Vec<Enqueued>> {
        self.enqueue_with(topic, jobs, &EnqueueOptions::default())
            .await
    }

    /// Enqueues a batch with options (e.g. replace live ids).
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// use punctual::{EnqueueOptions, EnqueueStatus, Job};
    /// // Push a reminder back: the live job with this id is replaced.
    /// let job = Job::new("remind user 7").id("remind:7").delay(Duration::from_secs(600));
    /// let opts = EnqueueOptions::default().replace(true);
    /// let out = queue.enqueue_with("reminders", vec![job], &opts).await?;
    /// assert!(matches!(out[0].status, EnqueueStatus::Created | EnqueueStatus::Replaced));
    /// # Ok(()) }
    /// ```
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
            // The script's when, max attempts (with options) and backoff.
            encoded.push([job.when.encode()?, job.max_arg(), job.backoff_arg()]);
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
        let mut loading = LoadingWait::new();
        while !pending.is_empty() {
            round += 1;
            let k = match self.partitions(topic).await {
                Ok(k) => k,
                Err(e) if loading.again(self, &e).await => {
                    round = 0;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let groups = route_jobs(topic, k, self.inner.enqueue_chunk, &pending, &mut ids);
            let results: Vec<(Vec<usize>, Result<Vec<Enqueued>>)> = stream::iter(groups)
                .map(|(physical, idx)| {
                    let (jobs, encoded, ids) = (&jobs, &encoded, &ids);
                    async move {
                        let r = self
                            .enqueue_call(
                                &physical, k, replace, opts.mark, &idx, jobs, encoded, ids,
                            )
                            .await;
                        (idx, r)
                    }
                })
                .buffered(8)
                .collect()
                .await;
            pending.clear();
            let mut refused_loading = None;
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
                    // Not run: sent again once the wait below allows.
                    Err(e) if e.is_loading() => {
                        refused_loading.get_or_insert(e);
                        pending.extend(idx);
                    }
                    Err(e) => {
                        failed.extend(idx);
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = refused_loading {
                if !loading.again(self, &e).await {
                    // The wait is over: what is still pending failed.
                    failed.append(&mut pending);
                    first_error.get_or_insert(e);
                }
                round = 0;
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
            // Each call (up to enqueue_chunk jobs) is atomic; the batch as a whole
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

    /// Removes the marks of `ids` from `P:{T}:fired` (of each id's
    /// partition), so that an enqueue with [`EnqueueOptions::mark`] creates
    /// them again. Returns how many were marked. One `ZREM` per partition
    /// and 1000 ids.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::{EnqueueOptions, EnqueueStatus, Job};
    /// let opts = EnqueueOptions::default().mark(true);
    /// queue.enqueue_with("orders", vec![Job::new("x").id("order:1")], &opts).await?;
    /// // Marked: enqueued again with the mark, it is not created, even once it is gone.
    /// queue.cancel("orders", "order:1").await?;
    /// let again = queue.enqueue_with("orders", vec![Job::new("x").id("order:1")], &opts).await?;
    /// assert_eq!(again[0].status, EnqueueStatus::FiredBefore);
    /// // Unmarked, it is created again.
    /// assert_eq!(queue.unmark("orders", &["order:1".into()]).await?, 1);
    /// let again = queue.enqueue_with("orders", vec![Job::new("x").id("order:1")], &opts).await?;
    /// assert_eq!(again[0].status, EnqueueStatus::Created);
    /// # Ok(()) }
    /// ```
    pub async fn unmark(&self, topic: &str, ids: &[String]) -> Result<u64> {
        validate_topic(topic)?;
        let k = self.partitions(topic).await?;
        let mut by_part: BTreeMap<u32, Vec<&String>> = BTreeMap::new();
        for id in ids {
            by_part.entry(partition_of(id, k)).or_default().push(id);
        }
        let mut n = 0;
        for (p, ids) in by_part {
            let key = self.fired_key(&partition_name(topic, p, k));
            for chunk in ids.chunks(1000) {
                let removed: u64 = self.cmd(redis::cmd("ZREM").arg(&key).arg(chunk)).await?;
                n += removed;
            }
        }
        Ok(n)
    }

    /// Gives a waiting job (pool or ready) a new due time. Returns the state
    /// it was in; a running or dead job is left alone and its state returned
    /// (replay a dead job instead); `None` when no such job is live.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// use punctual::{State, When};
    /// let was = queue.reschedule("orders", "close:10086", When::Delay(Duration::from_secs(3600))).await?;
    /// if was == Some(State::Running) {
    ///     println!("too late: it is running");
    /// }
    /// # Ok(()) }
    /// ```
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
        Ok(s.parse().ok())
    }
}
