//! Operators' changes through [`Queue`]: partitions, bulk cancel, topic
//! delete, pause, topic defaults (dead-letter replay and purge: `dead.rs`).

use std::collections::HashSet;
use std::time::Duration;

use futures::stream::{self, StreamExt};

use super::{Queue, MAX_BATCH};
use crate::error::{Error, Result};
use crate::job::{Listed, State, TopicDeleted};
use crate::keys::{partitions_key, topics_key, validate_id, validate_topic};
use crate::partition::{partition_name, MAX_PARTITIONS};
use crate::scripts::SCRIPTS;

impl Queue {
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
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// // Before any job is enqueued to it: spread "clicks" over 8 cluster slots.
    /// queue.set_partitions("clicks", 8).await?;
    /// assert_eq!(queue.partitions("clicks").await?, 8);
    /// # Ok(()) }
    /// ```
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

    /// Cancels every job of the topic whose id starts with `id_prefix` (not
    /// empty), in any state, found by [`Queue::list`]; with `dry_run`, only
    /// finds them. Returns the ids with the state each was in (with
    /// `dry_run`: the state each is in). A job enqueued while this runs may
    /// be left alone.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// // What would go, then cancel it: every job of customer 42.
    /// let found = queue.cancel_prefix("emails", "customer:42:", true).await?;
    /// println!("{} jobs to cancel", found.len());
    /// for (id, state) in queue.cancel_prefix("emails", "customer:42:", false).await? {
    ///     println!("cancelled {id} (was {state})");
    /// }
    /// # Ok(()) }
    /// ```
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
                for Listed { id, .. } in page.jobs {
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
    /// partitions (counters, settings, pause, sequence, the occurrences its
    /// schedules fired included), its schedules with their watermarks and
    /// lock, then its name in the topic set and its partition count.
    /// Refused, with nothing deleted, while any job exists in any state or
    /// partition: each partition is checked and deleted in one script, so a
    /// job enqueued meanwhile is never lost (a producer that enqueues to the
    /// topic after the deletion creates it anew; a long-running producer of
    /// this library does not list it again, which `check` reports as an
    /// unlisted topic). The schedules' lock is held throughout, so no firer
    /// enqueues an occurrence meanwhile; the schedules go only once every
    /// partition is deleted.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// if let punctual::TopicDeleted::HoldsJobs(n) = queue.delete_topic("old-orders").await? {
    ///     eprintln!("not deleted: {n} jobs left");
    /// }
    /// # Ok(()) }
    /// ```
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
            let n: u64 = self
                .cmd(
                    redis::cmd("EXISTS")
                        .arg(&keys.keys[..])
                        .arg(self.fired_key(name)),
                )
                .await?;
            any_key |= n > 0;
        }
        if held > 0 {
            return Ok(TopicDeleted::HoldsJobs(held));
        }
        let n: u64 = self
            .cmd(redis::cmd("EXISTS").arg(&self.schedule_keys(topic)[..]))
            .await?;
        any_key |= n > 0;
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
        // No firer pass runs from here on (each holds this lock).
        let lock = self.lock_schedules(topic).await?;
        match self.delete_partitions(&names).await {
            Ok(0) => self.delete_schedules(topic, lock).await?,
            r => {
                self.unlock(lock).await;
                // A job arrived after the check: stop, with nothing of the
                // topic's jobs lost (earlier empty partitions lost only
                // their counters) and its schedules kept.
                return Ok(TopicDeleted::HoldsJobs(r?));
            }
        }
        // History last: the lock (10 s) is not held for its many DELs.
        for name in &names {
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

    /// Runs `topic_delete` (with the fired key) on each of `names`; stops
    /// at the first that holds jobs and returns how many (0: all deleted).
    async fn delete_partitions(&self, names: &[String]) -> Result<u64> {
        for name in names {
            let v = self
                .run(&SCRIPTS.topic_delete, name, |inv| {
                    inv.key(self.fired_key(name));
                })
                .await?;
            let n: u64 = redis::from_redis_value(v)
                .map_err(|e| Error::protocol("topic_delete", e.to_string()))?;
            if n > 0 {
                return Ok(n);
            }
        }
        Ok(0)
    }

    /// Stops workers from claiming jobs of this topic (jobs still become due).
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// queue.pause("emails").await?;
    /// assert!(queue.stats("emails").await?.paused);
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self, topic: &str) -> Result<()> {
        for p in self.partition_names(topic).await? {
            let keys = self.keys(&p);
            self.cmd::<i64>(redis::cmd("HSET").arg(keys.meta()).arg("paused").arg("1"))
                .await?;
        }
        Ok(())
    }

    /// Lets workers claim from this topic again, and wakes them.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// queue.resume("emails").await?;
    /// assert!(!queue.stats("emails").await?.paused);
    /// # Ok(()) }
    /// ```
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
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// use std::time::Duration;
    /// let ladder = [Duration::from_secs(1), Duration::from_secs(10), Duration::from_secs(60)];
    /// queue.set_topic_defaults("webhooks", Some(10), Some(&ladder)).await?;
    /// // Back to the built-in defaults (6 attempts, 0s 5s 30s 2m 10m 30m).
    /// queue.set_topic_defaults("webhooks", None, None).await?;
    /// # Ok(()) }
    /// ```
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
}
