//! One `redis-server` owned by a test, started through
//! punctual-redis-server's launcher; it can be killed, paused and
//! restarted on its port and directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

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
/// keys and `ARGV[1]` the topic's key prefix `P:{T}:`. It returns a flat
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
/// keys and `ARGV[1]` the topic's key prefix `P:{T}:`; it replies the number
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
    pub(crate) fn launch(extra: &[&str], cluster_node: bool) -> RedisServer {
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

    /// The cluster bus port, for a node of a [`RedisCluster`](crate::RedisCluster).
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
