//! The handlers `serve` runs from its config: `exec` (a program per job) and
//! `http` (a POST per job). Their contracts are in docs/operations/handlers.md.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use futures::future::FusedFuture;
use futures::FutureExt;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use punctual::{Delivery, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::config::HttpConfig;

/// Exit status of an exec handler that means "permanent failure" (EX_DATAERR).
pub(crate) const EXIT_PERMANENT: i32 = 65;
/// How much of a handler's stderr (or response body) becomes the last error.
const ERROR_TAIL: usize = 2048;
/// After an exec handler exits, how long its pipes are still read (what it
/// wrote just before exiting); then the rest of its process group is killed.
const EXIT_GRACE: Duration = Duration::from_millis(100);
/// Most bytes of an exec program's reply (fd 3) read.
const MAX_REPLY: usize = 64 * 1024;

/// An `exec` handler: argv, extra env, working directory.
#[derive(Debug, Clone)]
pub(crate) struct Exec {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
}

/// Kills a process group when dropped: a handler future dropped on timeout,
/// lease loss or shutdown takes its processes with it, and so does a program
/// that exited (whatever it left running in its group dies with the job).
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Exec {
    /// Runs the program for one job: payload on stdin, metadata in env.
    /// Exit 0: done; 65: permanent failure; anything else: retry. When an
    /// operator cancels the job ([`Delivery::cancelled`]), its process
    /// group gets SIGTERM; the worker drops this future after
    /// `cancel_grace`, and the guard SIGKILLs the group.
    pub(crate) async fn run(&self, d: &Delivery) -> Outcome {
        let mut cmd = tokio::process::Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .envs(&self.env)
            .env("PUNCTUAL_TOPIC", &d.topic)
            .env("PUNCTUAL_JOB_ID", &d.id)
            .env("PUNCTUAL_ATTEMPT", d.attempt.to_string())
            .env("PUNCTUAL_MAX_ATTEMPTS", d.max_attempts.to_string())
            .env("PUNCTUAL_DUE_MS", d.due_ms.to_string())
            .env("PUNCTUAL_CREATED_MS", d.created_ms.to_string())
            .env(
                "PUNCTUAL_LATENESS_MS",
                format!("{:.3}", d.lateness_us() as f64 / 1000.0),
            )
            .env("PUNCTUAL_REPLY_FD", "3")
            .env_remove("TRACEPARENT")
            .env_remove("TRACESTATE")
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout can kill everything it started.
            .process_group(0)
            .kill_on_drop(true);
        // The supervisor's internal settings (the whole config, with the
        // Redis password) are not the handler's business.
        for var in super::child::INTERNAL_ENV {
            cmd.env_remove(var);
        }
        // The producer's trace context (W3C, as the environment carries it).
        if let Some(tp) = &d.traceparent {
            cmd.env("TRACEPARENT", tp);
            if let Some(ts) = &d.tracestate {
                cmd.env("TRACESTATE", ts);
            }
        }
        // fd 3: where the program may write one reply line.
        let (reply_r, reply_w) = match reply_pipe() {
            Ok(p) => p,
            Err(e) => return Outcome::retry(format!("cannot create the reply pipe: {e}")),
        };
        super::child::wire_fds(&mut cmd, vec![(reply_w.as_raw_fd(), 3)]);
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        let spawned = cmd.spawn();
        drop(reply_w);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => return Outcome::retry(format!("cannot run {:?}: {e}", self.argv[0])),
        };
        let mut replies = reply_r;
        let mut reply = Vec::new();
        let guard = GroupGuard(child.id().map(|p| Pid::from_raw(p as i32)));
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let payload = d.payload.clone();
        let mut tail = Vec::new();
        let mut termed = false;
        let status = {
            let feed = async move {
                // A program that does not read its stdin is fine (EPIPE ignored).
                let _ = stdin.write_all(&payload).await;
                drop(stdin);
            };
            let collect = async {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    tail.extend_from_slice(&buf[..n]);
                    if tail.len() > 2 * ERROR_TAIL {
                        tail.drain(..tail.len() - ERROR_TAIL);
                    }
                }
            };
            let read_reply = async {
                let mut buf = [0u8; 4096];
                // Past the cap, keep reading and drop the bytes: a program
                // that writes more must not block on a full pipe until its
                // timeout.
                while let Ok(n) = replies.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if reply.len() <= MAX_REPLY {
                        reply.extend_from_slice(&buf[..n]);
                    }
                }
            };
            let io = futures::future::join3(feed, collect, read_reply).fuse();
            tokio::pin!(io);
            // The exit decides, not the end of stderr: a background process
            // the program left behind may hold its pipes open for ever.
            let status = loop {
                tokio::select! {
                    s = child.wait() => break s,
                    _ = &mut io, if !io.is_terminated() => {}
                    _ = d.cancelled.cancelled(), if !termed => {
                        termed = true;
                        if let Some(pgid) = guard.0 {
                            let _ = killpg(pgid, Signal::SIGTERM);
                        }
                    }
                }
            };
            if !io.is_terminated() {
                // What it wrote just before exiting is still in the pipe.
                let _ = tokio::time::timeout(EXIT_GRACE, &mut io).await;
            }
            status
        };
        // Whatever it left running in its process group dies with the job.
        drop(guard);
        if termed {
            // Not recorded (the cancel ended the job): said for the log.
            return Outcome::retry("cancelled by an operator while it ran; stopped with SIGTERM");
        }
        let tail = tail_text(&tail);
        // A reply line on fd 3 decides, unless a signal killed the program.
        if let Ok(s) = &status {
            if s.code().is_some() {
                if let Some(line) = reply
                    .split(|b| *b == b'\n')
                    .find(|l| !l.trim_ascii().is_empty())
                {
                    return match super::resident::parse_reply_any(line) {
                        Ok((_, outcome)) => outcome,
                        Err(why) => Outcome::retry(format!("invalid reply on fd 3: {why}")),
                    };
                }
            }
        }
        match status {
            Ok(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(0), _) => Outcome::Done,
                (Some(EXIT_PERMANENT), _) => {
                    Outcome::permanent(with_tail("exit 65 (permanent failure)", &tail))
                }
                (Some(code), _) => Outcome::retry(with_tail(&format!("exit {code}"), &tail)),
                (None, Some(sig)) => {
                    Outcome::retry(with_tail(&format!("killed by signal {sig}"), &tail))
                }
                (None, None) => Outcome::retry(with_tail("ended without a status", &tail)),
            },
            Err(e) => Outcome::retry(format!("waiting for {:?} failed: {e}", self.argv[0])),
        }
    }
}

/// A pipe for an exec program's reply: our reading end (async), and its
/// writing end above fd 9, close-on-exec until dup2'ed to fd 3 in the child.
fn reply_pipe() -> std::io::Result<(tokio::net::unix::pipe::Receiver, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    let w = super::child::high_fd(OwnedFd::from(w))?;
    let r = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(r))?;
    Ok((r, w))
}

fn tail_text(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(ERROR_TAIL);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

fn with_tail(what: &str, tail: &str) -> String {
    if tail.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {tail}")
    }
}

/// An `http` handler.
#[derive(Debug, Clone)]
pub(crate) struct Http {
    pub client: reqwest::Client,
    pub config: HttpConfig,
    pub timeout: Duration,
}

impl Http {
    /// A handler with its own connection pool.
    pub(crate) fn new(config: HttpConfig, topic_timeout: Duration) -> anyhow::Result<Http> {
        let timeout = config.timeout.unwrap_or(topic_timeout);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("punctual/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Http {
            client,
            config,
            timeout,
        })
    }

    /// The request timeout of a job: its own (`Job::timeout`), else the
    /// topic's.
    pub(crate) fn timeout_of(&self, d: &Delivery) -> Duration {
        d.timeout.unwrap_or(self.timeout)
    }

    /// POSTs the payload. 2xx: done. 4xx other than 408 and 429: permanent.
    /// 408, 429, 5xx, timeouts, connection errors: retry, after `Retry-After`
    /// when the server sends one. When an operator cancels the job
    /// ([`Delivery::cancelled`]), the request is dropped at once: its
    /// connection is closed, whatever the server was doing.
    pub(crate) async fn run(&self, d: &Delivery) -> Outcome {
        tokio::select! {
            o = self.post(d) => o,
            _ = d.cancelled.cancelled() => {
                // Not recorded (the cancel ended the job): said for the log.
                Outcome::retry(format!("cancelled by an operator while it ran; the POST to {} was aborted", self.config.url))
            }
        }
    }

    async fn post(&self, d: &Delivery) -> Outcome {
        let mut req = self
            .client
            .post(&self.config.url)
            .header("punctual-topic", &d.topic)
            .header("punctual-job-id", &d.id)
            .header("punctual-attempt", d.attempt.to_string())
            .header("punctual-max-attempts", d.max_attempts.to_string())
            .header("punctual-due-ms", d.due_ms.to_string())
            .timeout(self.timeout_of(d))
            .body(d.payload.clone());
        // Configured headers replace the defaults (content-type included).
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_str(&self.config.content_type).unwrap_or(
                reqwest::header::HeaderValue::from_static("application/json"),
            ),
        );
        for (k, v) in &self.config.headers {
            if let (Ok(k), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                reqwest::header::HeaderValue::from_str(v),
            ) {
                headers.insert(k, v);
            }
        }
        // The producer's trace context (W3C Trace Context headers).
        if let Some(tp) = d.traceparent.as_deref() {
            if let Ok(v) = reqwest::header::HeaderValue::from_str(tp) {
                headers.insert("traceparent", v);
            }
            if let Some(Ok(v)) = d
                .tracestate
                .as_deref()
                .map(reqwest::header::HeaderValue::from_str)
            {
                headers.insert("tracestate", v);
            }
        }
        req = req.headers(headers);
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Outcome::retry(format!(
                    "POST {} timed out after {:?}",
                    self.config.url,
                    self.timeout_of(d)
                ))
            }
            Err(e) => {
                return Outcome::retry(format!(
                    "POST {} failed: {}",
                    self.config.url,
                    error_chain(&e)
                ))
            }
        };
        let status = resp.status();
        if status.is_success() {
            return Outcome::Done;
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let body = body_head(resp).await;
        let what = with_tail(&format!("HTTP {}", status.as_u16()), &body);
        let code = status.as_u16();
        if status.is_client_error() && code != 408 && code != 429 {
            return Outcome::permanent(what);
        }
        match retry_after {
            Some(after) => Outcome::retry_after(what, after),
            None => Outcome::retry(what),
        }
    }
}

/// The first 2 KiB of a response body (never more is read).
async fn body_head(mut resp: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() >= ERROR_TAIL {
            body.truncate(ERROR_TAIL);
            break;
        }
    }
    String::from_utf8_lossy(&body).trim().to_string()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// `Retry-After`: delay-seconds or an HTTP date.
pub(crate) fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let at = SystemTime::from(at);
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
