//! A private `redis-server` in a temp dir, for `demo` and `bench` when no
//! Redis answers: persistence off, on a free port, stopped on drop.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> anyhow::Result<()> {
//! let (url, _server) = punctual_bench::private_redis::start("my-tool-redis-")?;
//! let queue = punctual::Queue::connect(url).await?;
//! queue.enqueue("orders", punctual::Job::new("42")).await?;
//! assert_eq!(queue.stats("orders").await?.ready, 1);
//! # Ok(()) }
//! ```

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A private redis-server, stopped (and its directory removed) on drop
/// (see [`start`]).
///
/// ```
/// let (url, server) = punctual_bench::private_redis::start("my-tool-redis-")?;
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

/// Starts one (its temp dir named with `prefix`) and waits until it
/// accepts connections; returns its URL.
///
/// ```
/// let (url, server) = punctual_bench::private_redis::start("my-tool-redis-")?;
/// assert!(url.starts_with("redis://127.0.0.1:"));
/// println!("redis-server at {url}");
/// drop(server); // stops it and removes its directory
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn start(prefix: &str) -> Result<(String, PrivateRedis)> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
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
        .context("no Redis answers at --redis and redis-server cannot be started: install it (sudo apt-get install redis-server, or brew install redis) or pass --redis URL")?;
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
