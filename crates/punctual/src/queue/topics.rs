//! Topics through [`Queue`]: which are known, and one topic's sizes and
//! counters.

use super::Queue;
use crate::error::Result;
use crate::job::TopicStats;
use crate::keys::{topics_key, validate_topic};

/// The set of known topics, read by [`Queue::list_topics`].
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let topics = queue.list_topics().await?;
/// for topic in &topics.valid {
///     println!("{topic}: {} dead", queue.stats(topic).await?.dead);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct Topics {
    /// The valid topic names, sorted.
    pub valid: Vec<String>,
    /// Names in the set that are not valid topics, sorted.
    pub skipped: Vec<SkippedTopic>,
}

/// A name in the set of known topics that is not a valid topic.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for punctual::SkippedTopic { name, reason, .. } in queue.list_topics().await?.skipped {
///     eprintln!("{name} is in the topic set but is not a topic: {reason}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SkippedTopic {
    /// The name, escaped for printing (bytes that are not UTF-8 as `\xNN`,
    /// invisible and control characters as `\u{..}`).
    pub name: String,
    /// Why it is not a valid topic.
    pub reason: String,
}

impl Queue {
    /// Sizes and counters of a topic.
    /// For a partitioned topic, the partitions add up: sizes and counters
    /// summed, the earliest next due time, the longest ready wait and
    /// overdue age.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let s = queue.stats("orders").await?;
    /// if let Some(ms) = s.oldest_ready_ms {
    ///     println!("the oldest ready job has waited {ms} ms for a worker");
    /// }
    /// # Ok(()) }
    /// ```
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
            total.limits = super::limits::add(total.limits, s.limits);
            total.limited = match (total.limited, s.limited) {
                (Some(crate::Limited::MaxRunning), _) => Some(crate::Limited::MaxRunning),
                (a, b) => b.or(a),
            };
        }
        // The registry is advisory: stats do not fail for it.
        if total.running > 0 {
            let waiting: u64 = match self.processes().await {
                Ok(ps) => ps.iter().filter_map(|p| p.waiting.get(topic)).sum(),
                Err(e) => {
                    tracing::debug!(error = %e, "stats: the registry could not be read; waiting jobs counted as running");
                    0
                }
            };
            total.waiting = waiting.min(total.running);
        }
        Ok(total)
    }

    /// The known topics (every topic that was ever enqueued to), sorted.
    /// Names in the set that are not valid topics (anyone may `SADD` it) are
    /// left out and logged (once per name and process);
    /// [`Queue::list_topics`] reports them.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// for topic in queue.topics().await? {
    ///     let s = queue.stats(&topic).await?;
    ///     println!("{topic}: {} pool, {} ready", s.pool, s.ready);
    /// }
    /// # Ok(()) }
    /// ```
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
}
