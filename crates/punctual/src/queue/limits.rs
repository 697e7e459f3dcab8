//! A topic's limits ([`Queue::set_limits`], [`Queue::limits`]): fields of
//! each partition's `meta`, read by the claim script.

use super::Queue;
use crate::error::Result;
use crate::keys::validate_topic;
use crate::limits::{Limits, Rate};

impl Queue {
    /// Stores a topic's limits in Redis (its `meta` hash), where the claim
    /// script reads them: every worker on every host goes through it, so
    /// adding workers never exceeds a limit. Replaces the limits set before
    /// (`Limits::default()` removes them). On a partitioned topic each
    /// partition gets the counts divided by the partitions, rounded up.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::Limits;
    /// let limits = Limits::default().rate("200/s".parse()?).burst(20).max_running(50);
    /// queue.set_limits("webhooks", &limits).await?;
    /// assert_eq!(queue.limits("webhooks").await?, limits);
    /// queue.set_limits("webhooks", &Limits::default()).await?;
    /// assert!(queue.limits("webhooks").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn set_limits(&self, topic: &str, limits: &Limits) -> Result<()> {
        validate_topic(topic)?;
        limits.validate()?;
        let parts = self.partition_names(topic).await?;
        let share = limits.per_partition(parts.len() as u32);
        for p in &parts {
            let keys = self.keys(p);
            let meta = keys.meta();
            let mut set = redis::cmd("HSET");
            set.arg(meta);
            let mut del = redis::cmd("HDEL");
            del.arg(meta);
            let (mut sets, mut dels) = (0, 0);
            let mut field = |name: &str, v: Option<String>| match v {
                Some(v) => {
                    set.arg(name).arg(v);
                    sets += 1;
                }
                None => {
                    del.arg(name);
                    dels += 1;
                }
            };
            field("rate", share.rate.map(|r| r.wire()));
            field("burst", share.burst.map(|b| b.to_string()));
            field("max_running", share.max_running.map(|m| m.to_string()));
            if share.rate.is_none() {
                // The bucket of a rate removed: a new rate starts full.
                field("bucket", None);
            }
            if sets > 0 {
                self.cmd::<i64>(&set).await?;
            }
            if dels > 0 {
                self.cmd::<i64>(&del).await?;
            }
            // Workers waiting for a token or a slot claim again at once.
            self.cmd::<i64>(redis::cmd("PUBLISH").arg(keys.ready()).arg(""))
                .await?;
        }
        self.register(topic).await?;
        Ok(())
    }

    /// A topic's limits as stored; on a partitioned topic the partitions'
    /// shares added up (so they may exceed what was set by the rounding).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// assert!(queue.limits("orders").await?.is_none());
    /// queue.set_limits("orders", &punctual::Limits::default().max_running(8)).await?;
    /// assert_eq!(queue.limits("orders").await?.max_running, Some(8));
    /// # Ok(()) }
    /// ```
    pub async fn limits(&self, topic: &str) -> Result<Limits> {
        let mut total = Limits::default();
        for p in self.partition_names(topic).await? {
            let l = self.limits_of(&p).await?;
            total = add(total, l);
        }
        Ok(total)
    }

    /// The limits stored in one partition's (or unpartitioned topic's) meta.
    pub(crate) async fn limits_of(&self, physical: &str) -> Result<Limits> {
        let (rate, burst, max_running): (Option<String>, Option<u32>, Option<u32>) = self
            .cmd(
                redis::cmd("HMGET")
                    .arg(self.keys(physical).meta())
                    .arg("rate")
                    .arg("burst")
                    .arg("max_running"),
            )
            .await?;
        Ok(from_fields(rate.as_deref(), burst, max_running))
    }
}

/// Limits from the meta fields as stored (unreadable ones count as unset,
/// as the claim script treats them).
pub(crate) fn from_fields(
    rate: Option<&str>,
    burst: Option<u32>,
    max_running: Option<u32>,
) -> Limits {
    let rate = rate.and_then(Rate::from_wire);
    Limits {
        rate,
        burst: burst.filter(|b| *b > 0 && rate.is_some()),
        max_running: max_running.filter(|m| *m > 0),
    }
}

/// Two partitions' limits added up.
pub(crate) fn add(a: Limits, b: Limits) -> Limits {
    let sum = |x: Option<u32>, y: Option<u32>| match (x, y) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        (x, y) => x.or(y),
    };
    Limits {
        rate: match (a.rate, b.rate) {
            (Some(x), Some(y)) => Some(Rate {
                n: x.n
                    .saturating_add((y.n as u64 * x.per_ms() / y.per_ms()) as u32),
                per: x.per,
            }),
            (x, y) => x.or(y),
        },
        burst: sum(a.burst, b.burst),
        max_running: sum(a.max_running, b.max_running),
    }
}
