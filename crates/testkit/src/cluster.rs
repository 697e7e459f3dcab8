//! A local Redis Cluster of [`RedisServer`] nodes, joined with
//! `redis-cli --cluster create`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::RedisServer;

/// How to start a [`RedisCluster`]: `RedisCluster::builder().replicas(1).start()`.
///
/// ```no_run
/// use std::time::Duration;
/// let cluster = punctual_testkit::RedisCluster::builder()
///     .masters(3)
///     .replicas(1)
///     .node_timeout(Duration::from_millis(500))
///     .args(&["--appendonly", "yes"])
///     .start();
/// assert_eq!(cluster.nodes().len(), 6);
/// ```
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    masters: usize,
    replicas: usize,
    node_timeout: Duration,
    extra: Vec<String>,
}

impl ClusterBuilder {
    /// Number of masters (default 3, the least `redis-cli --cluster create`
    /// accepts).
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::builder().masters(4).start();
    /// let masters = (0..4).filter(|&i| cluster.role(i).unwrap() == "master").count();
    /// assert_eq!(masters, 4);
    /// ```
    pub fn masters(mut self, n: usize) -> Self {
        self.masters = n;
        self
    }

    /// Replicas per master (default 0). With 1, a killed master's replica
    /// takes over after about `node_timeout`.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::builder().replicas(1).start();
    /// assert_eq!(cluster.role(3).unwrap(), "slave"); // nodes 3..6 replicate 0..3
    /// ```
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `cluster-node-timeout` (default 1 s): how long until a silent node is
    /// considered failed, which also bounds how fast a failover happens.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let cluster = punctual_testkit::RedisCluster::builder()
    ///     .node_timeout(Duration::from_secs(3))
    ///     .start();
    /// let got = cluster.node(0).cli(&["CONFIG", "GET", "cluster-node-timeout"]).unwrap();
    /// assert!(got.ends_with("3000\n"));
    /// ```
    pub fn node_timeout(mut self, t: Duration) -> Self {
        self.node_timeout = t;
        self
    }

    /// Extra config arguments for every node, e.g. `["--appendonly", "yes"]`.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::builder()
    ///     .args(&["--maxmemory", "64mb"])
    ///     .start();
    /// let got = cluster.node(1).cli(&["CONFIG", "GET", "maxmemory"]).unwrap();
    /// assert_eq!(got, "maxmemory\n67108864\n");
    /// ```
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self
    }

    /// Starts the nodes, joins them with `redis-cli --cluster create` and
    /// waits until every node reports `cluster_state:ok`, knows every other
    /// node, and (with replicas) every replica has synced with its master.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::builder().start();
    /// let info = cluster.cluster_info(0).unwrap();
    /// assert_eq!(info["cluster_state"], "ok");
    /// ```
    pub fn start(self) -> RedisCluster {
        assert!(
            self.masters >= 3,
            "redis-cli --cluster create needs at least 3 masters"
        );
        let started = Instant::now();
        let mut extra: Vec<String> = vec![
            "--cluster-node-timeout".into(),
            self.node_timeout.as_millis().to_string(),
            // Replicas sync at once, not after the default 5 s wait for
            // more replicas to share a diskless transfer.
            "--repl-diskless-sync-delay".into(),
            "0".into(),
        ];
        extra.extend(self.extra.iter().cloned());
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let total = self.masters * (1 + self.replicas);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| RedisServer::launch(&extra, true))
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port()));
        }
        create
            .arg("--cluster-replicas")
            .arg(self.replicas.to_string())
            .arg("--cluster-yes");
        let out = create.output().expect("run redis-cli --cluster create");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("All 16384 slots covered"),
            "redis-cli --cluster create failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster {
            nodes,
            replicas: self.replicas,
        };
        if let Err(e) = cluster.wait_ok(Duration::from_secs(10)) {
            panic!("the cluster did not come up: {e}");
        }
        if cluster.replicas > 0 {
            if let Err(e) = cluster.wait_replicas_synced(Duration::from_secs(10)) {
                panic!("the cluster's replicas did not sync: {e}");
            }
        }
        let took = started.elapsed();
        if took > Duration::from_secs(5) {
            eprintln!("warning: starting a Redis Cluster of {total} nodes took {took:?}");
        }
        cluster
    }
}

/// A local Redis Cluster owned by a test: `redis-server --cluster-enabled yes`
/// processes on free ports, each in its own temp dir (with its `nodes.conf`),
/// stopped and removed on drop.
///
/// Node indexes are stable: `redis-cli --cluster create` makes the first
/// `masters` nodes the masters, and the rest their replicas; after a failover
/// the roles change but the indexes do not (see [`RedisCluster::role`]).
///
/// ```no_run
/// use std::time::Duration;
/// use punctual_testkit::RedisCluster;
///
/// let mut cluster = RedisCluster::start(); // or RedisCluster::start_with_replicas(1)
/// let seeds = cluster.seed_urls(); // "redis://127.0.0.1:P1,redis://127.0.0.1:P2,..."
/// assert_eq!(seeds.split(',').count(), 3);
/// // The node that serves a topic's slot: kill it, then bring it back.
/// let owner = cluster.master_of("punctual:{orders}:pool").unwrap();
/// cluster.kill(owner);
/// cluster.restart(owner);
/// cluster.wait_ok(Duration::from_secs(10)).unwrap();
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    replicas: usize,
}

/// The number of hash slots of Redis Cluster.
///
/// ```no_run
/// use punctual_testkit::{RedisCluster, CLUSTER_SLOTS};
/// let cluster = RedisCluster::start();
/// assert!(cluster.keyslot("punctual:{orders}:pool").unwrap() < CLUSTER_SLOTS);
/// assert_eq!(cluster.cluster_info(0).unwrap()["cluster_slots_ok"], CLUSTER_SLOTS.to_string());
/// ```
pub const CLUSTER_SLOTS: u16 = 16384;

impl RedisCluster {
    /// Settings: 3 masters, no replicas, node timeout 1 s.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::builder().replicas(1).start();
    /// assert_eq!(cluster.replicas_per_master(), 1);
    /// ```
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            masters: 3,
            replicas: 0,
            node_timeout: Duration::from_secs(1),
            extra: Vec::new(),
        }
    }

    /// Three masters, no replicas.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// assert_eq!(cluster.nodes().len(), 3);
    /// assert_eq!(cluster.cli(&["SET", "{orders}:a", "1"]).unwrap().trim(), "OK");
    /// ```
    pub fn start() -> RedisCluster {
        RedisCluster::builder().start()
    }

    /// Three masters with `replicas` replicas each.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start_with_replicas(1);
    /// assert_eq!(cluster.nodes().len(), 6);
    /// ```
    pub fn start_with_replicas(replicas: usize) -> RedisCluster {
        RedisCluster::builder().replicas(replicas).start()
    }

    /// All nodes, masters first (as created).
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// for node in cluster.nodes() {
    ///     println!("{} (bus {:?})", node.url(), node.bus_port());
    /// }
    /// ```
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// One node.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// let log = std::fs::read_to_string(cluster.node(2).log_path()).unwrap();
    /// println!("{log}");
    /// ```
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Replicas per master, as created.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// assert_eq!(cluster.replicas_per_master(), 0);
    /// ```
    pub fn replicas_per_master(&self) -> usize {
        self.replicas
    }

    /// `redis://127.0.0.1:PORT` of every node.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// assert_eq!(cluster.urls()[0], cluster.node(0).url());
    /// ```
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Every node's URL, comma-joined: the seed list a cluster client takes.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// assert_eq!(cluster.seed_urls(), cluster.urls().join(","));
    /// // e.g. punctual::Queue::connect(cluster.seed_urls())
    /// ```
    pub fn seed_urls(&self) -> String {
        self.urls().join(",")
    }

    /// SIGKILL node `i`; it is gone until [`RedisCluster::restart`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let mut cluster = punctual_testkit::RedisCluster::start_with_replicas(1);
    /// let key = "punctual:{orders}:pool";
    /// let owner = cluster.master_of(key).unwrap();
    /// cluster.kill(owner);
    /// assert!(!cluster.node(owner).is_running());
    /// // Its replica takes over after about the node timeout (1 s).
    /// let deadline = std::time::Instant::now() + Duration::from_secs(10);
    /// while cluster.master_of(key).is_err() || cluster.master_of(key) == Ok(owner) {
    ///     assert!(std::time::Instant::now() < deadline, "no failover");
    ///     std::thread::sleep(Duration::from_millis(100));
    /// }
    /// cluster.wait_ok(Duration::from_secs(10)).unwrap();
    /// ```
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again on the same ports and directory: it reads its
    /// `nodes.conf` and rejoins the cluster. Does not wait for the cluster to
    /// agree again; see [`RedisCluster::wait_ok`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let mut cluster = punctual_testkit::RedisCluster::start_with_replicas(1);
    /// cluster.kill(3);
    /// cluster.restart(3);
    /// cluster.wait_ok(Duration::from_secs(10)).unwrap();
    /// cluster.wait_replicas_synced(Duration::from_secs(10)).unwrap();
    /// assert_eq!(cluster.role(3).unwrap(), "slave");
    /// ```
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].restart();
    }

    /// SIGSTOP node `i`.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// let owner = cluster.master_of("punctual:{orders}:pool").unwrap();
    /// cluster.pause(owner); // the topic's slot stops answering; the node's connections stay open
    /// // ... check that clients time out and recover ...
    /// cluster.resume(owner);
    /// ```
    pub fn pause(&self, i: usize) {
        self.nodes[i].pause();
    }

    /// SIGCONT node `i`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// cluster.pause(1);
    /// cluster.resume(1);
    /// cluster.wait_ok(Duration::from_secs(10)).unwrap();
    /// ```
    pub fn resume(&self, i: usize) {
        self.nodes[i].resume();
    }

    /// `redis-cli -c` (follows redirections) against the first running node.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// cluster.cli(&["SET", "punctual:{orders}:seq", "7"]).unwrap();
    /// assert_eq!(cluster.cli(&["GET", "punctual:{orders}:seq"]).unwrap().trim(), "7");
    /// ```
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .ok_or("no node is running")?;
        let mut all = vec!["-c"];
        all.extend_from_slice(args);
        node.cli(&all)
    }

    /// `CLUSTER INFO` of node `i`, as `field -> value`.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// let info = cluster.cluster_info(0).unwrap();
    /// assert_eq!(info["cluster_size"], "3");
    /// ```
    pub fn cluster_info(
        &self,
        i: usize,
    ) -> Result<std::collections::BTreeMap<String, String>, String> {
        let out = self.nodes[i].cli(&["CLUSTER", "INFO"])?;
        Ok(out
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    /// Waits until every running node says `cluster_state:ok`, has all
    /// slots ok, and knows every node of the cluster.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let mut cluster = punctual_testkit::RedisCluster::start();
    /// cluster.kill(0);
    /// cluster.restart(0);
    /// cluster.wait_ok(Duration::from_secs(10)).expect("node 0 rejoined");
    /// ```
    pub fn wait_ok(&self, timeout: Duration) -> Result<(), String> {
        let total = self.nodes.len().to_string();
        self.wait_for(timeout, "cluster_state:ok on every node", |c, i| {
            let info = c.cluster_info(i)?;
            let get = |k: &str| info.get(k).map(String::as_str).unwrap_or("?");
            if get("cluster_state") == "ok"
                && get("cluster_slots_ok") == "16384"
                && get("cluster_known_nodes") == total
            {
                Ok(())
            } else {
                Err(format!(
                    "node {i}: cluster_state:{} slots_ok:{} known_nodes:{}",
                    get("cluster_state"),
                    get("cluster_slots_ok"),
                    get("cluster_known_nodes")
                ))
            }
        })
    }

    /// Waits until every running replica has `master_link_status:up`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let cluster = punctual_testkit::RedisCluster::start_with_replicas(1);
    /// cluster.cli(&["SET", "{t}:k", "v"]).unwrap();
    /// cluster.wait_replicas_synced(Duration::from_secs(10)).unwrap();
    /// ```
    pub fn wait_replicas_synced(&self, timeout: Duration) -> Result<(), String> {
        self.wait_for(timeout, "every replica to sync", |c, i| {
            let info = c.nodes[i].cli(&["INFO", "replication"])?;
            if info.contains("role:master") || info.contains("master_link_status:up") {
                Ok(())
            } else {
                Err(format!("node {i}: replica link not up"))
            }
        })
    }

    fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&RedisCluster, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let failing = (0..self.nodes.len())
                .filter(|i| self.nodes[*i].is_running())
                .find_map(|i| check(self, i).err());
            match failing {
                None => return Ok(()),
                Some(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "timed out after {timeout:?} waiting for {what}: {e}"
                    ))
                }
                Some(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// The role of node `i` as it reports it: `"master"` or `"slave"`.
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start_with_replicas(1);
    /// let roles: Vec<String> = (0..6).map(|i| cluster.role(i).unwrap()).collect();
    /// assert_eq!(roles, ["master", "master", "master", "slave", "slave", "slave"]);
    /// ```
    pub fn role(&self, i: usize) -> Result<String, String> {
        let info = self.nodes[i].cli(&["INFO", "replication"])?;
        info.lines()
            .find_map(|l| l.trim().strip_prefix("role:"))
            .map(str::to_string)
            .ok_or_else(|| format!("node {i}: no role in INFO replication"))
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// // Keys of one hash tag share a slot.
    /// let pool = cluster.keyslot("punctual:{orders}:pool").unwrap();
    /// assert_eq!(pool, cluster.keyslot("punctual:{orders}:jobs").unwrap());
    /// ```
    pub fn keyslot(&self, key: &str) -> Result<u16, String> {
        let out = self.cli(&["CLUSTER", "KEYSLOT", key])?;
        out.trim()
            .parse()
            .map_err(|e| format!("CLUSTER KEYSLOT {key}: {e}: {out:?}"))
    }

    /// The index of the node that serves `key` as master, as the first
    /// running node sees the cluster (`CLUSTER NODES`).
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// let owner = cluster.master_of("punctual:{orders}:pool").unwrap();
    /// cluster.cli(&["SET", "punctual:{orders}:pool", "x"]).unwrap();
    /// assert_eq!(cluster.node(owner).cli(&["DBSIZE"]).unwrap().trim(), "1");
    /// ```
    pub fn master_of(&self, key: &str) -> Result<usize, String> {
        let slot = self.keyslot(key)?;
        let nodes = self.cli(&["CLUSTER", "NODES"])?;
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 || !f[2].split(',').any(|x| x == "master") {
                continue;
            }
            let serves = f[8..].iter().any(|r| match r.split_once('-') {
                _ if r.starts_with('[') => false, // a slot being migrated
                Some((a, b)) => {
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
                }
                None => r.parse::<u16>() == Ok(slot),
            });
            if !serves {
                continue;
            }
            // "ip:port@busport[,hostname]"
            let port: Option<u16> = f[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok());
            return self
                .nodes
                .iter()
                .position(|n| Some(n.port()) == port)
                .ok_or_else(|| format!("slot {slot} is served by an unknown node: {line}"));
        }
        Err(format!("no master serves slot {slot}:\n{nodes}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_of_three_masters_comes_up_and_serves_hash_tagged_keys() {
        let started = Instant::now();
        let cluster = RedisCluster::start();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(5), "startup took {took:?}");
        assert_eq!(cluster.nodes().len(), 3);
        for i in 0..3 {
            let info = cluster.cluster_info(i).unwrap();
            assert_eq!(info["cluster_state"], "ok", "node {i}: {info:?}");
            assert_eq!(info["cluster_size"], "3", "node {i}: {info:?}");
            assert_eq!(cluster.role(i).unwrap(), "master");
        }
        let urls = cluster.urls();
        assert_eq!(cluster.seed_urls(), urls.join(","));
        assert!(urls.iter().all(|u| u.starts_with("redis://127.0.0.1:")));

        // Keys of one hash tag share a slot, wherever redis-cli -c starts.
        let a = "punctual:{orders}:pool";
        let b = "punctual:{orders}:jobs";
        assert_eq!(cluster.keyslot(a).unwrap(), cluster.keyslot(b).unwrap());
        let owner = cluster.master_of(a).unwrap();
        for i in 0..3 {
            let v = format!("from-{i}");
            let set = cluster.node(i).cli(&["-c", "SET", a, &v]).unwrap();
            assert_eq!(set.trim(), "OK", "SET via node {i}");
            let got = cluster.node(i).cli(&["-c", "GET", a]).unwrap();
            assert_eq!(got.trim(), v, "GET via node {i}");
        }
        // Only the owner holds the key; the others redirect.
        for i in 0..3 {
            let n: i64 = cluster
                .node(i)
                .cli(&["DBSIZE"])
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_eq!(n, i64::from(i == owner), "node {i} (owner {owner})");
        }
        // A multi-key command on one hash tag works; across tags it is refused.
        let mset = cluster.cli(&["MSET", a, "1", b, "2"]).unwrap();
        assert_eq!(mset.trim(), "OK");
        let cross = cluster.cli(&["MSET", a, "1", "punctual:{other}:pool", "2"]);
        assert!(
            matches!(&cross, Ok(s) if s.contains("CROSSSLOT"))
                || matches!(&cross, Err(s) if s.contains("CROSSSLOT")),
            "{cross:?}"
        );
    }

    #[test]
    fn a_cluster_with_replicas_syncs_and_a_restarted_node_rejoins() {
        let mut cluster = RedisCluster::start_with_replicas(1);
        assert_eq!(cluster.nodes().len(), 6);
        let roles: Vec<String> = (0..6).map(|i| cluster.role(i).unwrap()).collect();
        assert_eq!(
            roles.iter().filter(|r| *r == "master").count(),
            3,
            "{roles:?}"
        );
        assert_eq!(
            roles.iter().filter(|r| *r == "slave").count(),
            3,
            "{roles:?}"
        );

        let key = "punctual:{t}:seq";
        assert_eq!(cluster.cli(&["SET", key, "41"]).unwrap().trim(), "OK");
        // A replica restarted on its ports and dir rejoins from nodes.conf.
        let replica = (0..6).find(|i| roles[*i] == "slave").unwrap();
        cluster.kill(replica);
        assert!(!cluster.node(replica).is_running());
        cluster.restart(replica);
        cluster.wait_ok(Duration::from_secs(10)).unwrap();
        cluster
            .wait_replicas_synced(Duration::from_secs(10))
            .unwrap();
        assert_eq!(cluster.role(replica).unwrap(), "slave");
        assert_eq!(cluster.cli(&["INCR", key]).unwrap().trim(), "42");
    }
}
