//! A resident program's stdout and stderr ([`LogPipe`]): logged line by
//! line under the ids of the jobs it held, and the tail of its stderr kept
//! for the error of the jobs it held when it died.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use tokio::net::unix::pipe;
use tokio::task::JoinHandle;

use super::protocol::truncate;

/// Longest stdout/stderr line logged as one (longer is split).
const MAX_LOG_LINE: u64 = 16 << 10;

/// Of a program's stderr, the last lines kept for the error of the jobs it
/// held when it died: at most this many lines ...
const STDERR_TAIL_LINES: usize = 20;
/// ... and bytes.
const STDERR_TAIL_BYTES: usize = 2048;

/// A program's stdout or stderr, logged line by line, each line with the
/// ids of the jobs the program held when it wrote it.
///
/// Its reader task and the manager read the pipe under one lock, and a
/// read's lines are logged before the lock is let go. So when the manager,
/// holding a reply, has drained the pipe ([`LogPipe::drain`]), every line
/// the program wrote before that reply has been logged under the ids it was
/// written under, even one the reader task had just read; only then does the
/// reply's job leave `current`.
pub(super) struct LogPipe {
    pipe: pipe::Receiver,
    topic: String,
    pid: u32,
    stream: &'static str,
    current: Arc<Mutex<String>>,
    /// stderr only: the lines kept for a crash's error.
    tail: Option<Arc<Mutex<VecDeque<String>>>>,
    read: Mutex<LogRead>,
}

/// What a [`LogPipe`] has read and not yet logged.
#[derive(Default)]
struct LogRead {
    pending: Vec<u8>,
    chunk: Vec<u8>,
    eof: bool,
}

impl LogPipe {
    /// Starts the task that logs `src` as it is written; it ends at EOF.
    pub(super) fn start(
        src: OwnedFd,
        topic: String,
        pid: u32,
        stream: &'static str,
        current: Arc<Mutex<String>>,
        tail: Option<Arc<Mutex<VecDeque<String>>>>,
    ) -> std::io::Result<(Arc<LogPipe>, JoinHandle<()>)> {
        let log = Arc::new(LogPipe {
            pipe: pipe::Receiver::from_owned_fd(src)?,
            topic,
            pid,
            stream,
            current,
            tail,
            read: Mutex::new(LogRead {
                chunk: vec![0u8; 64 << 10],
                ..LogRead::default()
            }),
        });
        let reader = log.clone();
        let task = tokio::spawn(async move {
            loop {
                if reader.pipe.readable().await.is_err() || reader.drain() {
                    return;
                }
            }
        });
        Ok((log, task))
    }

    /// Reads what the pipe holds now, without waiting, and logs every whole
    /// line of it (at EOF the rest too). True at EOF.
    pub(super) fn drain(&self) -> bool {
        let mut read = self.read.lock().unwrap();
        let LogRead {
            pending,
            chunk,
            eof,
        } = &mut *read;
        while !*eof {
            match self.pipe.try_read(chunk) {
                Ok(0) => *eof = true,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => *eof = true,
            }
        }
        self.emit(pending, *eof);
        *eof
    }

    /// Logs every whole line of `pending` (and a line grown past
    /// MAX_LOG_LINE as one); `all`: the rest too.
    fn emit(&self, pending: &mut Vec<u8>, all: bool) {
        let max = MAX_LOG_LINE as usize;
        let mut start = 0;
        loop {
            let rest = &pending[start..];
            let end = match rest.iter().position(|&b| b == b'\n') {
                Some(i) if i < max => i + 1,
                _ if rest.len() >= max => max,
                _ if all && !rest.is_empty() => rest.len(),
                _ => break,
            };
            let line = String::from_utf8_lossy(&rest[..end]);
            let line = line.trim_end();
            let job = self.current.lock().unwrap().clone();
            tracing::info!(target: "punctual::resident", topic = %self.topic, pid = self.pid, job = %job, stream = self.stream, "{line}");
            // Only lines written while it held a job can explain a crash of
            // that job (boot notices and a finished job's warnings cannot).
            if let (Some(tail), false) = (&self.tail, job.is_empty()) {
                keep_tail(&mut tail.lock().unwrap(), line);
            }
            start += end;
        }
        pending.drain(..start);
    }
}

/// Adds `line` to a program's stderr tail, dropping its oldest lines past
/// `STDERR_TAIL_LINES` or `STDERR_TAIL_BYTES`.
fn keep_tail(tail: &mut VecDeque<String>, line: &str) {
    if line.is_empty() {
        return;
    }
    tail.push_back(truncate(line, STDERR_TAIL_BYTES));
    let mut bytes: usize = tail.iter().map(|l| l.len() + 1).sum();
    while tail.len() > STDERR_TAIL_LINES || (bytes > STDERR_TAIL_BYTES && tail.len() > 1) {
        if let Some(old) = tail.pop_front() {
            bytes -= old.len() + 1;
        }
    }
}
