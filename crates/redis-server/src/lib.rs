//! The one launcher of private `redis-server` processes for punctual: on
//! 127.0.0.1, persistence off, its files in a directory of its own, and
//! ready once it answers `PING`.
//!
//! - [`start`] and [`PrivateRedis`]: a server in a temp dir on a free port,
//!   stopped on drop, for `punctual demo` and `punctual bench` when no
//!   Redis answers.
//! - [`spawn`]: the launch itself, for a caller that keeps its own port and
//!   directory across restarts (punctual-testkit's `RedisServer`).
//!
//! ```
//! let (url, _server) = punctual_redis_server::start("my-tool-redis-")?;
//! // redis://127.0.0.1:PORT, for `punctual::Queue::connect` or `--redis`.
//! assert!(url.starts_with("redis://127.0.0.1:"));
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long [`spawn`] waits for the server to answer.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A port nobody listens on right now.
///
/// ```
/// let port = punctual_redis_server::free_port()?;
/// // Nothing answers there (until someone else takes the port).
/// assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Why [`spawn`] has no server to give.
#[derive(Debug)]
pub enum SpawnError {
    /// `redis-server` could not be started (not installed, say).
    Spawn(std::io::Error),
    /// It exited before it answered (its port taken, a bad argument).
    Exited(ExitStatus),
    /// It did not answer `PING` within 10 s (it was killed then).
    NoAnswer,
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::Spawn(e) => write!(f, "spawn redis-server: {e}"),
            SpawnError::Exited(status) => write!(f, "redis-server exited: {status}"),
            SpawnError::NoAnswer => f.write_str("redis-server did not answer within 10 s"),
        }
    }
}

impl std::error::Error for SpawnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpawnError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// Starts `redis-server` on 127.0.0.1:`port` with `dir` as its directory
/// (its log `redis.log` there), persistence off (no RDB saves, no AOF),
/// then `args` (which may turn it back on: a later argument wins), and
/// waits until it answers `PING` (after loading its data, when AOF is on)
/// or exits. The caller owns the process.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let port = punctual_redis_server::free_port()?;
/// let mut child = punctual_redis_server::spawn(port, dir.path(), ["--maxmemory", "10mb"])?;
/// assert!(dir.path().join("redis.log").exists());
/// child.kill()?;
/// child.wait()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn spawn<I, S>(port: u16, dir: &Path, args: I) -> Result<Child, SpawnError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut child = Command::new("redis-server")
        .arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--dir")
        .arg(dir)
        .args(["--save", "", "--appendonly", "no"])
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(SpawnError::Spawn)?;
    let deadline = Instant::now() + READY_WITHIN;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(SpawnError::Exited(status));
        }
        if answers_ping(port) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(SpawnError::NoAnswer)
}

/// Whether a Redis on 127.0.0.1:`port` answers `PING` with `PONG` (not
/// while it loads its data: it answers `-LOADING` then).
fn answers_ping(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let mut reply = [0u8; 7];
    s.set_read_timeout(Some(Duration::from_secs(1))).is_ok()
        && s.write_all(b"PING\r\n").is_ok()
        && s.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// A private redis-server, stopped (and its directory removed) on drop
/// (see [`start`]).
///
/// ```
/// let (url, server) = punctual_redis_server::start("my-tool-redis-")?;
/// let addr = url.trim_start_matches("redis://").to_string();
/// assert!(std::net::TcpStream::connect(&addr).is_ok());
/// drop(server);
/// assert!(std::net::TcpStream::connect(&addr).is_err());
/// # Ok::<(), anyhow::Error>(())
/// ```
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

/// Starts one in a temp dir named with `prefix`, on a free port, and waits
/// until it answers; returns its URL.
///
/// ```
/// let (url, server) = punctual_redis_server::start("my-tool-redis-")?;
/// assert!(url.starts_with("redis://127.0.0.1:"));
/// println!("redis-server at {url}");
/// drop(server); // stops it and removes its directory
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn start(prefix: &str) -> Result<(String, PrivateRedis)> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let port = free_port()?;
    let child = match spawn(port, dir.path(), [] as [&str; 0]) {
        Ok(child) => child,
        Err(SpawnError::Spawn(e)) => return Err(e).context(
            "no Redis answers at --redis and redis-server cannot be started: install it (sudo apt-get install redis-server, or brew install redis) or pass --redis URL",
        ),
        Err(SpawnError::Exited(status)) => {
            bail!("the private redis-server exited at start: {status}")
        }
        Err(SpawnError::NoAnswer) => {
            bail!("the private redis-server on port {port} did not start within 10 s")
        }
    };
    let server = PrivateRedis { child, _dir: dir };
    Ok((format!("redis://127.0.0.1:{port}"), server))
}
