//! Fixtures shared by the HTTP API, dashboard and doctor tests: the real
//! `punctual` binary run as `api` or `serve`, against a private
//! redis-server, and a small JSON client.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual_testkit::free_port;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_punctual");

/// A token long enough to be accepted.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A `punctual api` or `punctual serve` process with its own directory,
/// killed on drop.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
}

impl Server {
    /// `punctual api --listen 127.0.0.1:PORT` with `token` in
    /// PUNCTUAL_API_TOKEN (none: read-only) and `extra` arguments.
    pub async fn api(redis: &str, token: Option<&str>, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.args(["--redis", redis, "api", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(extra);
        let s = Server::spawn(dir, port, cmd, token);
        s.wait_ready().await;
        s
    }

    /// `punctual serve` with a config of `settings` and `topics` (the http
    /// address is added), and `token` in PUNCTUAL_API_TOKEN.
    pub async fn serve(redis: &str, token: Option<&str>, settings: &str, topics: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("punctual.toml");
        std::fs::write(
            &config,
            format!(
                "redis = {redis:?}\nhttp = \"127.0.0.1:{port}\"\nidle_check = \"1s\"\n{settings}\n{topics}\n"
            ),
        )
        .unwrap();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve").arg("--config").arg(&config);
        let s = Server::spawn(dir, port, cmd, token);
        s.wait_ready().await;
        s
    }

    fn spawn(dir: tempfile::TempDir, port: u16, mut cmd: Command, token: Option<&str>) -> Server {
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        cmd.env_remove("PUNCTUAL_API_TOKEN")
            .env("PUNCTUAL_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(t) = token {
            cmd.env("PUNCTUAL_API_TOKEN", t);
        }
        let child = cmd.spawn().unwrap();
        Server {
            dir,
            port,
            child: Some(child),
        }
    }

    /// Writes an executable sh script into the server's directory.
    pub fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = reqwest::get(self.url("/api/v1/info")).await {
                if r.status().is_success() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the server did not answer within 20 s; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Calls the API: `(status, JSON body)`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let client = reqwest::Client::new();
        let mut req = client.request(method.parse().unwrap(), self.url(path));
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let json = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text:?}"));
        (status, json)
    }

    /// `call` with the test token.
    pub async fn authed(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        self.call(method, path, Some(TOKEN), body).await
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM first, so `serve` stops its children too.
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `cond` every 50 ms until it holds, at most `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
