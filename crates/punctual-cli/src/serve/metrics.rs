//! Job metrics from worker processes to the supervisor: each worker sends
//! datagrams of tab-separated lines (topic, lateness µs, duration µs,
//! outcome) to a Unix socket the supervisor owns; the supervisor records
//! them as Prometheus histograms. Lost datagrams only lose samples.
//! Resident pools add lines starting with `#` (never a topic's first
//! character): `#resident pid topic alive` every second (processes alive),
//! and `#restart topic reason`. The replies of its programs are counted in
//! a file per worker (`replies-INDEX` beside the socket: a line
//! `topic\tn\tn` per topic, n in 20 digits, rewritten in place at every reply, one `pwrite`, so a worker
//! killed afterwards loses no count and the supervisor is not woken per
//! job); the supervisor reads the files every 2 s. The supervisor sums these per topic in a
//! [`ResidentBoard`], which `/metrics`, `/healthz` and the dashboard read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use tokio::net::UnixDatagram;
use tokio::sync::mpsc;

/// One finished handler run.
#[derive(Debug, Clone)]
pub(crate) struct JobRecord {
    pub topic: String,
    pub lateness: Duration,
    pub duration: Duration,
    pub outcome: &'static str,
}

/// The worker's side: a channel to a task that batches records into
/// datagrams every 100 ms.
#[derive(Debug, Clone)]
pub(crate) struct MetricsSender {
    tx: mpsc::UnboundedSender<Msg>,
    replies: Option<Arc<Mutex<Replies>>>,
}

#[derive(Debug)]
enum Msg {
    Job(JobRecord),
    Line(String),
}

/// The worker's count of its programs' replies, per topic, and the file it
/// is kept in.
#[derive(Debug)]
struct Replies {
    file: std::fs::File,
    /// In first-seen order; the counts only grow, so each rewrite of the
    /// file covers the last.
    counts: Vec<(Arc<str>, u64)>,
    line: String,
}

impl Replies {
    /// Opens (or creates) the file, starting from its counts: a worker
    /// restarted with the same index goes on from its predecessor's.
    fn open(path: &Path) -> std::io::Result<Replies> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let counts = parse_replies(&text)
            .into_iter()
            .map(|(t, n)| (Arc::from(t), n))
            .collect();
        Ok(Replies {
            file,
            counts,
            line: String::new(),
        })
    }

    fn add(&mut self, topic: &Arc<str>) {
        use std::fmt::Write;
        use std::os::unix::fs::FileExt;
        match self.counts.iter_mut().find(|(t, _)| t == topic) {
            Some((_, n)) => *n += 1,
            None => self.counts.push((topic.clone(), 1)),
        }
        self.line.clear();
        for (t, n) in &self.counts {
            let _ = writeln!(self.line, "{t}\t{n:020}\t{n:020}");
        }
        // A failed write loses a count, not a job.
        let _ = self.file.write_all_at(self.line.as_bytes(), 0);
    }
}

/// `topic\tn\tn` lines, n in 20 digits (so no line moves when a count
/// grows). The count is written twice: a line read while it was being
/// rewritten (old and new digits mixed) has two that differ, and is
/// skipped.
fn parse_replies(text: &str) -> Vec<(&str, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (t, a, b) = (f.next()?, f.next()?, f.next()?);
            (a == b && f.next().is_none()).then_some((t, a.parse().ok()?))
        })
        .collect()
}

impl MetricsSender {
    /// Starts the sending task for the socket at `path`; worker `index`
    /// counts its programs' replies in `replies-INDEX` beside it.
    pub(crate) fn start(path: PathBuf, index: usize) -> std::io::Result<MetricsSender> {
        let sock = UnixDatagram::unbound()?;
        // Without its file, reply counts are lost, not jobs: warn and run.
        let replies = path.parent().and_then(|dir| {
            let file = dir.join(format!("{REPLIES_FILE}{index}"));
            match Replies::open(&file) {
                Ok(r) => Some(Arc::new(Mutex::new(r))),
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "cannot open the resident reply counts' file; punctual_resident_jobs_total will miss this worker's replies");
                    None
                }
            }
        });
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        tokio::spawn(async move {
            let mut buf = String::new();
            loop {
                let Some(first) = rx.recv().await else { return };
                push_line(&mut buf, &first);
                // Job records wait up to 100 ms to fill a datagram; counts
                // (lines) go at once, with whatever waits, so a worker
                // killed next loses none.
                if matches!(first, Msg::Job(_)) {
                    let until = tokio::time::Instant::now() + Duration::from_millis(100);
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep_until(until) => break,
                            m = rx.recv() => match m {
                                Some(m) => {
                                    push_line(&mut buf, &m);
                                    if matches!(m, Msg::Line(_)) || buf.len() > 32 * 1024 {
                                        break;
                                    }
                                }
                                None => break,
                            },
                        }
                    }
                }
                while let Ok(r) = rx.try_recv() {
                    push_line(&mut buf, &r);
                    if buf.len() > 32 * 1024 {
                        send_datagram(&sock, &buf, &path).await;
                        buf.clear();
                    }
                }
                if !buf.is_empty() {
                    send_datagram(&sock, &buf, &path).await;
                    buf.clear();
                }
            }
        });
        Ok(MetricsSender { tx, replies })
    }

    /// Queues a record (never blocks).
    pub(crate) fn send(&self, r: JobRecord) {
        let _ = self.tx.send(Msg::Job(r));
    }

    /// A resident program of `topic` was replaced (or recycled).
    pub(crate) fn resident_restart(&self, topic: &str, reason: &str) {
        let _ = self
            .tx
            .send(Msg::Line(format!("#restart\t{topic}\t{reason}\n")));
    }

    /// A resident program of `topic` replied for a job: counted at once, in
    /// the worker's replies file.
    pub(crate) fn resident_job(&self, topic: &Arc<str>) {
        if let Some(r) = &self.replies {
            r.lock().unwrap().add(topic);
        }
    }

    /// This worker's resident programs of `topic` alive now.
    pub(crate) fn resident_counts(&self, topic: &str, alive: usize) {
        let pid = std::process::id();
        let _ = self
            .tx
            .send(Msg::Line(format!("#resident\t{pid}\t{topic}\t{alive}\n")));
    }
}

/// Sends one datagram. A full receive queue (the supervisor is behind) is
/// waited out for a while, polling: an unconnected Unix datagram socket is
/// never told when its peer's queue has room, so an awaited `send_to` could
/// wait for good. Past that, the datagram is dropped (samples only).
async fn send_datagram(sock: &UnixDatagram, buf: &str, path: &Path) {
    for _ in 0..200 {
        match sock.try_send_to(buf.as_bytes(), path) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            _ => return,
        }
    }
}

fn push_line(buf: &mut String, m: &Msg) {
    use std::fmt::Write;
    let r = match m {
        Msg::Job(r) => r,
        Msg::Line(l) => {
            buf.push_str(l);
            return;
        }
    };
    let _ = writeln!(
        buf,
        "{}\t{}\t{}\t{}",
        r.topic,
        r.lateness.as_micros(),
        r.duration.as_micros(),
        r.outcome
    );
}

/// Installs the Prometheus recorder of this process.
pub(crate) fn install_recorder() -> anyhow::Result<PrometheusHandle> {
    let buckets = [
        0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)?
        .install_recorder()?;
    Ok(handle)
}

/// One topic's resident programs on this host, summed over its workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ResidentFigures {
    /// Programs alive now (a worker silent for 5 s counts 0).
    pub alive: u64,
    /// Programs replaced or recycled since the supervisor started.
    pub restarts: u64,
    /// Replies from the programs (jobs handled) since the supervisor started.
    pub jobs: u64,
    /// `restarts` by reason (`exit`, `timeout`, `max_jobs`, ...).
    pub restarts_by_reason: BTreeMap<String, u64>,
}

/// The supervisor's per-topic resident figures: what the
/// `punctual_resident_*` metrics are set from, and what `/healthz` and
/// `GET /api/v1/resident` show.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResidentBoard(Arc<Mutex<BTreeMap<String, ResidentFigures>>>);

impl ResidentBoard {
    /// A board listing `topics` (the resident topics this host's workers
    /// run) at zero, so they show before the first report.
    pub(crate) fn new<'a>(topics: impl IntoIterator<Item = &'a str>) -> ResidentBoard {
        let b = ResidentBoard::default();
        {
            let mut m = b.0.lock().unwrap();
            for t in topics {
                m.insert(t.to_string(), ResidentFigures::default());
            }
        }
        b
    }

    /// A copy of the figures, by topic.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, ResidentFigures> {
        self.0.lock().unwrap().clone()
    }

    fn restart(&self, topic: &str, reason: &str) {
        let mut m = self.0.lock().unwrap();
        let f = m.entry(topic.to_string()).or_default();
        f.restarts += 1;
        let by = f.restarts_by_reason.entry(reason.to_string()).or_default();
        *by += 1;
        metrics::counter!("punctual_resident_restarts_total", "topic" => topic.to_string(), "reason" => reason.to_string()).absolute(*by);
    }

    /// The replies counted so far (never fewer than last time).
    fn jobs(&self, topic: &str, jobs: u64) {
        let mut m = self.0.lock().unwrap();
        let f = m.entry(topic.to_string()).or_default();
        if jobs > f.jobs {
            f.jobs = jobs;
            metrics::counter!("punctual_resident_jobs_total", "topic" => topic.to_string())
                .absolute(f.jobs);
        }
    }

    fn alive(&self, topic: &str, alive: u64) {
        let mut m = self.0.lock().unwrap();
        m.entry(topic.to_string()).or_default().alive = alive;
        metrics::gauge!("punctual_resident_processes", "topic" => topic.to_string())
            .set(alive as f64);
    }
}

/// The supervisor's side: reads datagrams, records histograms, and keeps
/// `board`.
pub(crate) fn receive(
    path: &Path,
    board: ResidentBoard,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let sock = UnixDatagram::bind(path)?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        // (worker pid, topic) -> (resident programs alive, last report).
        let mut alive: Alive = HashMap::new();
        // Looked up once per topic and outcome, not per job (a few).
        let mut handles: Vec<RunHandles> = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        loop {
            let n = tokio::select! {
                r = sock.recv(&mut buf) => match r { Ok(n) => n, Err(_) => return },
                _ = tick.tick() => {
                    resident_gauges(&mut alive, &board);
                    count_replies(&dir, &board);
                    continue;
                }
            };
            let text = String::from_utf8_lossy(&buf[..n]);
            for line in text.lines() {
                if line.starts_with('#') {
                    resident_line(line, &mut alive, &board);
                    continue;
                }
                let mut f = line.split('\t');
                let (Some(topic), Some(lat), Some(dur), Some(outcome)) =
                    (f.next(), f.next(), f.next(), f.next())
                else {
                    continue;
                };
                let (Ok(lat), Ok(dur)) = (lat.parse::<u64>(), dur.parse::<u64>()) else {
                    continue;
                };
                let i = match handles
                    .iter()
                    .position(|h| h.topic == topic && h.outcome == outcome)
                {
                    Some(i) => i,
                    None => {
                        handles.push(RunHandles::new(topic, outcome));
                        handles.len() - 1
                    }
                };
                let h = &handles[i];
                h.lateness.record(lat as f64 / 1e6);
                h.duration.record(dur as f64 / 1e6);
                h.runs.increment(1);
            }
        }
    }))
}

/// The metrics a job record adds to, for one topic and outcome.
struct RunHandles {
    topic: String,
    outcome: String,
    lateness: metrics::Histogram,
    duration: metrics::Histogram,
    runs: metrics::Counter,
}

impl RunHandles {
    fn new(topic: &str, outcome: &str) -> RunHandles {
        let (topic, outcome) = (topic.to_string(), outcome.to_string());
        RunHandles {
            lateness: metrics::histogram!("punctual_lateness_seconds", "topic" => topic.clone()),
            duration: metrics::histogram!("punctual_handler_duration_seconds", "topic" => topic.clone(), "outcome" => outcome.clone()),
            runs: metrics::counter!("punctual_handler_runs_total", "topic" => topic.clone(), "outcome" => outcome.clone()),
            topic,
            outcome,
        }
    }
}

type Alive = HashMap<(String, String), (u64, Instant)>;

fn resident_line(line: &str, alive: &mut Alive, board: &ResidentBoard) {
    let f: Vec<&str> = line.split('\t').collect();
    match f.as_slice() {
        ["#restart", topic, reason] => board.restart(topic, reason),
        ["#resident", pid, topic, n] => {
            let Ok(n) = n.parse::<u64>() else {
                return;
            };
            alive.insert((pid.to_string(), topic.to_string()), (n, Instant::now()));
            resident_gauges(alive, board);
        }
        _ => {}
    }
}

/// The start of the workers' replies files' names (`replies-INDEX`).
const REPLIES_FILE: &str = "replies-";

/// Sums the replies files of the workers in `dir` per topic onto `board`.
fn count_replies(dir: &Path, board: &ResidentBoard) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut per_topic: BTreeMap<String, u64> = BTreeMap::new();
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(REPLIES_FILE) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for (topic, n) in parse_replies(&text) {
            *per_topic.entry(topic.to_string()).or_default() += n;
        }
    }
    for (topic, n) in per_topic {
        board.jobs(&topic, n);
    }
}

/// Sums the programs alive per topic over the workers heard from lately.
fn resident_gauges(alive: &mut Alive, board: &ResidentBoard) {
    let mut per_topic: HashMap<String, u64> = HashMap::new();
    for ((_, topic), (n, _)) in alive.iter() {
        *per_topic.entry(topic.clone()).or_default() += n;
    }
    // A worker not heard from for 5 s is gone (its programs died with it).
    alive.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(5));
    let mut fresh: HashMap<String, u64> = HashMap::new();
    for ((_, topic), (n, _)) in alive.iter() {
        *fresh.entry(topic.clone()).or_default() += n;
    }
    for topic in per_topic.keys() {
        board.alive(topic, fresh.get(topic).copied().unwrap_or(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's replies file: counts per topic, taken up again by the
    /// next worker of the same index, summed over the workers by the
    /// supervisor; a line torn by a concurrent rewrite is not read as a
    /// count.
    #[test]
    fn replies_files_count_per_topic_across_restarts_and_workers() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut w0 = Replies::open(&dir.path().join("replies-0")).unwrap();
        for _ in 0..9 {
            w0.add(&a);
        }
        w0.add(&b);
        drop(w0);
        // Restarted: goes on from 9 and 1.
        let mut w0 = Replies::open(&dir.path().join("replies-0")).unwrap();
        w0.add(&a);
        let mut w1 = Replies::open(&dir.path().join("replies-1")).unwrap();
        w1.add(&b);
        let board = ResidentBoard::new(["a", "b"]);
        count_replies(dir.path(), &board);
        let figures = board.snapshot();
        assert_eq!((figures["a"].jobs, figures["b"].jobs), (10, 2));
        // 19 -> 20 torn after its first digit reads "29": skipped.
        assert_eq!(parse_replies("a\t29\t19\nb\t3\t3\n"), [("b", 3)]);
        assert_eq!(parse_replies("a\t1"), []);
        // A board never goes back.
        board.jobs("a", 4);
        assert_eq!(board.snapshot()["a"].jobs, 10);
    }
}
