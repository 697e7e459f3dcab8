//! Topics that hold jobs but are missing from the set of known topics
//! (`P:topics`): a topic is added to it only after the enqueue script took a
//! job, so a producer that stopped in between (or whose `SADD` failed)
//! leaves jobs that `topics`, `stats`, `check` and the dashboard do not
//! show. `punctual check` looks for them with a bounded `SCAN` of every
//! master.

use std::collections::BTreeSet;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::queue::Queue;
use crate::topology::parse_cluster_nodes;

/// What [`Queue::unlisted_topics`] found.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let found = queue.unlisted_topics(100_000).await?;
/// for topic in &found.topics {
///     eprintln!("{topic} holds jobs but is not in the topic set");
/// }
/// if !found.complete {
///     eprintln!("stopped after {} keys: raise the limit", found.scanned);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unlisted {
    /// Topics (the logical names, not their partitions) with jobs under the
    /// prefix that are not in the set of known topics, sorted.
    pub topics: Vec<String>,
    /// Keys examined.
    pub scanned: u64,
    /// False when the scan stopped at the limit before the end.
    pub complete: bool,
}

/// The keys that hold a topic's jobs (its meta, stats and sequence may
/// outlive them); also the cold pool's index `cold` and its buckets
/// `c:<start>` (see [`holds_jobs`]): a bucket whose jobs are all gone still
/// holds their ids, and only a scheduler's tick of the topic drops it,
/// which never comes for a topic missing from the set.
const JOB_KEYS: &[&str] = &["pool", "ready", "running", "dead", "jobs", "cold"];

/// Whether a topic key named `name` (after `P:{T}:`) holds jobs: one of
/// [`JOB_KEYS`], or a cold bucket `c:<start>` (decimal digits).
fn holds_jobs(name: &str) -> bool {
    JOB_KEYS.contains(&name)
        || name
            .strip_prefix("c:")
            .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

impl Queue {
    /// Topics with jobs under this prefix that are missing from the set of
    /// known topics: a `SCAN` of every master for the prefix's topic keys,
    /// examining at most `max_keys` keys (then `complete` is false). Only
    /// reads.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let found = queue.unlisted_topics(10_000).await?;
    /// assert!(found.topics.is_empty() || found.scanned > 0);
    /// # Ok(()) }
    /// ```
    pub async fn unlisted_topics(&self, max_keys: u64) -> Result<Unlisted> {
        let pattern = format!("{}:{{*}}:*", glob_escape(self.prefix()));
        let mut conn = self.conn();
        let nodes: Vec<Option<(String, u16)>> = match &conn {
            Conn::Single(_) => vec![None],
            Conn::Cluster { .. } => masters(&mut conn).await?.into_iter().map(Some).collect(),
        };
        let listed: BTreeSet<String> = self.topics().await?.into_iter().collect();
        let mut found = BTreeSet::new();
        let mut scanned = 0u64;
        let mut complete = true;
        'nodes: for node in nodes {
            let mut cursor = 0u64;
            loop {
                if scanned >= max_keys {
                    complete = false;
                    break 'nodes;
                }
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000);
                let (next, keys): (u64, Vec<Vec<u8>>) = match (&mut conn, &node) {
                    (Conn::Cluster { retrying, .. }, Some((host, port))) => {
                        let v = retrying
                            .route_command(
                                cmd,
                                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                                    host: host.clone(),
                                    port: *port,
                                }),
                            )
                            .await
                            .map_err(Error::Redis)?;
                        redis::from_redis_value(v).map_err(|e| Error::Redis(e.into()))?
                    }
                    (c, _) => cmd.query_async(c).await.map_err(Error::Redis)?,
                };
                scanned += keys.len() as u64;
                for k in keys {
                    if let Some(t) = self.topic_of(&k) {
                        if !listed.contains(&t) {
                            found.insert(t);
                        }
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(Unlisted {
            topics: found.into_iter().collect(),
            scanned,
            complete,
        })
    }

    /// The logical topic of a key `PREFIX:{topic}:name` holding jobs (a
    /// partition `topic#i` gives `topic`); None for any other key.
    fn topic_of(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(self.prefix())?.strip_prefix(":{")?;
        let (topic, name) = rest.rsplit_once("}:")?;
        if !holds_jobs(name) {
            return None;
        }
        let logical = match topic.rsplit_once('#') {
            Some((t, i)) if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => t,
            _ => topic,
        };
        validate_topic(logical).ok()?;
        Some(logical.to_string())
    }
}

/// The masters of the cluster, as host and port.
async fn masters(conn: &mut Conn) -> Result<Vec<(String, u16)>> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(conn)
        .await
        .map_err(Error::Redis)?;
    Ok(parse_cluster_nodes(&text)
        .iter()
        .filter(|n| n.master && !n.failed)
        .filter_map(|n| n.host_port().map(|(h, p)| (h.to_string(), p)))
        .collect())
}

/// `s` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::holds_jobs;

    #[test]
    fn the_cold_pool_holds_jobs() {
        for name in ["pool", "jobs", "cold", "c:1800000000000", "c:0"] {
            assert!(holds_jobs(name), "{name}");
        }
        for name in [
            "meta", "stats", "seq", "c:", "c:12a", "c:-60000", "cold:1", "g:x",
        ] {
            assert!(!holds_jobs(name), "{name}");
        }
    }
}
