//! The Redis the bench runs against: the one at `--redis` (one node, or a
//! Redis Cluster given by comma-separated seeds or by one of its nodes), or
//! a private `redis-server` when none answers at the default address. Also:
//! the check that it holds nobody else's keys, deleting the bench's own
//! keys, and reading `INFO`, on every master of a cluster.

use std::collections::HashMap;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use punctual::redact;

/// Every key the bench writes starts with `PREFIX:`.
pub const PREFIX: &str = "punctual-bench";
/// The one topic of the bench.
pub const TOPIC: &str = "bench";

/// A key of the bench's topic, e.g. `key("pool")`.
#[cfg(test)]
pub fn key(part: &str) -> String {
    key_of(TOPIC, part)
}

/// A key of one partition (or of the unpartitioned topic), e.g.
/// `key_of("bench#2", "pool")`.
pub fn key_of(physical: &str, part: &str) -> String {
    format!("{PREFIX}:{{{physical}}}:{part}")
}

/// The connection for commands on keys: the node itself, or a slot-aware
/// cluster connection.
#[derive(Clone)]
pub enum AdminConn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for AdminConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            AdminConn::Single(c) => c.req_packed_command(cmd),
            AdminConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            AdminConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            AdminConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            AdminConn::Single(c) => c.get_db(),
            AdminConn::Cluster(c) => c.get_db(),
        }
    }
}

/// One master (the only node of a single Redis), with a plain connection of
/// its own: INFO, SCAN and DEL are per node.
pub struct Node {
    /// host:port.
    pub addr: String,
    pub conn: MultiplexedConnection,
    /// The server's process id, when it runs on this host (for its
    /// scheduler statistics in /proc).
    pub pid: Option<u32>,
    /// The slot ranges it serves (empty for a single Redis).
    pub slots: Vec<(u16, u16)>,
}

/// The Redis in use and admin connections to it (INFO, SCAN, DEL, polls),
/// separate from the connections of producers and consumers.
pub struct Target {
    /// As given: one URL, or a cluster's comma-separated seeds.
    pub url: String,
    /// For commands on the bench's keys.
    pub conn: AdminConn,
    /// Every master (one node for a single Redis).
    pub masters: Vec<Node>,
    /// The other nodes of a cluster (replicas): a wake-up listener may
    /// subscribe there.
    pub replicas: Vec<MultiplexedConnection>,
    pub cluster: bool,
    pub version: String,
    /// The physical names of the bench topic: `[TOPIC]`, or its partitions.
    pub parts: Vec<String>,
    /// Set when the bench started the server itself.
    pub private: Option<crate::private_redis::PrivateRedis>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &redact(&self.url))
            .field("version", &self.version)
            .field("cluster", &self.cluster)
            .field(
                "masters",
                &self.masters.iter().map(|m| &m.addr).collect::<Vec<_>>(),
            )
            .field("parts", &self.parts)
            .field("private", &self.private.is_some())
            .finish()
    }
}

async fn connect(url: &str, timeout: Duration) -> Result<MultiplexedConnection> {
    let client =
        redis::Client::open(url).with_context(|| format!("invalid Redis URL {:?}", redact(url)))?;
    let conn = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {timeout:?}"))
        .and_then(|r| r.map_err(anyhow::Error::from))
        .with_context(|| format!("cannot reach Redis at {}", redact(url)))?;
    let mut c = conn.clone();
    let _: String = redis::cmd("PING")
        .query_async(&mut c)
        .await
        .with_context(|| format!("cannot reach Redis at {}", redact(url)))?;
    Ok(conn)
}

/// Opens the Redis at `url`; when `url` was not given explicitly and
/// nothing answers there, starts a private redis-server (persistence off).
/// Several comma-separated URLs are the seeds of a cluster; one URL is a
/// cluster too when that node says so. `partitions`: of the bench topic.
pub async fn open(url: &str, explicit: bool, partitions: u32) -> Result<Target> {
    let seeds: Vec<&str> = punctual::split_seeds(url);
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
                let (url, private) = crate::private_redis::start("punctual-bench-redis-")?;
                let conn = connect(&url, Duration::from_secs(2)).await?;
                ((url, conn), Some(private))
            }
        }
    };
    let (first_url, first_conn) = first;
    let server = info(&first_conn, &["server", "cluster"]).await?;
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
        .map(|i| punctual::partition_name(TOPIC, i, partitions))
        .collect();
    if !cluster {
        let pid = server
            .get("process_id")
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|pid| is_local(&first_url) && is_redis_process(*pid));
        let addr = host_port(&first_url).unwrap_or_else(|| first_url.clone());
        let url = if private.is_some() {
            first_url
        } else {
            url.to_string()
        };
        return Ok(Target {
            url,
            conn: AdminConn::Single(first_conn.clone()),
            masters: vec![Node {
                addr,
                conn: first_conn,
                pid,
                slots: Vec::new(),
            }],
            replicas: Vec::new(),
            cluster: false,
            version,
            parts,
            private,
        });
    }

    // A cluster: a plain connection to every node, and a slot-aware one.
    let mut c = first_conn.clone();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut c)
        .await
        .context("CLUSTER NODES")?;
    let mut masters = Vec::new();
    let mut replicas = Vec::new();
    for n in parse_nodes(&nodes) {
        if n.failed {
            continue;
        }
        let node_url = with_hostport(&first_url, &n.addr)
            .with_context(|| format!("cannot make a URL for node {}", n.addr))?;
        let conn = connect(&node_url, Duration::from_secs(2)).await?;
        if n.master && !n.slots.is_empty() {
            let server = info(&conn, &["server"]).await?;
            let pid = server
                .get("process_id")
                .and_then(|p| p.parse::<u32>().ok())
                .filter(|pid| is_local(&node_url) && is_redis_process(*pid));
            masters.push(Node {
                addr: n.addr,
                conn,
                pid,
                slots: n.slots,
            });
        } else {
            replicas.push(conn);
        }
    }
    if masters.is_empty() {
        bail!(
            "the cluster at {} has no master serving slots",
            redact(&first_url)
        );
    }
    masters.sort_by(|a, b| a.addr.cmp(&b.addr));
    let client = ClusterClientBuilder::new(seeds.clone())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(30))
        .build()
        .context("invalid cluster URLs")?;
    let conn = client
        .get_async_connection()
        .await
        .with_context(|| format!("cannot reach the cluster at {}", redact(url)))?;
    Ok(Target {
        url: url.to_string(),
        conn: AdminConn::Cluster(conn),
        masters,
        replicas,
        cluster: true,
        version,
        parts,
        private,
    })
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, PartialEq)]
struct NodeLine {
    addr: String,
    master: bool,
    failed: bool,
    slots: Vec<(u16, u16)>,
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            // ip:port@cport[,hostname]
            let addr = f[1].split(['@', ',']).next()?.to_string();
            let flags: Vec<&str> = f[2].split(',').collect();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|x| (x, x)),
                })
                .collect();
            Some(NodeLine {
                addr,
                master: flags.contains(&"master"),
                failed: flags
                    .iter()
                    .any(|x| matches!(*x, "fail" | "fail?" | "noaddr" | "handshake")),
                slots,
            })
        })
        .collect()
}

/// `url` with its host:port replaced (scheme, credentials and db kept).
fn with_hostport(url: &str, hostport: &str) -> Option<String> {
    let start = url.find("://")? + 3;
    let auth_end = url[start..]
        .rfind('@')
        .map(|i| start + i + 1)
        .unwrap_or(start);
    let rest = &url[auth_end..];
    let end = rest.find('/').map(|i| auth_end + i).unwrap_or(url.len());
    Some(format!("{}{hostport}{}", &url[..auth_end], &url[end..]))
}

/// The host:port of a URL.
fn host_port(url: &str) -> Option<String> {
    let client = redis::Client::open(url).ok()?;
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => Some(format!("{host}:{port}")),
        redis::ConnectionAddr::Unix(p) => Some(p.display().to_string()),
        _ => None,
    }
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
    /// A clone of the admin connection for keys.
    pub fn conn(&self) -> AdminConn {
        self.conn.clone()
    }

    /// The bench topic's keys named `part` (one per partition).
    pub fn keys(&self, part: &str) -> Vec<String> {
        self.parts.iter().map(|p| key_of(p, part)).collect()
    }

    /// Describes keys that are not the bench's, if the Redis holds any:
    /// keys in another database, or keys outside `PREFIX:` in ours. Every
    /// master of a cluster is checked.
    pub async fn foreign_keys(&self) -> Result<Option<String>> {
        let db = if self.cluster {
            0
        } else {
            redis::Client::open(self.url.as_str())?
                .get_connection_info()
                .redis_settings()
                .db()
        };
        for node in &self.masters {
            let on = if self.cluster {
                format!(" on master {}", node.addr)
            } else {
                String::new()
            };
            let keyspace = info(&node.conn, &["keyspace"]).await?;
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
            let mut conn = node.conn.clone();
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await?;
                if let Some(k) = keys.iter().find(|k| !k.starts_with(&format!("{PREFIX}:"))) {
                    return Ok(Some(format!(
                        "database {db} holds {ours} keys{on}, e.g. {k:?}"
                    )));
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(None)
    }

    /// Deletes every key under `PREFIX:` (and only those), on every master.
    pub async fn clean(&self) -> Result<()> {
        for node in &self.masters {
            let mut conn = node.conn.clone();
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{PREFIX}:*"))
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await?;
                if !keys.is_empty() {
                    if self.cluster {
                        // Keys of different slots cannot share a DEL.
                        let mut pipe = redis::pipe();
                        for k in &keys {
                            pipe.cmd("DEL").arg(k).ignore();
                        }
                        pipe.query_async::<()>(&mut conn).await?;
                    } else {
                        redis::cmd("DEL")
                            .arg(&keys)
                            .query_async::<()>(&mut conn)
                            .await?;
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Runs one command on the admin connection (routed by its key on a
    /// cluster).
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn();
        Ok(cmd.query_async(&mut conn).await?)
    }

    /// Jobs with a record in the bench topic (0 once every ack landed).
    pub async fn records(&self) -> Result<u64> {
        let mut total = 0;
        for k in self.keys("jobs") {
            total += self.query::<u64>(redis::cmd("HLEN").arg(k)).await?;
        }
        Ok(total)
    }

    /// Sizes of pool, ready, running and dead (summed over partitions).
    pub async fn sets(&self) -> Result<[u64; 4]> {
        let mut out = [0u64; 4];
        for p in &self.parts {
            let mut pipe = redis::pipe();
            for part in ["pool", "ready", "running", "dead"] {
                pipe.cmd("ZCARD").arg(key_of(p, part));
            }
            let mut conn = self.conn();
            let v: Vec<u64> = pipe.query_async(&mut conn).await?;
            for (o, x) in out.iter_mut().zip(v) {
                *o += x;
            }
        }
        Ok(out)
    }

    /// The topic's counters (enqueued, claimed, done, retried, dead, ...),
    /// summed over partitions.
    pub async fn counters(&self) -> Result<HashMap<String, u64>> {
        let mut out: HashMap<String, u64> = HashMap::new();
        for k in self.keys("stats") {
            let c: HashMap<String, u64> = self.query(redis::cmd("HGETALL").arg(k)).await?;
            for (name, v) in c {
                *out.entry(name).or_default() += v;
            }
        }
        Ok(out)
    }

    /// Redis's clock, epoch ms.
    pub async fn now_ms(&self) -> Result<i64> {
        let mut conn = self.masters[0].conn.clone();
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        Ok(s * 1000 + us / 1000)
    }

    /// Subscribers of a channel (PUBSUB NUMSUB), on every node: on a
    /// cluster, a listener subscribes on any one node.
    pub async fn subscribers(&self, channel: &str) -> Result<u64> {
        let mut total = 0;
        for conn in self.masters.iter().map(|m| &m.conn).chain(&self.replicas) {
            let mut conn = conn.clone();
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
    pub async fn placement(&self) -> Result<Vec<(String, String)>> {
        if !self.cluster {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for p in &self.parts {
            let mut conn = self.masters[0].conn.clone();
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key_of(p, "pool"))
                .query_async(&mut conn)
                .await?;
            let owner = self
                .masters
                .iter()
                .find(|m| m.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
                .map_or_else(|| "?".to_string(), |m| m.addr.clone());
            out.push((p.clone(), owner));
        }
        Ok(out)
    }
}

/// `INFO` of some sections, as field -> value.
pub async fn info(
    conn: &MultiplexedConnection,
    sections: &[&str],
) -> Result<HashMap<String, String>> {
    let mut c = conn.clone();
    let text: String = redis::cmd("INFO").arg(sections).query_async(&mut c).await?;
    Ok(parse_info(&text))
}

fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_lines_become_fields() {
        let m = parse_info(
            "# Stats\r\ntotal_commands_processed:42\r\ncmdstat_evalsha:calls=3,usec=9\r\n",
        );
        assert_eq!(m["total_commands_processed"], "42");
        assert_eq!(m["cmdstat_evalsha"], "calls=3,usec=9");
    }

    #[test]
    fn keys_carry_the_topic_hash_tag() {
        assert_eq!(key("pool"), "punctual-bench:{bench}:pool");
        assert_eq!(key_of("bench#2", "jobs"), "punctual-bench:{bench#2}:jobs");
    }

    #[test]
    fn cluster_nodes_give_masters_and_their_slots() {
        let text = "\
07c3 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460
67ed 127.0.0.1:7102@17102,host2 master - 0 1 2 connected 5461-10922 12000 [12001->-abc]
2920 127.0.0.1:7104@17104 slave 67ed 0 1 2 connected
9d2a 127.0.0.1:7103@17103 master,fail - 0 1 3 disconnected 10923-16383
";
        let n = parse_nodes(text);
        assert_eq!(n.len(), 4);
        assert_eq!(
            n[0],
            NodeLine {
                addr: "127.0.0.1:7101".into(),
                master: true,
                failed: false,
                slots: vec![(0, 5460)]
            }
        );
        assert_eq!(n[1].addr, "127.0.0.1:7102");
        assert_eq!(n[1].slots, vec![(5461, 10922), (12000, 12000)]);
        assert!(!n[2].master && n[2].slots.is_empty());
        assert!(n[3].failed);
        assert_eq!(
            with_hostport("redis://u:p@10.0.0.1:7000/0", "10.0.0.2:7001").as_deref(),
            Some("redis://u:p@10.0.0.2:7001/0")
        );
    }
}
