//! Job metrics from worker processes to the supervisor: each worker sends
//! datagrams of tab-separated lines (topic, lateness µs, duration µs,
//! outcome) to a Unix socket the supervisor owns; the supervisor records
//! them as Prometheus histograms. Lost datagrams only lose samples.

use std::path::{Path, PathBuf};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::UnixDatagram;
use tokio::sync::mpsc;

/// One finished handler run.
#[derive(Debug, Clone)]
pub struct JobRecord {
    pub topic: String,
    pub lateness: Duration,
    pub duration: Duration,
    pub outcome: &'static str,
}

/// The worker's side: a channel to a task that batches records into
/// datagrams every 100 ms.
#[derive(Debug, Clone)]
pub struct MetricsSender {
    tx: mpsc::UnboundedSender<JobRecord>,
}

impl MetricsSender {
    /// Starts the sending task for the socket at `path`.
    pub fn start(path: PathBuf) -> std::io::Result<MetricsSender> {
        let sock = UnixDatagram::unbound()?;
        let (tx, mut rx) = mpsc::unbounded_channel::<JobRecord>();
        tokio::spawn(async move {
            let mut buf = String::new();
            loop {
                let Some(first) = rx.recv().await else { return };
                push_line(&mut buf, &first);
                tokio::time::sleep(Duration::from_millis(100)).await;
                while let Ok(r) = rx.try_recv() {
                    push_line(&mut buf, &r);
                    if buf.len() > 32 * 1024 {
                        let _ = sock.send_to(buf.as_bytes(), &path).await;
                        buf.clear();
                    }
                }
                if !buf.is_empty() {
                    let _ = sock.send_to(buf.as_bytes(), &path).await;
                    buf.clear();
                }
            }
        });
        Ok(MetricsSender { tx })
    }

    /// Queues a record (never blocks).
    pub fn send(&self, r: JobRecord) {
        let _ = self.tx.send(r);
    }
}

fn push_line(buf: &mut String, r: &JobRecord) {
    use std::fmt::Write;
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
pub fn install_recorder() -> anyhow::Result<PrometheusHandle> {
    let buckets = [
        0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)?
        .install_recorder()?;
    Ok(handle)
}

/// The supervisor's side: reads datagrams and records histograms.
pub fn receive(path: &Path) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let sock = UnixDatagram::bind(path)?;
    Ok(tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let Ok(n) = sock.recv(&mut buf).await else {
                return;
            };
            let text = String::from_utf8_lossy(&buf[..n]);
            for line in text.lines() {
                let mut f = line.split('\t');
                let (Some(topic), Some(lat), Some(dur), Some(outcome)) =
                    (f.next(), f.next(), f.next(), f.next())
                else {
                    continue;
                };
                let (Ok(lat), Ok(dur)) = (lat.parse::<u64>(), dur.parse::<u64>()) else {
                    continue;
                };
                let topic = topic.to_string();
                metrics::histogram!("punctual_lateness_seconds", "topic" => topic.clone())
                    .record(lat as f64 / 1e6);
                metrics::histogram!("punctual_handler_duration_seconds", "topic" => topic.clone(), "outcome" => outcome.to_string())
                    .record(dur as f64 / 1e6);
                metrics::counter!("punctual_handler_runs_total", "topic" => topic, "outcome" => outcome.to_string()).increment(1);
            }
        }
    }))
}
