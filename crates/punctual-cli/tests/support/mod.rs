//! Fixtures shared by the CLI's integration tests: the real `punctual`
//! binary run as `api` or `serve` against a private redis-server, a small
//! JSON client (`Server`), a `serve` process with its own directory of
//! config, scripts and records (`Service`), one run of the binary as a
//! command-line user runs it (`run`, `punctual`, `Run`), polling
//! helpers, and the cancel of a job a client's resident loop runs
//! (`a_client_loop_tells_its_handler`).

#![allow(dead_code)]

mod binary;
mod cancel;
#[allow(unused_imports)]
pub(crate) use binary::{punctual, punctual_at, run, run_with_input, Run};
#[allow(unused_imports)]
pub(crate) use cancel::{a_client_loop_tells_its_handler, cancel_running};

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual::Queue;
use punctual_testkit::free_port;
use serde_json::Value;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_punctual");

/// A token long enough to be accepted.
pub(crate) const TOKEN: &str = "test-token-0123456789abcdef";

/// A `punctual api` or `punctual serve` process with its own directory,
/// killed on drop.
pub(crate) struct Server {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
}

impl Server {
    /// `punctual api --listen 127.0.0.1:PORT` with `token` in
    /// PUNCTUAL_API_TOKEN (none: read-only) and `extra` arguments.
    pub(crate) async fn api(redis: &str, token: Option<&str>, extra: &[&str]) -> Server {
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
    pub(crate) async fn serve(
        redis: &str,
        token: Option<&str>,
        settings: &str,
        topics: &str,
    ) -> Server {
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
    pub(crate) fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub(crate) fn url(&self, path: &str) -> String {
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
    pub(crate) async fn call(
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
    pub(crate) async fn authed(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, Value) {
        self.call(method, path, Some(TOKEN), body).await
    }

    /// Sends SIGTERM and waits for the exit.
    pub(crate) fn stop(&mut self) {
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

/// A `serve` process with its own directory (config, handler scripts,
/// records, logs), killed on drop.
pub(crate) struct Service {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    pub http: u16,
}

impl Service {
    pub(crate) fn new() -> Service {
        Service {
            dir: tempfile::tempdir().unwrap(),
            child: None,
            http: free_port(),
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes an executable sh script.
    pub(crate) fn script(&self, name: &str, body: &str) -> PathBuf {
        Server::script(self.dir.path(), name, body)
    }

    /// Writes the config: common settings plus `topics`.
    pub(crate) fn config(&self, redis: &str, extra: &str, topics: &str) -> PathBuf {
        let p = self.path("punctual.toml");
        let text = format!(
            "redis = {redis:?}\nhttp = \"127.0.0.1:{}\"\nidle_check = \"2s\"\n{extra}\n{topics}\n",
            self.http
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Starts `serve` with `punctual.toml` from the directory, its stderr
    /// appended to `serve.log`.
    pub(crate) fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("serve.log"))
            .unwrap();
        let child = Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(self.path("punctual.toml"))
            .env("PUNCTUAL_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().unwrap().id() as i32)
    }

    pub(crate) fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).unwrap();
    }

    /// Waits for the service to exit, at most `limit`.
    pub(crate) fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.child = None;
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit within {limit:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.path("serve.log")).unwrap_or_default()
    }

    /// Lines the handlers appended to `records`.
    pub(crate) fn records(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.path("records"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect()
    }

    pub(crate) async fn healthz(&self) -> Option<Value> {
        let r = reqwest::get(format!("http://127.0.0.1:{}/healthz", self.http))
            .await
            .ok()?;
        serde_json::from_str(&r.text().await.ok()?).ok()
    }

    /// The `/metrics` text, empty if it does not answer.
    pub(crate) async fn metrics(&self) -> String {
        match reqwest::get(format!("http://127.0.0.1:{}/metrics", self.http)).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// SIGKILLs serve, if it runs, and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
        // Children notice the supervisor is gone and stop themselves.
    }
}

/// Jobs of `topic` still held: pool, ready, running and dead.
pub(crate) async fn live(q: &Queue, topic: &str) -> u64 {
    let s = q.stats(topic).await.unwrap();
    s.pool + s.ready + s.running + s.dead
}

/// Whether process `pid` is gone, or a zombie waiting for whoever adopted
/// it to reap it.
pub(crate) fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|st| {
            st.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// A finished command's stdout followed by its stderr.
pub(crate) fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The value of the metric line starting with `series ` (labels included).
#[allow(dead_code)]
pub(crate) fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}
