//! The Redis the bench runs against: the one at `--redis`, or a private
//! `redis-server` when none answers at the default address. Also: the check
//! that it holds nobody else's keys, deleting the bench's own keys, and
//! reading `INFO`.

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use redis::aio::MultiplexedConnection;

use crate::context::redact;

/// Every key the bench writes starts with `PREFIX:`.
pub const PREFIX: &str = "punctual-bench";
/// The one topic of the bench.
pub const TOPIC: &str = "bench";

/// A key of the bench's topic, e.g. `key("pool")`.
pub fn key(part: &str) -> String {
    format!("{PREFIX}:{{{TOPIC}}}:{part}")
}

/// A private redis-server, stopped on drop.
#[derive(Debug)]
pub struct PrivateRedis {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Redis in use and an admin connection to it (INFO, SCAN, DEL, polls),
/// separate from the connections of producers and consumers.
pub struct Target {
    pub url: String,
    pub conn: MultiplexedConnection,
    pub version: String,
    /// The server's process id, when it runs on this host (for its
    /// scheduler statistics in /proc).
    pub pid: Option<u32>,
    /// Set when the bench started the server itself.
    pub private: Option<PrivateRedis>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &redact(&self.url))
            .field("version", &self.version)
            .field("pid", &self.pid)
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
pub async fn open(url: &str, explicit: bool) -> Result<Target> {
    let (url, conn, private) = match connect(url, Duration::from_millis(700)).await {
        Ok(conn) => (url.to_string(), conn, None),
        Err(e) if explicit => return Err(e),
        Err(_) => {
            let (url, private) = start_private()?;
            let conn = connect(&url, Duration::from_secs(2)).await?;
            (url, conn, Some(private))
        }
    };
    let server = info(&conn, &["server"]).await?;
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
            redact(&url)
        );
    }
    let pid = server
        .get("process_id")
        .and_then(|p| p.parse::<u32>().ok())
        .filter(|pid| is_local(&url) && is_redis_process(*pid));
    Ok(Target {
        url,
        conn,
        version,
        pid,
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

fn start_private() -> Result<(String, PrivateRedis)> {
    let dir = tempfile::Builder::new()
        .prefix("punctual-bench-redis-")
        .tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(dir.path().join("redis.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("no Redis answers at the default address and redis-server cannot be started: install it (sudo apt-get install redis-server) or pass --redis URL")?;
    let mut private = PrivateRedis { child, _dir: dir };
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        if let Ok(Some(status)) = private.child.try_wait() {
            bail!("the private redis-server exited at start: {status}");
        }
        if Instant::now() > deadline {
            bail!("the private redis-server on port {port} did not start within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((format!("redis://{addr}"), private))
}

impl Target {
    /// A clone of the admin connection.
    pub fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    /// Describes keys that are not the bench's, if the Redis holds any:
    /// keys in another database, or keys outside `PREFIX:` in ours.
    pub async fn foreign_keys(&self) -> Result<Option<String>> {
        let db = redis::Client::open(self.url.as_str())?
            .get_connection_info()
            .redis_settings()
            .db();
        let keyspace = info(&self.conn, &["keyspace"]).await?;
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
                return Ok(Some(format!("database {n} holds {keys} keys")));
            }
            if n == db {
                ours = keys;
            }
        }
        if ours == 0 {
            return Ok(None);
        }
        let mut conn = self.conn();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if let Some(k) = keys.iter().find(|k| !k.starts_with(&format!("{PREFIX}:"))) {
                return Ok(Some(format!("database {db} holds {ours} keys, e.g. {k:?}")));
            }
            cursor = next;
            if cursor == 0 {
                return Ok(None);
            }
        }
    }

    /// Deletes every key under `PREFIX:` (and only those).
    pub async fn clean(&self) -> Result<()> {
        let mut conn = self.conn();
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
                redis::cmd("DEL")
                    .arg(&keys)
                    .query_async::<()>(&mut conn)
                    .await?;
            }
            cursor = next;
            if cursor == 0 {
                return Ok(());
            }
        }
    }

    /// Runs one command on the admin connection.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn();
        Ok(cmd.query_async(&mut conn).await?)
    }

    /// Jobs with a record in the bench topic (0 once every ack landed).
    pub async fn records(&self) -> Result<u64> {
        self.query(redis::cmd("HLEN").arg(key("jobs"))).await
    }

    /// Sizes of pool, ready, running and dead.
    pub async fn sets(&self) -> Result<[u64; 4]> {
        let mut pipe = redis::pipe();
        for part in ["pool", "ready", "running", "dead"] {
            pipe.cmd("ZCARD").arg(key(part));
        }
        let mut conn = self.conn();
        let v: Vec<u64> = pipe.query_async(&mut conn).await?;
        Ok([v[0], v[1], v[2], v[3]])
    }

    /// The topic's counters (enqueued, claimed, done, retried, dead, ...).
    pub async fn counters(&self) -> Result<HashMap<String, u64>> {
        self.query(redis::cmd("HGETALL").arg(key("stats"))).await
    }

    /// Redis's clock, epoch ms.
    pub async fn now_ms(&self) -> Result<i64> {
        let (s, us): (i64, i64) = self.query(&redis::cmd("TIME")).await?;
        Ok(s * 1000 + us / 1000)
    }

    /// Subscribers of a channel (PUBSUB NUMSUB).
    pub async fn subscribers(&self, channel: &str) -> Result<u64> {
        let v: (String, u64) = self
            .query(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel))
            .await?;
        Ok(v.1)
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
    }
}
