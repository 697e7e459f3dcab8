//! Private `redis-server` processes for tests: each on a free port, in its own
//! temp dir, stopped on drop. Tests can kill, pause and restart them.
//!
//! - [`RedisServer`]: one standalone server.
//! - [`RedisCluster`]: a local Redis Cluster (3 masters by default, optionally
//!   with replicas), joined with `redis-cli --cluster create`.
//! - [`eventually`]: wait in an async test until a condition holds.
//!
//! punctual's own tests use it, and so can a program that uses punctual, for
//! its own integration tests: add `punctual-testkit` as a dev-dependency
//! (it needs `redis-server` and `redis-cli` on the `PATH`, and never touches
//! a Redis it did not start). A test of a handler, end to end:
//!
//! ```ignore
//! use std::time::Duration;
//! use punctual::{CancellationToken, Job, Outcome, Queue, Scheduler, SchedulerConfig, Worker, WorkerConfig};
//! use punctual_testkit::{eventually, RedisServer};
//!
//! #[tokio::test]
//! async fn an_order_is_closed() {
//!     let redis = RedisServer::start(); // stopped when dropped
//!     let queue = Queue::connect(redis.url()).await.unwrap();
//!     queue.enqueue("orders", Job::new("42")).await.unwrap();
//!     let stop = CancellationToken::new();
//!     let scheduler = Scheduler::new(queue.clone(), SchedulerConfig::default()).topic("orders");
//!     let worker = Worker::new(queue.clone(), WorkerConfig::default())
//!         .handle("orders", |_job| async { Outcome::Done });
//!     let s = tokio::spawn(scheduler.run(stop.clone().cancelled_owned()));
//!     let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
//!     eventually(Duration::from_secs(10), "the job is done", async || {
//!         let s = queue.stats("orders").await.unwrap();
//!         s.pool + s.ready + s.running + s.dead == 0
//!     })
//!     .await;
//!     stop.cancel();
//!     s.await.unwrap().unwrap();
//!     w.await.unwrap().unwrap();
//! }
//! ```
//!
//! (The same test runs as a doc test of `punctual::Worker`.)
//!
//! The servers themselves, with `redis-cli`:
//!
//! ```
//! use punctual_testkit::RedisServer;
//! let mut redis = RedisServer::start();
//! assert_eq!(redis.cli(&["SET", "greeting", "hello"]).unwrap().trim(), "OK");
//! assert_eq!(redis.cli(&["GET", "greeting"]).unwrap().trim(), "hello");
//! redis.kill(); // an outage
//! assert!(redis.cli(&["PING"]).is_err());
//! redis.restart(); // persistence is off: the data is gone
//! assert_eq!(redis.cli(&["EXISTS", "greeting"]).unwrap().trim(), "0");
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Polls `cond` every 20 ms until it holds; panics with `what` after
/// `timeout`. For async tests (it sleeps with tokio).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let mut tries = 0;
/// punctual_testkit::eventually(Duration::from_secs(5), "the third try", async || {
///     tries += 1;
///     tries == 3
/// })
/// .await;
/// assert_eq!(tries, 3);
/// # }
/// ```
pub async fn eventually(timeout: Duration, what: &str, cond: impl AsyncFnMut() -> bool) {
    eventually_every(Duration::from_millis(20), timeout, what, cond).await
}

/// [`eventually`], polling every `every`: for a condition that costs more
/// to check (one that runs a program, say).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let start = std::time::Instant::now();
/// punctual_testkit::eventually_every(
///     Duration::from_millis(50),
///     Duration::from_secs(5),
///     "100 ms to pass",
///     async || start.elapsed() >= Duration::from_millis(100),
/// )
/// .await;
/// # }
/// ```
pub async fn eventually_every(
    every: Duration,
    timeout: Duration,
    what: &str,
    mut cond: impl AsyncFnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(every).await;
    }
}

/// A `redis-server` owned by a test.
///
/// ```
/// let redis = punctual_testkit::RedisServer::start();
/// assert!(redis.url().starts_with("redis://127.0.0.1:"));
/// assert_eq!(redis.cli(&["PING"]).unwrap().trim(), "PONG");
/// let dir = redis.dir().to_path_buf();
/// drop(redis); // stops the server and removes its directory
/// assert!(!dir.exists());
/// ```
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// Cluster nodes only: the cluster bus port (`--cluster-port`), kept
    /// across restarts like the data port.
    bus_port: Option<u16>,
    child: Option<Child>,
}

/// The Lua script behind [`RedisServer::pool_jobs`], for a test that
/// reads a punctual topic through its own connection: `EVAL` it with no
/// keys and ARGV[1] the topic's key prefix `P:{T}:`. It returns a flat
/// array `id, due ms, ...`: the members of `P:{T}:pool` with their scores,
/// then the cold jobs (docs/PROTOCOL.md "The cold pool"): the ids of
/// `P:{T}:jobs` in none of pool, ready, running and dead whose record is
/// due at or after meta `cold_at` (none while `cold_at` is absent). It
/// reads whole keys: for tests only.
///
/// ```
/// assert!(punctual_testkit::POOL_JOBS_LUA.contains("cold_at"));
/// ```
pub const POOL_JOBS_LUA: &str = r#"
local base = ARGV[1]
local out = {}
local pool = redis.call('ZRANGE', base .. 'pool', 0, -1, 'WITHSCORES')
for i = 1, #pool, 2 do
  out[#out + 1] = pool[i]
  out[#out + 1] = pool[i + 1]
end
local cold_at = tonumber(redis.call('HGET', base .. 'meta', 'cold_at'))
if not cold_at then return out end
local jobs = redis.call('HGETALL', base .. 'jobs')
for i = 1, #jobs, 2 do
  local id = jobs[i]
  local due = string.match(jobs[i + 1], '^[^:]*:(%w+):')
  due = due and tonumber(due, 36)
  if due and due >= cold_at
    and not redis.call('ZSCORE', base .. 'pool', id) and not redis.call('ZSCORE', base .. 'ready', id)
    and not redis.call('ZSCORE', base .. 'running', id) and not redis.call('ZSCORE', base .. 'dead', id) then
    out[#out + 1] = id
    out[#out + 1] = string.format('%d', due)
  end
end
return out
"#;

/// The Lua script behind [`RedisServer::make_cold`]: `EVAL` it with no
/// keys and ARGV[1] the topic's key prefix `P:{T}:`; it replies the number
/// of jobs it moved from `pool` into the cold pool.
///
/// ```
/// assert!(punctual_testkit::MAKE_COLD_LUA.contains("RPUSH"));
/// ```
pub const MAKE_COLD_LUA: &str = r#"
local base = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local far = redis.call('ZRANGE', base .. 'pool', now + 600000, '+inf', 'BYSCORE', 'WITHSCORES')
local first = nil
for i = 1, #far, 2 do
  local id, due = far[i], tonumber(far[i + 1])
  local start = string.format('%d', due - due % 60000)
  redis.call('ZREM', base .. 'pool', id)
  redis.call('RPUSH', base .. 'c:' .. start, id)
  redis.call('ZADD', base .. 'cold', 'NX', start, start)
  redis.call('HINCRBY', base .. 'meta', 'cold_n', 1)
  if not first or tonumber(start) < tonumber(first) then first = start end
end
if first then redis.call('HSETNX', base .. 'meta', 'cold_at', first) end
return #far / 2
"#;

/// A port nobody listens on right now.
///
/// ```
/// let port = punctual_testkit::free_port();
/// // Nothing answers there (until someone else takes the port).
/// assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
/// ```
pub fn free_port() -> u16 {
    punctual_redis_server::free_port().expect("bind 127.0.0.1:0")
}

impl RedisServer {
    /// Starts a server with persistence off.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// assert_eq!(redis.cli(&["CONFIG", "GET", "appendonly"]).unwrap(), "appendonly\nno\n");
    /// ```
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra config arguments, e.g.
    /// `["--appendonly", "yes", "--appendfsync", "always"]`.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start_with(&["--maxmemory", "10mb"]);
    /// let got = redis.cli(&["CONFIG", "GET", "maxmemory"]).unwrap();
    /// assert_eq!(got, "maxmemory\n10485760\n");
    /// ```
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, false)
    }

    /// Starts a server with `extra` config arguments; a cluster node also gets
    /// a free bus port of its own (so a data port near 65535 cannot push the
    /// default bus port, data port + 10000, out of range).
    fn launch(extra: &[&str], cluster_node: bool) -> RedisServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut s = RedisServer {
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            bus_port: None,
            child: None,
        };
        // A port may be taken between free_port() and bind: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            s.port = free_port();
            if cluster_node {
                let mut bus = free_port();
                while bus == s.port {
                    bus = free_port();
                }
                s.bus_port = Some(bus);
            }
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last = e,
            }
        }
        panic!(
            "could not start redis-server: {last} (is it installed? apt-get install redis-server)"
        );
    }

    /// Starts the process on its port and directory (punctual-redis-server's
    /// launcher: persistence off, then the cluster's and the test's
    /// arguments), ready once it answers `PING`.
    fn spawn(&mut self) -> Result<(), String> {
        let mut args: Vec<String> = Vec::new();
        if let Some(bus) = self.bus_port {
            args.extend(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                ]
                .map(String::from),
            );
            args.push(bus.to_string());
        }
        args.extend(self.extra.iter().cloned());
        let child = punctual_redis_server::spawn(self.port, self.dir.path(), &args)
            .map_err(|e| e.to_string())?;
        self.child = Some(child);
        Ok(())
    }

    /// The port.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// assert!(std::net::TcpStream::connect(("127.0.0.1", redis.port())).is_ok());
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port, for a node of a [`RedisCluster`].
    ///
    /// ```no_run
    /// let cluster = punctual_testkit::RedisCluster::start();
    /// assert!(cluster.node(0).bus_port().is_some());
    /// let single = punctual_testkit::RedisServer::start();
    /// assert_eq!(single.bus_port(), None);
    /// ```
    pub fn bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// Whether the process runs (it was not killed, or was restarted).
    ///
    /// ```
    /// let mut redis = punctual_testkit::RedisServer::start();
    /// assert!(redis.is_running());
    /// redis.kill();
    /// assert!(!redis.is_running());
    /// ```
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `redis://127.0.0.1:PORT`.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    /// ```
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's directory (AOF, log).
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// redis.cli(&["SAVE"]).unwrap();
    /// assert!(redis.dir().join("dump.rdb").exists());
    /// ```
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the server's log file.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// let log = std::fs::read_to_string(redis.log_path()).unwrap();
    /// assert!(log.contains("Ready to accept connections"));
    /// ```
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// How many times this server has run `command` (lowercase, as `INFO
    /// commandstats` names it: `evalsha`, `zadd`), the ones scripts ran
    /// included; 0 when never.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// redis.cli(&["ZADD", "z", "1", "a"]).unwrap();
    /// redis.cli(&["ZADD", "z", "2", "b"]).unwrap();
    /// assert_eq!(redis.command_calls("zadd"), 2);
    /// assert_eq!(redis.command_calls("hset"), 0);
    /// ```
    pub fn command_calls(&self, command: &str) -> u64 {
        let stats = self
            .cli(&["INFO", "commandstats"])
            .unwrap_or_else(|e| panic!("INFO commandstats: {e}"));
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|rest| rest.split(',').next().unwrap_or("").parse().unwrap())
            .unwrap_or(0)
    }

    /// Runs `redis-cli` against this server; returns stdout.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// redis.cli(&["RPUSH", "l", "a", "b"]).unwrap();
    /// assert_eq!(redis.cli(&["LRANGE", "l", "0", "-1"]).unwrap(), "a\nb\n");
    /// ```
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("redis-cli")
            .arg("-p")
            .arg(self.port.to_string())
            .args(args)
            .output()
            .map_err(|e| format!("redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The jobs of a punctual topic's pool, as `(id, due ms)` sorted by
    /// due time (then id), read in one [`POOL_JOBS_LUA`] call: the `pool`
    /// sorted set and the cold pool, by the state rule of
    /// docs/PROTOCOL.md "The cold pool" (a job in none of the four sets
    /// whose record is due at or after meta `cold_at`). For tests that
    /// would otherwise read `P:{T}:pool` and miss the jobs due far ahead.
    /// `topic` is a physical name (a topic or one partition `T#i`).
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// redis.cli(&["ZADD", "punctual:{t}:pool", "5000", "warm"]).unwrap();
    /// // A cold job: a record due at 120000 ("2klc" in base 36), in no set.
    /// redis.cli(&["HSET", "punctual:{t}:jobs", "cold", ":2klc:0::0:payload"]).unwrap();
    /// redis.cli(&["HSET", "punctual:{t}:meta", "cold_at", "120000"]).unwrap();
    /// let jobs = redis.pool_jobs("punctual", "t");
    /// assert_eq!(jobs, [("warm".to_string(), 5000), ("cold".to_string(), 120000)]);
    /// ```
    pub fn pool_jobs(&self, prefix: &str, topic: &str) -> Vec<(String, i64)> {
        let base = format!("{prefix}:{{{topic}}}:");
        let out = self
            .cli(&["EVAL", POOL_JOBS_LUA, "0", &base])
            .unwrap_or_else(|e| panic!("redis-cli EVAL (pool jobs of {topic}): {e}"));
        let lines: Vec<&str> = out.lines().collect();
        let mut jobs: Vec<(String, i64)> = lines
            .chunks(2)
            .filter(|p| p.len() == 2)
            .map(|p| {
                let due: f64 = p[1].parse().unwrap_or_else(|_| panic!("a due time: {out}"));
                (p[0].to_string(), due as i64)
            })
            .collect();
        jobs.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        jobs
    }

    /// Moves the jobs of a punctual topic's `pool` due at least 10 minutes
    /// after Redis's clock into the cold pool, as punctual's placement
    /// would have put them (docs/PROTOCOL.md "The cold pool"): each id
    /// `RPUSH`ed to the list of its due minute `P:{T}:c:<start>`, the
    /// bucket added to `P:{T}:cold`, meta `cold_n` raised, and meta
    /// `cold_at` set to the earliest bucket's start when absent. One
    /// script, [`MAKE_COLD_LUA`]; returns how many jobs moved. For tests
    /// that need a cold pool whatever the scripts under test place cold
    /// themselves (jobs already cold are left as they are). `topic` is a
    /// physical name.
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// redis.cli(&["ZADD", "punctual:{t}:pool", "1", "due", "9000000000000", "far"]).unwrap();
    /// assert_eq!(redis.make_cold("punctual", "t"), 1);
    /// assert_eq!(redis.cli(&["LRANGE", "punctual:{t}:c:9000000000000", "0", "-1"]).unwrap(), "far\n");
    /// assert_eq!(redis.cli(&["ZRANGE", "punctual:{t}:pool", "0", "-1"]).unwrap(), "due\n");
    /// assert_eq!(redis.cli(&["HGET", "punctual:{t}:meta", "cold_at"]).unwrap(), "9000000000000\n");
    /// ```
    pub fn make_cold(&self, prefix: &str, topic: &str) -> usize {
        let base = format!("{prefix}:{{{topic}}}:");
        let out = self
            .cli(&["EVAL", MAKE_COLD_LUA, "0", &base])
            .unwrap_or_else(|e| panic!("redis-cli EVAL (make {topic} cold): {e}"));
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("a count of jobs moved: {out}"))
    }

    fn pid(&self) -> Option<Pid> {
        self.child.as_ref().map(|c| Pid::from_raw(c.id() as i32))
    }

    /// SIGKILL; the server is gone until [`RedisServer::restart`].
    ///
    /// ```
    /// let mut redis = punctual_testkit::RedisServer::start();
    /// redis.kill();
    /// assert!(std::net::TcpStream::connect(("127.0.0.1", redis.port())).is_err());
    /// ```
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and directory (with AOF on,
    /// it reloads its data).
    ///
    /// ```
    /// use punctual_testkit::RedisServer;
    /// let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    /// redis.cli(&["SET", "k", "kept"]).unwrap();
    /// let port = redis.port();
    /// redis.kill();
    /// redis.restart();
    /// assert_eq!(redis.port(), port);
    /// assert_eq!(redis.cli(&["GET", "k"]).unwrap().trim(), "kept");
    /// ```
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("restart redis-server: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// SIGSTOP: the server stops answering but keeps its connections.
    ///
    /// ```
    /// use std::time::Duration;
    /// let redis = std::sync::Arc::new(punctual_testkit::RedisServer::start());
    /// redis.pause();
    /// let r = redis.clone();
    /// let ping = std::thread::spawn(move || r.cli(&["PING"]));
    /// std::thread::sleep(Duration::from_millis(200));
    /// assert!(!ping.is_finished()); // no answer while paused
    /// redis.resume();
    /// assert_eq!(ping.join().unwrap().unwrap().trim(), "PONG");
    /// ```
    pub fn pause(&self) {
        if let Some(pid) = self.pid() {
            kill(pid, Signal::SIGSTOP).expect("SIGSTOP redis-server");
        }
    }

    /// SIGCONT after [`RedisServer::pause`].
    ///
    /// ```
    /// let redis = punctual_testkit::RedisServer::start();
    /// redis.pause();
    /// redis.resume();
    /// assert_eq!(redis.cli(&["PING"]).unwrap().trim(), "PONG");
    /// ```
    pub fn resume(&self) {
        if let Some(pid) = self.pid() {
            kill(pid, Signal::SIGCONT).expect("SIGCONT redis-server");
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

// ---- Redis Cluster ---------------------------------------------------------

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
