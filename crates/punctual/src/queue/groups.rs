//! Fair groups: what the group index of a topic holds, and the limits of
//! each group (PROTOCOL.md "Groups", "Group limits").

use std::collections::BTreeMap;

use redis::Value;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::limits::Limits;
use crate::options::validate_group;
use crate::queue::limits::{add, from_fields};
use crate::queue::Queue;
use crate::scripts::SCRIPTS;

/// Why a group is held back by its own limits ([`GroupInfo::held`]).
///
/// ```
/// use punctual::GroupHold;
/// assert_ne!(GroupHold::Until(1_700_000_000_000), GroupHold::RunningEnds);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GroupHold {
    /// Its rate: served again from this time (epoch ms), its next token.
    Until(u64),
    /// Its `max_running` jobs run: served again when one of them ends.
    RunningEnds,
}

/// One group of a topic, as [`Queue::groups`] reports it.
///
/// ```
/// let g = punctual::GroupInfo { group: "shop-17".into(), indexed: 3, vtime: 12.0, ..Default::default() };
/// assert_eq!(g.group, "shop-17");
/// assert!(g.limits.is_none() && g.held.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupInfo {
    /// The group's name; `""` for the jobs without a group.
    pub group: String,
    /// Entries in the group's index: its ready jobs, plus entries of jobs
    /// that left ready by id (cancel, reschedule) until a claim drops them.
    pub indexed: u64,
    /// The group's virtual time (jobs served, counted from the topic's
    /// virtual time when it became active); the lowest is served next. On a
    /// partitioned topic, the lowest of its partitions. 0 for a group held
    /// back (it returns at the topic's virtual time).
    pub vtime: f64,
    /// Its jobs running now; counted only while the topic has group limits
    /// ([`Queue::set_group_limits`]), else 0.
    pub running: u64,
    /// Set while the group's own limits hold it back (on a partitioned
    /// topic: in some partition; the earliest time of them).
    pub held: Option<GroupHold>,
    /// The limits that apply to it: its own, or the topic's defaults for
    /// every group (added up over the partitions).
    pub limits: Limits,
}

/// A topic's group limits ([`Queue::group_limits`]): the defaults of every
/// group, and the groups with limits of their own (which replace the
/// defaults: `Limits::default()` there means no limit for that group).
///
/// ```
/// let g = punctual::GroupLimits::default();
/// assert!(g.default.is_none() && g.groups.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GroupLimits {
    /// The limits of every group without its own.
    pub default: Limits,
    /// Groups with limits of their own, by name.
    pub groups: BTreeMap<String, Limits>,
}

impl GroupLimits {
    /// The limits that apply to `group`.
    ///
    /// ```
    /// let g = punctual::GroupLimits::default();
    /// assert!(g.of("shop-1").is_none());
    /// ```
    pub fn of(&self, group: &str) -> Limits {
        self.groups.get(group).copied().unwrap_or(self.default)
    }
}

/// A group name as the scripts take it: `""` (the jobs without a group) or
/// a valid group.
fn check_group(group: &str) -> Result<()> {
    if group.is_empty() {
        Ok(())
    } else {
        validate_group(group)
    }
}

/// The stored form of one group's limits: `rate;burst;max_running`.
fn own_of(v: &str) -> Limits {
    let mut f = v.splitn(3, ';');
    let (r, b, m) = (f.next(), f.next(), f.next());
    from_fields(
        r.filter(|s| !s.is_empty()),
        b.and_then(|s| s.parse().ok()),
        m.and_then(|s| s.parse().ok()),
    )
}

impl Queue {
    /// The groups of a topic: those with indexed jobs, those held back by
    /// their own limits, and those with running jobs counted, by name; empty
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
        let parts = self.partition_names(topic).await?;
        for p in &parts {
            let base = self.base_of(p);
            let (active, held, running): GroupKeys = self
                .pipe(
                    redis::pipe()
                        .cmd("ZRANGE")
                        .arg(format!("{base}groups"))
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .cmd("ZRANGE")
                        .arg(format!("{base}gwait"))
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .cmd("HGETALL")
                        .arg(format!("{base}grunning")),
                )
                .await?;
            let limits = self.group_limits_of(p).await?;
            let mut seen: Vec<String> = Vec::new();
            for (group, vtime) in active {
                let indexed = self.indexed(&base, &group).await?;
                let e = entry(&mut all, &group);
                e.indexed += indexed;
                e.vtime = e.vtime.min(vtime);
                seen.push(group);
            }
            for (group, at) in held {
                let indexed = self.indexed(&base, &group).await?;
                let e = entry(&mut all, &group);
                e.indexed += indexed;
                let hold = match at.parse::<f64>() {
                    Ok(ms) if ms.is_finite() => GroupHold::Until(ms as u64),
                    _ => GroupHold::RunningEnds,
                };
                e.held = Some(match (e.held, hold) {
                    (Some(GroupHold::Until(a)), GroupHold::Until(b)) => GroupHold::Until(a.min(b)),
                    (Some(GroupHold::Until(a)), GroupHold::RunningEnds) => GroupHold::Until(a),
                    (_, h) => h,
                });
                seen.push(group);
            }
            for (group, n) in running {
                entry(&mut all, &group).running += n;
                seen.push(group);
            }
            seen.sort();
            seen.dedup();
            for group in seen {
                let e = entry(&mut all, &group);
                e.limits = add(e.limits, limits.of(&group));
            }
        }
        Ok(all
            .into_values()
            .map(|mut g| {
                if !g.vtime.is_finite() {
                    g.vtime = 0.0;
                }
                g
            })
            .collect())
    }
}

/// One partition's group limits as stored: the default fields of `meta`
/// (rate, burst, max running) and `glimits`.
type StoredGroupLimits = (
    (Option<String>, Option<u32>, Option<u32>),
    BTreeMap<String, String>,
);

/// One partition's groups: active (with virtual times), held back (with the
/// time they may go on, "inf" for a running job to end), running counts.
type GroupKeys = (
    Vec<(String, f64)>,
    Vec<(String, String)>,
    Vec<(String, u64)>,
);

/// The entry of `group`, added when new (its virtual time infinite until
/// an active partition sets it).
fn entry<'a>(all: &'a mut BTreeMap<String, GroupInfo>, group: &str) -> &'a mut GroupInfo {
    all.entry(group.to_string()).or_insert_with(|| GroupInfo {
        group: group.to_string(),
        vtime: f64::INFINITY,
        ..Default::default()
    })
}

impl Queue {
    /// The key base `P:{T}:` of one partition (or unpartitioned topic).
    fn base_of(&self, physical: &str) -> String {
        let meta = self.keys(physical).meta().to_string();
        meta.strip_suffix("meta").unwrap_or(&meta).to_string()
    }

    /// Entries in one group's index.
    async fn indexed(&self, base: &str, group: &str) -> Result<u64> {
        self.cmd(redis::cmd("ZCARD").arg(format!("{base}g:{group}")))
            .await
    }

    /// Sets the limits of the groups of a topic, enforced by the claim
    /// script for every worker on every host: `group` None sets the
    /// defaults of every group, `Some(g)` gives group `g` limits of its own
    /// (replacing the defaults; `Limits::default()` there: no limit for
    /// `g`; `Some("")` is the jobs without a group). A group at its
    /// `max_running` or out of tokens waits without holding the other groups
    /// back. On a partitioned topic each partition gets the counts divided by
    /// the partitions, rounded up, as [`Queue::set_limits`] does. The first
    /// group limit of a topic counts its running jobs by group once
    /// (O(running)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::Limits;
    /// // Every shop: at most 2 jobs at once, 10 per second.
    /// let every = Limits::default().rate("10/s".parse()?).max_running(2);
    /// queue.set_group_limits("mail", None, &every).await?;
    /// // But shop-1: 5 at once, no rate.
    /// queue.set_group_limits("mail", Some("shop-1"), &Limits::default().max_running(5)).await?;
    /// let limits = queue.group_limits("mail").await?;
    /// assert_eq!(limits.default, every);
    /// assert_eq!(limits.of("shop-1").max_running, Some(5));
    /// assert_eq!(limits.of("shop-2"), every);
    /// # Ok(()) }
    /// ```
    pub async fn set_group_limits(
        &self,
        topic: &str,
        group: Option<&str>,
        limits: &Limits,
    ) -> Result<()> {
        validate_topic(topic)?;
        limits.validate()?;
        if let Some(g) = group {
            check_group(g)?;
        }
        let parts = self.partition_names(topic).await?;
        let share = limits.per_partition(parts.len() as u32);
        let what = if group.is_some() { "group" } else { "default" };
        for p in &parts {
            self.group_limits_script(p, what, group.unwrap_or(""), &share)
                .await?;
        }
        self.register_topic(topic).await
    }

    /// Removes a group's own limits: it has the topic's defaults again.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::Limits;
    /// queue.set_group_limits("mail", Some("shop-1"), &Limits::default().max_running(1)).await?;
    /// queue.clear_group_limits("mail", "shop-1").await?;
    /// assert!(queue.group_limits("mail").await?.groups.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn clear_group_limits(&self, topic: &str, group: &str) -> Result<()> {
        validate_topic(topic)?;
        check_group(group)?;
        for p in &self.partition_names(topic).await? {
            self.group_limits_script(p, "clear", group, &Limits::default())
                .await?;
        }
        Ok(())
    }

    async fn group_limits_script(
        &self,
        physical: &str,
        what: &str,
        group: &str,
        l: &Limits,
    ) -> Result<()> {
        let v = self
            .run(&SCRIPTS.group_limits, physical, |inv| {
                inv.arg(what)
                    .arg(group)
                    .arg(l.rate.map(|r| r.wire()).unwrap_or_default())
                    .arg(l.burst.map(|b| b.to_string()).unwrap_or_default())
                    .arg(l.max_running.map(|m| m.to_string()).unwrap_or_default());
            })
            .await?;
        match v {
            Value::Int(_) => Ok(()),
            other => Err(Error::protocol("group_limits", format!("{other:?}"))),
        }
    }

    /// A topic's group limits as stored: the defaults and the groups with
    /// their own; on a partitioned topic the partitions' shares added up.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// assert_eq!(queue.group_limits("mail").await?, punctual::GroupLimits::default());
    /// # Ok(()) }
    /// ```
    pub async fn group_limits(&self, topic: &str) -> Result<GroupLimits> {
        let mut total = GroupLimits::default();
        for p in self.partition_names(topic).await? {
            let l = self.group_limits_of(&p).await?;
            total.default = add(total.default, l.default);
            for (g, own) in l.groups {
                let e = total.groups.entry(g).or_default();
                *e = add(*e, own);
            }
        }
        Ok(total)
    }

    /// The group limits of one partition (or unpartitioned topic).
    pub(crate) async fn group_limits_of(&self, physical: &str) -> Result<GroupLimits> {
        let base = self.base_of(physical);
        let ((rate, burst, max_running), own): StoredGroupLimits = self
            .pipe(
                redis::pipe()
                    .cmd("HMGET")
                    .arg(self.keys(physical).meta())
                    .arg("group_rate")
                    .arg("group_burst")
                    .arg("group_max_running")
                    .cmd("HGETALL")
                    .arg(format!("{base}glimits")),
            )
            .await?;
        Ok(GroupLimits {
            default: from_fields(rate.as_deref(), burst, max_running),
            groups: own.into_iter().map(|(g, v)| (g, own_of(&v))).collect(),
        })
    }
}
