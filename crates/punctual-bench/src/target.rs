//! The Redis the bench runs against: the one at `--redis` (one node, or a
//! Redis Cluster given by comma-separated seeds or by one of its nodes), or
//! a private `redis-server` when none answers at the default address. Also:
//! the check that it holds nobody else's keys, deleting the bench's own
//! keys, and reading `INFO`, on every master of a cluster.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use punctual::internal::nodes::{KeyedConn, Node, Nodes};
use punctual::internal::{redact, TopicKeys};
use punctual::Queue;

/// Every key the bench writes starts with `PREFIX:`.
pub(crate) const PREFIX: &str = "punctual-bench";
/// The one topic of the bench.
pub(crate) const TOPIC: &str = "bench";

/// The keys of one partition (or of the unpartitioned topic), e.g.
/// `keys_of("bench#2").pool()`.
pub(crate) fn keys_of(physical: &str) -> TopicKeys {
    TopicKeys::new(PREFIX, physical)
}

/// One master (the only node of a single Redis).
#[derive(Debug)]
pub(crate) struct Master {
    /// Its own connection: INFO, SCAN and DEL are per node.
    pub node: Node,
    /// The server's process id, when it runs on this host (for its
    /// scheduler statistics in /proc).
    pub pid: Option<u32>,
}

impl Master {
    /// host:port.
    pub(crate) fn addr(&self) -> &str {
        self.node.addr()
    }
}

/// The Redis in use and admin connections to it (INFO, SCAN, DEL, polls),
/// separate from the connections of producers and consumers.
pub(crate) struct Target {
    /// As given: one URL, or a cluster's comma-separated seeds.
    pub url: String,
    /// Every node, and the connection for commands on the bench's keys.
    pub nodes: Nodes,
    /// Every master (one node for a single Redis), with its process id.
    pub masters: Vec<Master>,
    /// Reads the bench topic's sizes and counters (`Queue::stats`).
    pub queue: Queue,
    pub cluster: bool,
    pub version: String,
    /// The physical names of the bench topic: `[TOPIC]`, or its partitions.
    pub parts: Vec<String>,
    /// Set when the bench started the server itself.
    pub private: Option<punctual_redis_server::PrivateRedis>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &redact(&self.url))
            .field("version", &self.version)
            .field("cluster", &self.cluster)
            .field(
                "masters",
                &self.masters.iter().map(Master::addr).collect::<Vec<_>>(),
            )
            .field("parts", &self.parts)
            .field("private", &self.private.is_some())
            .finish()
    }
}

async fn connect(url: &str, timeout: Duration) -> Result<Node> {
    Node::connect(url, timeout)
        .await
        .with_context(|| format!("cannot reach Redis at {}", redact(url)))
}

/// Opens the Redis at `url`; when `url` was not given explicitly and
/// nothing answers there, starts a private redis-server (persistence off).
/// Several comma-separated URLs are the seeds of a cluster; one URL is a
/// cluster too when that node says so. `partitions`: of the bench topic.
pub(crate) async fn open(url: &str, explicit: bool, partitions: u32) -> Result<Target> {
    let seeds: Vec<&str> = punctual::internal::split_seeds(url);
    if seeds.is_empty() {
        bail!("empty Redis URL");
    }
    let (first, private) = if seeds.len() > 1 {
        let mut last = None;
        let mut found = None;
        for s in &seeds {
            match connect(s, Duration::from_secs(2)).await {
                Ok(c) => {
                    found = Some((s.to_string(), c));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        match found {
            Some(f) => (f, None),
            None => return Err(last.expect("at least one seed")),
        }
    } else {
        match connect(seeds[0], Duration::from_millis(700)).await {
            Ok(conn) => ((seeds[0].to_string(), conn), None),
            Err(e) if explicit => return Err(e),
            Err(_) => {
                let (url, private) = punctual_redis_server::start("punctual-bench-redis-")?;
                let conn = connect(&url, Duration::from_secs(2)).await?;
                ((url, conn), Some(private))
            }
        }
    };
    let (first_url, first_node) = first;
    let server = first_node.info(&["server", "cluster"]).await?;
    let version = server
        .get("redis_version")
        .cloned()
        .unwrap_or_else(|| "unknown".into());
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if major < 7 {
        bail!(
            "the Redis at {} is version {version}: punctual needs 7.0 or newer",
            redact(&first_url)
        );
    }
    let cluster = server.get("cluster_enabled").map(String::as_str) == Some("1");
    if seeds.len() > 1 && !cluster {
        bail!(
            "several Redis URLs name the seeds of a cluster, but {} is not a cluster node",
            redact(&first_url)
        );
    }
    let parts: Vec<String> = (0..partitions)
        .map(|i| punctual::internal::partition_name(TOPIC, i, partitions))
        .collect();
    let url = if private.is_some() {
        first_url
    } else {
        url.to_string()
    };
    let timeout = Duration::from_secs(2);
    let nodes = Nodes::connect(&url, timeout, Duration::from_secs(30))
        .await
        .with_context(|| format!("cannot reach the Redis at {}", redact(&url)))?;
    let mut masters = Vec::new();
    for node in nodes.masters() {
        let server = node.info(&["server"]).await?;
        let pid = server
            .get("process_id")
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|pid| is_local(node.url()) && is_redis_process(*pid));
        masters.push(Master {
            node: node.clone(),
            pid,
        });
    }
    let queue = Queue::builder(url.as_str())
        .prefix(PREFIX)
        .connect_timeout(Duration::from_secs(30))
        .response_timeout(Duration::from_secs(30))
        .connect()
        .await?;
    Ok(Target {
        url,
        cluster: nodes.is_cluster(),
        nodes,
        masters,
        queue,
        version,
        parts,
        private,
    })
}

/// Whether `url` names a server on this host.
fn is_local(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
            matches!(host.as_str(), "127.0.0.1" | "localhost" | "::1" | "[::1]")
        }
        redis::ConnectionAddr::Unix(_) => true,
        _ => false,
    }
}

/// Whether process `pid` of this host is a redis-server.
fn is_redis_process(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.contains("redis"))
}

impl Target {
    /// A clone of the connection for commands on the bench's keys (routed
    /// by key on a cluster).
    pub(crate) fn conn(&self) -> KeyedConn {
        self.nodes.keyed()
    }

    /// The bench topic's key named by `key` (one per partition), e.g.
    /// `keys(TopicKeys::pool)`.
    pub(crate) fn keys(&self, key: fn(&TopicKeys) -> &str) -> Vec<String> {
        self.parts
            .iter()
            .map(|p| key(&keys_of(p)).to_string())
            .collect()
    }

    /// Describes keys that are not the bench's, if the Redis holds any:
    /// keys in another database, or keys outside `PREFIX:` in ours. Every
    /// master of a cluster is checked.
    pub(crate) async fn foreign_keys(&self) -> Result<Option<String>> {
        let db = if self.cluster {
            0
        } else {
            redis::Client::open(self.url.as_str())?
                .get_connection_info()
                .redis_settings()
                .db()
        };
        for m in &self.masters {
            let on = if self.cluster {
                format!(" on master {}", m.addr())
            } else {
                String::new()
            };
            let keyspace = m.node.info(&["keyspace"]).await?;
            let mut ours = 0u64;
            for (name, value) in &keyspace {
                let Some(n) = name.strip_prefix("db").and_then(|n| n.parse::<i64>().ok()) else {
                    continue;
                };
                let keys: u64 = value
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("keys="))
                    .and_then(|k| k.parse().ok())
                    .unwrap_or(0);
                if n != db && keys > 0 {
                    return Ok(Some(format!("database {n} holds {keys} keys{on}")));
                }
                if n == db {
                    ours = keys;
                }
            }
            if ours == 0 {
                continue;
            }
            let mut foreign = None;
            m.node
                .scan(None, |keys| {
                    foreign = keys
                        .into_iter()
                        .find(|k| !k.starts_with(&format!("{PREFIX}:")));
                    foreign.is_none()
                })
                .await?;
            if let Some(k) = foreign {
                return Ok(Some(format!(
                    "database {db} holds {ours} keys{on}, e.g. {k:?}"
                )));
            }
        }
        Ok(None)
    }

    /// Deletes every key under `PREFIX:` (and only those), on every master.
    /// The topic's pool and records go first with `UNLINK`: after a run
    /// with millions of jobs (--pool), a `DEL` of them would hold Redis for
    /// seconds, and the next connections time out; `UNLINK` frees them in
    /// Redis's background thread.
    pub(crate) async fn clean(&self) -> Result<()> {
        for key in [TopicKeys::pool, TopicKeys::jobs] {
            for k in self.keys(key) {
                self.query::<u64>(redis::cmd("UNLINK").arg(k)).await?;
            }
        }
        self.nodes.delete_matching(&format!("{PREFIX}:*")).await?;
        Ok(())
    }

    /// Runs one command on the admin connection (routed by its key on a
    /// cluster).
    pub(crate) async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn();
        Ok(cmd.query_async(&mut conn).await?)
    }

    /// Jobs with a record in the bench topic (0 once every ack landed).
    pub(crate) async fn records(&self) -> Result<u64> {
        let mut total = 0;
        for k in self.keys(TopicKeys::jobs) {
            total += self.query::<u64>(redis::cmd("HLEN").arg(k)).await?;
        }
        Ok(total)
    }

    /// The bench topic's stats (sizes and counters summed over partitions).
    pub(crate) async fn stats(&self) -> Result<punctual::TopicStats> {
        Ok(self.queue.stats(TOPIC).await?)
    }

    /// Sizes of pool, ready, running and dead (summed over partitions).
    pub(crate) async fn sets(&self) -> Result<[u64; 4]> {
        let s = self.stats().await?;
        Ok([s.pool, s.ready, s.running, s.dead])
    }

    /// Redis's clock, epoch ms.
    pub(crate) async fn now_ms(&self) -> Result<i64> {
        let mut conn = self.masters[0].node.conn();
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        Ok(s * 1000 + us / 1000)
    }

    /// Subscribers of a channel (PUBSUB NUMSUB), on every node: on a
    /// cluster, a listener subscribes on any one node.
    pub(crate) async fn subscribers(&self, channel: &str) -> Result<u64> {
        let mut total = 0;
        for node in self.nodes.all() {
            let mut conn = node.conn();
            let v: (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await?;
            total += v.1;
        }
        Ok(total)
    }

    /// On a cluster: the master serving each partition (physical name ->
    /// host:port); empty for a single Redis.
    pub(crate) async fn placement(&self) -> Result<Vec<(String, String)>> {
        if !self.cluster {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for p in &self.parts {
            let mut conn = self.masters[0].node.conn();
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(keys_of(p).pool())
                .query_async(&mut conn)
                .await?;
            let owner = self
                .nodes
                .master_of_slot(slot)
                .map_or_else(|| "?".to_string(), |m| m.addr().to_string());
            out.push((p.clone(), owner));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_topic_hash_tag() {
        assert_eq!(keys_of(TOPIC).pool(), "punctual-bench:{bench}:pool");
        assert_eq!(keys_of("bench#2").jobs(), "punctual-bench:{bench#2}:jobs");
    }
}
