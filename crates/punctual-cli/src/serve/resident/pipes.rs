//! The protocol's two pipes as the manager uses them, without a task of
//! their own: [`JobsPipe`] writes lines to fd 3 at once when the pipe has
//! room (keeping the rest until it has), and [`ReplyLines`] reads fd 4 and
//! splits it into lines, several per read when the program wrote several.
//! A job thus crosses no task between the manager and the program.

use tokio::net::unix::pipe;

/// The writing end of fd 3.
pub(super) struct JobsPipe {
    w: pipe::Sender,
    /// What the pipe had no room for yet, in order.
    pending: Vec<u8>,
    /// The program stopped reading (it closed fd 3 or exited): lines are
    /// dropped; its exit is seen on fd 4 and by waiting for it.
    broken: bool,
}

impl JobsPipe {
    pub(super) fn new(w: pipe::Sender) -> JobsPipe {
        JobsPipe {
            w,
            pending: Vec::new(),
            broken: false,
        }
    }

    /// Writes `line` now, as far as the pipe takes it; the rest goes when
    /// it has room ([`JobsPipe::flush`]), before any later line.
    pub(super) fn send(&mut self, line: &[u8]) {
        if self.broken {
            return;
        }
        if !self.pending.is_empty() {
            self.pending.extend_from_slice(line);
            return;
        }
        let n = self.write_some(line);
        self.pending.extend_from_slice(&line[n..]);
    }

    /// Whether lines wait for room in the pipe.
    pub(super) fn waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Waits for room, then writes what it can of the waiting lines.
    /// Cancel-safe: what is not written stays waiting.
    pub(super) async fn flush(&mut self) {
        if self.w.writable().await.is_err() {
            self.broken = true;
            self.pending.clear();
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let n = self.write_some(&pending);
        if !self.broken {
            self.pending = pending;
            self.pending.drain(..n);
        }
    }

    /// Writes from `buf` until the pipe is full; returns how much it took.
    fn write_some(&mut self, buf: &[u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            match self.w.try_write(&buf[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.broken = true;
                    self.pending.clear();
                    return buf.len();
                }
            }
        }
        done
    }
}

/// The reading end of fd 4, as lines.
pub(super) struct ReplyLines {
    r: pipe::Receiver,
    buf: Vec<u8>,
    /// Where the unread part of `buf` starts.
    start: usize,
    /// How far past `start` is known to hold no `\n`.
    scanned: usize,
    /// The longest line; a longer one is returned cut at this length
    /// (without its `\n`: the parser refuses it).
    max: usize,
    eof: bool,
}

impl ReplyLines {
    pub(super) fn new(r: pipe::Receiver, max: usize) -> ReplyLines {
        ReplyLines {
            r,
            buf: Vec::with_capacity(8 * 1024),
            start: 0,
            scanned: 0,
            max,
            eof: false,
        }
    }

    /// The next line with its `\n` (the last may lack it), or None at EOF
    /// (or on a read error). Cancel-safe: a line half read stays buffered.
    pub(super) async fn recv(&mut self) -> Option<Vec<u8>> {
        loop {
            let unread = &self.buf[self.start..];
            let limit = unread.len().min(self.max);
            if let Some(i) = unread[self.scanned.min(limit)..limit]
                .iter()
                .position(|&b| b == b'\n')
            {
                let end = self.scanned.min(limit) + i + 1;
                let line = unread[..end].to_vec();
                self.start += end;
                self.scanned = 0;
                return Some(line);
            }
            if unread.len() >= self.max {
                let line = unread[..self.max].to_vec();
                self.start += self.max;
                self.scanned = 0;
                return Some(line);
            }
            self.scanned = unread.len();
            if self.eof {
                if unread.is_empty() {
                    return None;
                }
                let line = unread.to_vec();
                self.start = self.buf.len();
                self.scanned = 0;
                return Some(line);
            }
            // Make room: drop what was read.
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            if self.r.readable().await.is_err() {
                self.eof = true;
                continue;
            }
            self.buf.reserve(8 * 1024);
            match self.r.try_read_buf(&mut self.buf) {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => self.eof = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    fn pipe_pair() -> (pipe::Sender, pipe::Receiver) {
        let (r, w) = std::io::pipe().unwrap();
        (
            pipe::Sender::from_owned_fd(OwnedFd::from(w)).unwrap(),
            pipe::Receiver::from_owned_fd(OwnedFd::from(r)).unwrap(),
        )
    }

    /// Lines come out as they went in, whole and in order, also when the
    /// pipe is full for a while and when lines straddle reads; an
    /// over-long line is cut at the limit; EOF ends it.
    #[tokio::test]
    async fn lines_cross_a_full_pipe_whole_and_in_order() {
        let (w, r) = pipe_pair();
        let mut jobs = JobsPipe::new(w);
        let mut lines = ReplyLines::new(r, 100);
        // 2,000 lines of 60 bytes: more than a pipe's 64 KiB.
        let sent: Vec<Vec<u8>> = (0..2000)
            .map(|i| {
                format!(
                    "{{\"type\":\"job\",\"id\":\"{i:06}\",\"pad\":\"{}\"}}\n",
                    "x".repeat(20)
                )
                .into_bytes()
            })
            .collect();
        for l in &sent {
            jobs.send(l);
        }
        assert!(jobs.waiting(), "the pipe filled up");
        let long = vec![b'y'; 250];
        let writer = async move {
            while jobs.waiting() {
                jobs.flush().await;
            }
            jobs.send(&long);
            while jobs.waiting() {
                jobs.flush().await;
            }
            drop(jobs); // EOF
        };
        let reader = async {
            let mut got = Vec::new();
            while let Some(l) = lines.recv().await {
                got.push(l);
            }
            got
        };
        let ((), got) = tokio::join!(writer, reader);
        assert_eq!(
            got.len(),
            sent.len() + 3,
            "2,000 lines and one of 250 bytes cut in 3"
        );
        assert_eq!(&got[..sent.len()], &sent[..]);
        assert_eq!(got[sent.len()], vec![b'y'; 100]);
        assert_eq!(got[sent.len() + 1], vec![b'y'; 100]);
        assert_eq!(
            got[sent.len() + 2],
            vec![b'y'; 50],
            "the rest at EOF, without a newline"
        );
    }

    /// A program that stopped reading breaks no write: lines are dropped.
    #[tokio::test]
    async fn a_closed_pipe_drops_lines() {
        let (w, r) = pipe_pair();
        drop(r);
        let mut jobs = JobsPipe::new(w);
        jobs.send(b"{\"type\":\"job\"}\n");
        // (A new pipe's first write may wait for the reactor's first word.)
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while jobs.waiting() {
                jobs.flush().await;
            }
        })
        .await
        .expect("the write ends");
        assert!(jobs.broken, "the closed pipe was seen");
        jobs.send(b"more\n");
        assert!(!jobs.waiting(), "later lines are dropped");
    }
}
