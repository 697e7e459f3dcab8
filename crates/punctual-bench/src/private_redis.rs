//! A private `redis-server` in a temp dir, for `demo` and `bench` when no
//! Redis answers: persistence off, on a free port, stopped on drop.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A private redis-server, stopped (and its directory removed) on drop
/// (see [`start`]).
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
/// ```no_run
/// let (url, server) = punctual_bench::private_redis::start("my-tool-redis-")?;
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
