//! Shared fixtures: a private Redis per test, a connected [`Queue`], a raw
//! Redis connection to read the clock and inject state, and its polling use `punctual_testkit::eventually`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use punctual::Queue;
use punctual_testkit::eventually;
pub(crate) use punctual_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

/// The default key prefix, as the tests spell keys by hand.
pub(crate) const PREFIX: &str = "punctual";

/// A long lease, for claims whose lease must not run out during a test.
pub(crate) const LONG_LEASE: Duration = Duration::from_secs(60);

/// Everything a queue test needs: its own server, a queue and a raw
/// connection. The server stops when this is dropped.
pub(crate) struct Fixture {
    pub server: RedisServer,
    pub queue: Queue,
    pub conn: MultiplexedConnection,
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture")
            .field("server", &self.server)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl Fixture {
    /// Starts a private redis-server and connects to it.
    pub(crate) async fn new() -> Fixture {
        let server = RedisServer::start();
        let queue = queue(&server).await;
        let conn = conn(&server).await;
        Fixture {
            server,
            queue,
            conn,
        }
    }

    /// Runs a raw command on the private server.
    pub(crate) async fn cmd<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut c = self.conn.clone();
        cmd.query_async(&mut c)
            .await
            .unwrap_or_else(|e| panic!("redis command failed: {e}"))
    }

    /// Redis's clock, epoch ms.
    pub(crate) async fn now_ms(&self) -> i64 {
        redis_time_ms(&self.conn).await
    }

    /// Waits until Redis's clock is past `ms`.
    pub(crate) async fn wait_past(&self, ms: i64) {
        let c = self.conn.clone();
        eventually(Duration::from_secs(5), "the Redis clock to move on", || {
            let c = c.clone();
            async move { redis_time_ms(&c).await > ms }
        })
        .await;
    }

    /// The number of members (ZSET) or fields (HASH) of a topic's key.
    pub(crate) async fn card(&self, topic: &str, name: &str) -> usize {
        let k = key(topic, name);
        let kind: String = self.cmd(redis::cmd("TYPE").arg(&k)).await;
        match kind.as_str() {
            "zset" => self.cmd(redis::cmd("ZCARD").arg(&k)).await,
            "hash" => self.cmd(redis::cmd("HLEN").arg(&k)).await,
            "list" => self.cmd(redis::cmd("LLEN").arg(&k)).await,
            "none" => 0,
            other => panic!("unexpected type {other} of {k}"),
        }
    }

    /// The jobs in a topic's pool (a physical name), `(id, due ms)` by due
    /// time: the `pool` set and the cold pool (see
    /// [`RedisServer::pool_jobs`]). Read this, not `P:{T}:pool`, for jobs
    /// due more than 10 minutes ahead.
    pub(crate) fn pool_jobs(&self, topic: &str) -> Vec<(String, i64)> {
        self.server.pool_jobs(PREFIX, topic)
    }

    /// Every key and its DUMP: equal snapshots mean nothing was written.
    pub(crate) async fn snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        let keys: Vec<String> = self.cmd(redis::cmd("KEYS").arg("*")).await;
        let mut out = BTreeMap::new();
        for k in keys {
            let dump: Vec<u8> = self.cmd(redis::cmd("DUMP").arg(&k)).await;
            out.insert(k, dump);
        }
        out
    }

    /// `redis-cli --scan` (sorted) and `DBSIZE`, as a person would compare.
    pub(crate) fn cli_keys(&self) -> (Vec<String>, i64) {
        let scan = self.server.cli(&["--scan"]).expect("redis-cli --scan");
        let mut keys: Vec<String> = scan.lines().map(str::to_string).collect();
        keys.sort();
        let size = self
            .server
            .cli(&["DBSIZE"])
            .expect("redis-cli DBSIZE")
            .trim()
            .parse()
            .expect("DBSIZE is a number");
        (keys, size)
    }

    /// Runs redis-cli against the private server; panics on failure.
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        self.server
            .cli(args)
            .unwrap_or_else(|e| panic!("redis-cli {args:?}: {e}"))
    }
}

/// A queue with default settings on `server`.
pub(crate) async fn queue(server: &RedisServer) -> Queue {
    Queue::connect(server.url())
        .await
        .expect("connect to the private redis-server")
}

/// A raw multiplexed connection to `server`.
pub(crate) async fn conn(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the private redis-server")
}

/// Redis `TIME` in epoch ms (the scripts' clock, truncated like `now_ms()`).
pub(crate) async fn redis_time_ms(conn: &MultiplexedConnection) -> i64 {
    let mut c = conn.clone();
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.expect("TIME");
    s * 1000 + us / 1000
}

/// The name of a topic key, e.g. `punctual:{t}:pool`.
pub(crate) fn key(topic: &str, name: &str) -> String {
    format!("{PREFIX}:{{{topic}}}:{name}")
}

/// The nine keys of a topic, in the order every script takes them.
pub(crate) fn topic_keys(topic: &str) -> Vec<String> {
    [
        "pool", "ready", "running", "dead", "jobs", "meta", "stats", "seq", "attempts",
    ]
    .iter()
    .map(|n| key(topic, n))
    .collect()
}

/// A topic or partition name as the low-level calls take it.
pub(crate) fn part(name: &str) -> punctual::raw::Partition {
    name.parse().expect("a valid topic or partition name")
}

/// Tick limits that promote and reclaim up to a full batch and never refuse
/// promotion.
pub(crate) const TICK_ALL: punctual::raw::TickLimits = punctual::raw::TickLimits {
    promote_batch: 1000,
    max_ready: 1_000_000,
    reclaim_batch: 1000,
};

/// One `SLOWLOG GET` entry: duration (µs) and arguments.
fn parse_slowlog(v: redis::Value) -> Vec<(Duration, Vec<String>)> {
    let entries: Vec<redis::Value> = redis::from_redis_value(v).expect("slowlog array");
    entries
        .into_iter()
        .map(|e| {
            let fields: Vec<redis::Value> = redis::from_redis_value(e).expect("slowlog entry");
            let us: i64 = redis::from_redis_value(fields[2].clone()).expect("duration");
            let args: Vec<Vec<u8>> = redis::from_redis_value(fields[3].clone()).expect("arguments");
            let args = args
                .into_iter()
                .map(|a| String::from_utf8_lossy(&a).into_owned())
                .collect();
            (Duration::from_micros(us as u64), args)
        })
        .collect()
}

/// Every command Redis ran since the last call, then clears the log.
pub(crate) async fn take_slowlog(c: &mut MultiplexedConnection) -> Vec<(Duration, Vec<String>)> {
    let v: redis::Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(c)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(c)
        .await
        .unwrap();
    parse_slowlog(v)
}

/// `n` in base 36 (`0-9a-z`), as the scripts write numbers in records and
/// generated ids.
pub(crate) fn radix36(mut n: i64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}
