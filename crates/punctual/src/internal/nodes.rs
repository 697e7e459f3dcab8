//! The nodes behind a Redis URL, for per-node admin work: `INFO`, `SCAN`,
//! `DEL`, `PUBSUB NUMSUB`. A single Redis is one node; a Redis Cluster is
//! its masters (each serving slots) and its other nodes. Also the parsing
//! of `INFO` and `CLUSTER NODES` replies, once for every user (the
//! connection, the unlisted-topics scan, `doctor`, `demo`, the bench).
//!
//! Jobs are read and changed through [`crate::Queue`]; this module is for
//! tools that look at the servers themselves.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> punctual::Result<()> {
//! # let redis = punctual_testkit::RedisServer::start();
//! # let url = redis.url();
//! use std::time::Duration;
//! use punctual::internal::nodes::Nodes;
//! let t = Duration::from_secs(2);
//! let nodes = Nodes::connect(&url, t, t).await?; // one URL, or a cluster's seeds
//! let mut keys = 0;
//! for node in nodes.masters() {
//!     let keyspace = node.info(&["keyspace"]).await?;
//!     node.scan(Some("punctual:*"), |page| {
//!         keys += page.len();
//!         true
//!     })
//!     .await?;
//!     println!("{}: {keyspace:?}", node.addr());
//! }
//! assert_eq!(keys, 0);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::redact::redact;
pub use crate::topology::{node_url, parse_cluster_nodes, parse_info, ClusterNode};

/// One node with a plain connection of its own (commands go to it and
/// nowhere else).
///
/// ```no_run
/// # async fn f() -> punctual::Result<()> {
/// let node = punctual::internal::nodes::Node::connect("redis://127.0.0.1:6379", std::time::Duration::from_secs(2)).await?;
/// let keyspace = node.info(&["keyspace"]).await?;
/// let mut conn = node.conn();
/// let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
/// println!("{} ({:?}): {pong}, {keyspace:?}", node.addr(), node.slots());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Node {
    addr: String,
    url: String,
    conn: MultiplexedConnection,
    slots: Vec<(u16, u16)>,
    cluster: bool,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("addr", &self.addr)
            .field("slots", &self.slots)
            .finish()
    }
}

/// The host:port (or socket path) a URL names; the URL itself when it does
/// not parse.
fn addr_of(url: &str) -> String {
    let Ok(client) = redis::Client::open(url) else {
        return url.to_string();
    };
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        redis::ConnectionAddr::Unix(p) => p.display().to_string(),
        _ => url.to_string(),
    }
}

impl Node {
    /// Connects to the one node at `url` (no cluster discovery) and checks
    /// that it answers `PING` within `timeout`.
    ///
    /// ```no_run
    /// # async fn f() -> punctual::Result<()> {
    /// let node = punctual::internal::nodes::Node::connect("redis://127.0.0.1:6379", std::time::Duration::from_secs(2)).await?;
    /// let info = node.info(&["server"]).await?;
    /// println!("{} runs Redis {}", node.addr(), info["redis_version"]);
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str, timeout: Duration) -> Result<Node> {
        Self::open(url, timeout, Vec::new(), false).await
    }

    async fn open(
        url: &str,
        timeout: Duration,
        slots: Vec<(u16, u16)>,
        cluster: bool,
    ) -> Result<Node> {
        let client = redis::Client::open(url)
            .map_err(|e| Error::invalid(format!("invalid Redis URL {:?}: {e}", redact(url))))?;
        let timed_out = || {
            Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {timeout:?}"),
            )))
        };
        let mut conn = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
            .await
            .map_err(|_| timed_out())?
            .map_err(Error::Redis)?;
        tokio::time::timeout(timeout, redis::cmd("PING").query_async::<String>(&mut conn))
            .await
            .map_err(|_| timed_out())?
            .map_err(Error::Redis)?;
        Ok(Node {
            addr: addr_of(url),
            url: url.to_string(),
            conn,
            slots,
            cluster,
        })
    }

    /// `host:port` (or the socket path).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let node = punctual::internal::nodes::Node::connect(&redis.url(), std::time::Duration::from_secs(2)).await?;
    /// assert_eq!(node.addr(), format!("127.0.0.1:{}", redis.port()));
    /// # Ok(()) }
    /// ```
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Its URL (with credentials: pass it through [`crate::internal::redact`] before
    /// showing it).
    ///
    /// ```no_run
    /// # async fn demo() -> punctual::Result<()> {
    /// use std::time::Duration;
    /// let url = "redis://app:s3cret@10.0.0.5:6379";
    /// let node = punctual::internal::nodes::Node::connect(url, Duration::from_secs(2)).await?;
    /// assert_eq!(node.url(), url);
    /// println!("connected to {}", punctual::internal::redact(node.url())); // no password shown
    /// # Ok(()) }
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The slot ranges it serves (empty for a single Redis and a replica).
    ///
    /// ```no_run
    /// # async fn demo(nodes: punctual::internal::nodes::Nodes) {
    /// for m in nodes.masters() {
    ///     let n: u32 = m.slots().iter().map(|&(a, b)| u32::from(b - a) + 1).sum();
    ///     println!("{} serves {n} slots", m.addr());
    /// }
    /// # }
    /// ```
    pub fn slots(&self) -> &[(u16, u16)] {
        &self.slots
    }

    /// A clone of its connection, for commands of the caller's own.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let node = punctual::internal::nodes::Node::connect(&redis.url(), std::time::Duration::from_secs(2)).await?;
    /// let mut conn = node.conn();
    /// let size: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    /// assert_eq!(size, 0);
    /// assert!(node.slots().is_empty()); // a single Redis
    /// # Ok(()) }
    /// ```
    pub fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    /// `INFO` of some sections, as field -> value (see [`parse_info`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let node = punctual::internal::nodes::Node::connect(&redis.url(), std::time::Duration::from_secs(2)).await?;
    /// let info = node.info(&["server", "memory"]).await?;
    /// assert_eq!(info["tcp_port"], redis.port().to_string());
    /// let used: u64 = info["used_memory"].parse().unwrap();
    /// assert!(used > 0);
    /// # Ok(()) }
    /// ```
    pub async fn info(&self, sections: &[&str]) -> Result<HashMap<String, String>> {
        let mut c = self.conn.clone();
        let text: String = redis::cmd("INFO")
            .arg(sections)
            .query_async(&mut c)
            .await
            .map_err(Error::Redis)?;
        Ok(parse_info(&text))
    }

    /// One `SCAN` page from `cursor`: the next cursor (0: done) and keys.
    async fn scan_page(&self, cursor: u64, pattern: Option<&str>) -> Result<(u64, Vec<String>)> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor);
        if let Some(p) = pattern {
            cmd.arg("MATCH").arg(p);
        }
        cmd.arg("COUNT").arg(1000);
        cmd.query_async(&mut self.conn.clone())
            .await
            .map_err(Error::Redis)
    }

    /// Every key of this node matching the `SCAN MATCH` pattern, passed to
    /// `each` one `SCAN` page at a time; stops early when `each` returns
    /// false. Only reads.
    ///
    /// ```no_run
    /// # async fn f(node: punctual::internal::nodes::Node) -> punctual::Result<()> {
    /// let mut n = 0;
    /// node.scan(Some("punctual:*"), |keys| {
    ///     n += keys.len();
    ///     true
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn scan(
        &self,
        pattern: Option<&str>,
        mut each: impl FnMut(Vec<String>) -> bool,
    ) -> Result<()> {
        let mut cursor = 0;
        loop {
            let (next, keys) = self.scan_page(cursor, pattern).await?;
            if !each(keys) || next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Deletes every key of this node matching the `SCAN MATCH` pattern;
    /// returns how many it deleted.
    ///
    /// ```no_run
    /// # async fn f(node: punctual::internal::nodes::Node) -> punctual::Result<()> {
    /// let gone = node.delete_matching("scratch:*").await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_matching(&self, pattern: &str) -> Result<u64> {
        let mut conn = self.conn.clone();
        let mut cursor = 0;
        let mut deleted = 0;
        loop {
            let (next, keys) = self.scan_page(cursor, Some(pattern)).await?;
            if !keys.is_empty() {
                if self.cluster {
                    // Keys of different slots cannot share a DEL.
                    let mut pipe = redis::pipe();
                    for k in &keys {
                        pipe.cmd("DEL").arg(k);
                    }
                    let n: Vec<u64> = pipe.query_async(&mut conn).await.map_err(Error::Redis)?;
                    deleted += n.iter().sum::<u64>();
                } else {
                    let n: u64 = redis::cmd("DEL")
                        .arg(&keys)
                        .query_async(&mut conn)
                        .await
                        .map_err(Error::Redis)?;
                    deleted += n;
                }
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }
}

/// A connection for commands on keys: routed by key on a cluster (following
/// redirections), the node itself otherwise. The same connection
/// [`crate::Queue`] uses; cheap to clone.
///
/// ```no_run
/// # async fn f(nodes: punctual::internal::nodes::Nodes) -> punctual::Result<()> {
/// let keys = punctual::internal::TopicKeys::new("punctual", "orders");
/// let mut conn = nodes.keyed();
/// let records: u64 = redis::cmd("HLEN").arg(keys.jobs()).query_async(&mut conn).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KeyedConn(Conn);

impl std::fmt::Debug for KeyedConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyedConn")
    }
}

impl ConnectionLike for KeyedConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// Every node behind a URL (one URL, or a cluster's comma-separated seeds,
/// as [`crate::Queue::connect`] takes it), each with a plain connection,
/// and a [`KeyedConn`] for commands on keys.
///
/// ```no_run
/// # async fn f() -> punctual::Result<()> {
/// use std::time::Duration;
/// let t = Duration::from_secs(2);
/// let nodes = punctual::internal::nodes::Nodes::connect("redis://127.0.0.1:7000", t, t).await?;
/// if nodes.is_cluster() {
///     let slot = 1234;
///     println!("slot {slot} is on {:?}", nodes.master_of_slot(slot).map(|m| m.addr()));
/// }
/// for node in nodes.all() {
///     println!("{}: redis {}", node.addr(), node.info(&["server"]).await?["redis_version"]);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Nodes {
    keyed: KeyedConn,
    masters: Vec<Node>,
    replicas: Vec<Node>,
    cluster: bool,
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes")
            .field("cluster", &self.cluster)
            .field("masters", &self.masters)
            .field("replicas", &self.replicas.len())
            .finish()
    }
}

impl Nodes {
    /// Connects to every node: a single Redis, or every master serving slots
    /// and every other node (not failed) of a cluster, masters sorted by
    /// address. `timeout`: to connect to each node; `response_timeout`: of
    /// the keyed connection.
    ///
    /// ```no_run
    /// # async fn f() -> punctual::Result<()> {
    /// use std::time::Duration;
    /// let nodes = punctual::internal::nodes::Nodes::connect(
    ///     "redis://127.0.0.1:7000,redis://127.0.0.1:7001",
    ///     Duration::from_secs(2),
    ///     Duration::from_secs(30),
    /// )
    /// .await?;
    /// for m in nodes.masters() {
    ///     println!("{}: {:?}", m.addr(), m.slots());
    /// }
    /// nodes.delete_matching("scratch:*").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(
        url: &str,
        timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Nodes> {
        let connected =
            crate::conn::connect(url, timeout, response_timeout, crate::ops::must_not_repeat)
                .await?;
        let seeds = crate::redact::split_seeds(url);
        if !connected.cluster {
            let node = Node::open(seeds[0], timeout, Vec::new(), false).await?;
            return Ok(Nodes {
                keyed: KeyedConn(connected.conn),
                masters: vec![node],
                replicas: Vec::new(),
                cluster: false,
            });
        }
        let mut masters = Vec::new();
        let mut replicas = Vec::new();
        for n in connected.nodes {
            if n.failed {
                continue;
            }
            let node_url = node_url(seeds[0], &n.addr)
                .ok_or_else(|| Error::invalid(format!("cannot make a URL for node {}", n.addr)))?;
            let master = n.master && !n.slots.is_empty();
            let node = Node::open(&node_url, timeout, n.slots, true).await?;
            if master {
                masters.push(node);
            } else {
                replicas.push(node);
            }
        }
        if masters.is_empty() {
            return Err(Error::invalid(format!(
                "the cluster at {} has no master serving slots",
                redact(url)
            )));
        }
        masters.sort_by(|a, b| a.addr.cmp(&b.addr));
        Ok(Nodes {
            keyed: KeyedConn(connected.conn),
            masters,
            replicas,
            cluster: true,
        })
    }

    /// Whether it is a Redis Cluster.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let url = redis.url();
    /// use std::time::Duration;
    /// let t = Duration::from_secs(2);
    /// let nodes = punctual::internal::nodes::Nodes::connect(&url, t, t).await?;
    /// assert!(!nodes.is_cluster());
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The masters (the one node of a single Redis).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let url = redis.url();
    /// use std::time::Duration;
    /// let t = Duration::from_secs(2);
    /// let nodes = punctual::internal::nodes::Nodes::connect(&url, t, t).await?;
    /// assert_eq!(nodes.masters().len(), 1);
    /// assert_eq!(nodes.masters()[0].url(), url);
    /// # Ok(()) }
    /// ```
    pub fn masters(&self) -> &[Node] {
        &self.masters
    }

    /// A cluster's other nodes (replicas); empty for a single Redis.
    ///
    /// ```no_run
    /// # async fn demo(nodes: punctual::internal::nodes::Nodes) -> punctual::Result<()> {
    /// for r in nodes.replicas() {
    ///     let repl = r.info(&["replication"]).await?;
    ///     println!("{}: link to its master {}", r.addr(), repl["master_link_status"]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn replicas(&self) -> &[Node] {
        &self.replicas
    }

    /// Every node, masters first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let url = redis.url();
    /// use std::time::Duration;
    /// let t = Duration::from_secs(2);
    /// let nodes = punctual::internal::nodes::Nodes::connect(&url, t, t).await?;
    /// let mut versions = Vec::new();
    /// for node in nodes.all() {
    ///     versions.push(node.info(&["server"]).await?["redis_version"].clone());
    /// }
    /// assert_eq!(versions.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn all(&self) -> impl Iterator<Item = &Node> {
        self.masters.iter().chain(&self.replicas)
    }

    /// The master serving `slot` (the one node of a single Redis).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let url = redis.url();
    /// use std::time::Duration;
    /// let t = Duration::from_secs(2);
    /// let nodes = punctual::internal::nodes::Nodes::connect(&url, t, t).await?;
    /// // On a single Redis every slot is on its one node.
    /// let node = nodes.master_of_slot(16_383).unwrap();
    /// assert_eq!(node.addr(), nodes.masters()[0].addr());
    /// # Ok(()) }
    /// ```
    pub fn master_of_slot(&self, slot: u16) -> Option<&Node> {
        if !self.cluster {
            return self.masters.first();
        }
        self.masters
            .iter()
            .find(|m| m.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
    }

    /// A clone of the connection for commands on keys.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let url = redis.url();
    /// use std::time::Duration;
    /// let t = Duration::from_secs(2);
    /// let nodes = punctual::internal::nodes::Nodes::connect(&url, t, t).await?;
    /// let mut conn = nodes.keyed();
    /// let _: () = redis::cmd("SET").arg("scratch:a").arg(1).query_async(&mut conn).await?;
    /// let v: i64 = redis::cmd("GET").arg("scratch:a").query_async(&mut conn).await?;
    /// assert_eq!(v, 1);
    /// # Ok(()) }
    /// ```
    pub fn keyed(&self) -> KeyedConn {
        self.keyed.clone()
    }

    /// Deletes every key matching the `SCAN MATCH` pattern on every master;
    /// returns how many it deleted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let url = redis.url();
    /// use std::time::Duration;
    /// let t = Duration::from_secs(2);
    /// let nodes = punctual::internal::nodes::Nodes::connect(&url, t, t).await?;
    /// let mut conn = nodes.keyed();
    /// for k in ["scratch:a", "scratch:b", "keep:c"] {
    ///     let _: () = redis::cmd("SET").arg(k).arg(1).query_async(&mut conn).await?;
    /// }
    /// assert_eq!(nodes.delete_matching("scratch:*").await?, 2);
    /// assert_eq!(nodes.delete_matching("scratch:*").await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn delete_matching(&self, pattern: &str) -> Result<u64> {
        let mut total = 0;
        for m in &self.masters {
            total += m.delete_matching(pattern).await?;
        }
        Ok(total)
    }
}
