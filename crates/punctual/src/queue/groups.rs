//! Fair groups: what the group index of a topic holds (PROTOCOL.md "Groups").

use std::collections::BTreeMap;

use crate::error::Result;
use crate::queue::Queue;

/// One active group of a topic, as [`Queue::groups`] reports it.
///
/// ```
/// let g = punctual::GroupInfo { group: "shop-17".into(), indexed: 3, vtime: 12.0 };
/// assert_eq!(g.group, "shop-17");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct GroupInfo {
    /// The group's name; `""` for the jobs without a group.
    pub group: String,
    /// Entries in the group's index: its ready jobs, plus entries of jobs
    /// that left ready by id (cancel, reschedule) until a claim drops them.
    pub indexed: u64,
    /// The group's virtual time (jobs served, counted from the topic's
    /// virtual time when it became active); the lowest is served next. On a
    /// partitioned topic, the lowest of its partitions.
    pub vtime: f64,
}

impl Queue {
    /// The active groups of a topic (those with indexed jobs), by name; empty
    /// for a topic that never had a grouped job. A partitioned topic's
    /// partitions are added up.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::Job;
    /// assert!(queue.groups("mail").await?.is_empty());
    /// queue.enqueue("mail", Job::new("a").group("shop-1")).await?;
    /// queue.enqueue("mail", Job::new("b").group("shop-1")).await?;
    /// let groups = queue.groups("mail").await?;
    /// assert_eq!(groups.len(), 1);
    /// assert_eq!((groups[0].group.as_str(), groups[0].indexed), ("shop-1", 2));
    /// # Ok(()) }
    /// ```
    pub async fn groups(&self, topic: &str) -> Result<Vec<GroupInfo>> {
        let mut all: BTreeMap<String, GroupInfo> = BTreeMap::new();
        for p in self.partition_names(topic).await? {
            let meta = self.keys(&p).meta().to_string();
            let base = meta.strip_suffix("meta").unwrap_or(&meta).to_string();
            let active: Vec<(String, f64)> = self
                .cmd(
                    redis::cmd("ZRANGE")
                        .arg(format!("{base}groups"))
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES"),
                )
                .await?;
            for (group, vtime) in active {
                let indexed: u64 = self
                    .cmd(redis::cmd("ZCARD").arg(format!("{base}g:{group}")))
                    .await?;
                let e = all.entry(group.clone()).or_insert(GroupInfo {
                    group,
                    indexed: 0,
                    vtime,
                });
                e.indexed += indexed;
                e.vtime = e.vtime.min(vtime);
            }
        }
        Ok(all.into_values().collect())
    }
}
