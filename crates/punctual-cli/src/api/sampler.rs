//! The numbers behind the dashboard's charts. Every `interval` (5 s by
//! default) the sampler reads each known topic's stats (sizes and counters,
//! from Redis, so they cover every host) and keeps the last hour in memory.
//! Inside `punctual serve` it also reads this process's
//! `punctual_lateness_seconds` histogram, which the local workers feed;
//! standalone `punctual api` has no lateness source and says so.
//!
//! Nothing is persisted: a restarted server starts with empty charts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::stream::{self, StreamExt};
use metrics_exporter_prometheus::PrometheusHandle;
use punctual::Queue;
use serde::Serialize;

/// How much history is kept.
pub(crate) const WINDOW: Duration = Duration::from_secs(3600);

/// Most topics sampled (the first ones, sorted by name).
const MAX_TOPICS: usize = 500;

/// One reading of one topic. Counters are cumulative; the series turns
/// them into rates.
#[derive(Debug, Clone)]
struct Point {
    t_ms: i64,
    pool: u64,
    ready: u64,
    running: u64,
    dead: u64,
    oldest_ready_ms: Option<i64>,
    enqueued: u64,
    done: u64,
    died: u64,
    retried: u64,
    lateness: Option<Histogram>,
}

/// A cumulative Prometheus histogram: (upper bound in seconds, count ≤ it).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    pub count: f64,
    pub sum: f64,
    pub buckets: Vec<(f64, f64)>,
}

/// The in-memory history of every topic.
#[derive(Debug)]
pub(crate) struct Sampler {
    interval: Duration,
    capacity: usize,
    prometheus: Option<PrometheusHandle>,
    data: Mutex<HashMap<String, VecDeque<Point>>>,
}

/// One interval of the series, as the API returns it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SeriesPoint {
    /// End of the interval, epoch ms (the API server's clock).
    pub t_ms: i64,
    pub pool: u64,
    pub ready: u64,
    pub running: u64,
    pub dead: u64,
    /// How long the oldest ready job had waited for a worker, ms.
    pub oldest_ready_ms: Option<i64>,
    /// Rates over the interval, jobs per second.
    pub enqueued_per_s: f64,
    pub done_per_s: f64,
    pub dead_per_s: f64,
    pub retried_per_s: f64,
    /// Handler runs measured over the interval (serve only).
    pub lateness_runs: Option<u64>,
    /// Mean lateness of those runs, ms.
    pub lateness_mean_ms: Option<f64>,
    /// 50th and 99th percentile lateness, ms, interpolated within the
    /// histogram's buckets (as Prometheus' histogram_quantile does).
    pub lateness_p50_ms: Option<f64>,
    pub lateness_p99_ms: Option<f64>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Sampler {
    /// A sampler that reads every `interval`; `prometheus` is the lateness
    /// source (the recorder of `punctual serve`), if any.
    pub(crate) fn new(interval: Duration, prometheus: Option<PrometheusHandle>) -> Sampler {
        let interval = interval.max(Duration::from_millis(100));
        let capacity = (WINDOW.as_millis() / interval.as_millis()).max(2) as usize + 1;
        Sampler {
            interval,
            capacity,
            prometheus,
            data: Mutex::new(HashMap::new()),
        }
    }

    /// The sampling interval.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether handler lateness is measured here.
    pub(crate) fn has_lateness(&self) -> bool {
        self.prometheus.is_some()
    }

    /// Samples forever (until the task is dropped).
    pub(crate) async fn run(self: std::sync::Arc<Self>, queue: Queue) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sample(&queue).await;
        }
    }

    /// Takes one reading of every known topic.
    pub(crate) async fn sample(&self, queue: &Queue) {
        let topics = match queue.topics().await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(error = %e, "sampler: cannot list topics");
                return;
            }
        };
        let lateness = self
            .prometheus
            .as_ref()
            .map(|h| parse_lateness(&h.render()));
        let t_ms = now_ms();
        let readings: Vec<_> = stream::iter(topics.into_iter().take(MAX_TOPICS))
            .map(|t| async move {
                let s = queue.stats(&t).await;
                (t, s)
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let mut data = self.data.lock().unwrap();
        for (topic, stats) in readings {
            let Ok(s) = stats else { continue };
            let c = |n: &str| s.counters.get(n).copied().unwrap_or(0);
            let point = Point {
                t_ms,
                pool: s.pool,
                ready: s.ready,
                running: s.running,
                dead: s.dead,
                oldest_ready_ms: s.oldest_ready_ms,
                enqueued: c("enqueued"),
                done: c("done"),
                died: c("dead"),
                retried: c("retried"),
                lateness: lateness
                    .as_ref()
                    .map(|l| l.get(&topic).cloned().unwrap_or_default()),
            };
            let ring = data.entry(topic).or_default();
            ring.push_back(point);
            while ring.len() > self.capacity {
                ring.pop_front();
            }
        }
    }

    /// The series of a topic: one point per interval, oldest first (empty
    /// until two readings exist).
    pub(crate) fn series(&self, topic: &str) -> Vec<SeriesPoint> {
        let data = self.data.lock().unwrap();
        let Some(ring) = data.get(topic) else {
            return Vec::new();
        };
        ring.iter()
            .zip(ring.iter().skip(1))
            .map(|(a, b)| interval_point(a, b))
            .collect()
    }
}

fn interval_point(a: &Point, b: &Point) -> SeriesPoint {
    let secs = ((b.t_ms - a.t_ms) as f64 / 1000.0).max(0.001);
    // A counter that went down was reset (the topic was deleted and
    // recreated): count from zero.
    let rate = |x: u64, y: u64| {
        let d = if y >= x { y - x } else { y };
        d as f64 / secs
    };
    let mut p = SeriesPoint {
        t_ms: b.t_ms,
        pool: b.pool,
        ready: b.ready,
        running: b.running,
        dead: b.dead,
        oldest_ready_ms: b.oldest_ready_ms,
        enqueued_per_s: rate(a.enqueued, b.enqueued),
        done_per_s: rate(a.done, b.done),
        dead_per_s: rate(a.died, b.died),
        retried_per_s: rate(a.retried, b.retried),
        lateness_runs: None,
        lateness_mean_ms: None,
        lateness_p50_ms: None,
        lateness_p99_ms: None,
    };
    if let (Some(ha), Some(hb)) = (&a.lateness, &b.lateness) {
        let d = hb.minus(ha);
        p.lateness_runs = Some(d.count.round() as u64);
        if d.count > 0.0 {
            p.lateness_mean_ms = Some(d.sum / d.count * 1000.0);
            p.lateness_p50_ms = d.quantile(0.5).map(|s| s * 1000.0);
            p.lateness_p99_ms = d.quantile(0.99).map(|s| s * 1000.0);
        }
    }
    p
}

impl Histogram {
    /// `self - earlier`, bucket by bucket (what happened in between). If
    /// the histogram was reset, `self` alone.
    fn minus(&self, earlier: &Histogram) -> Histogram {
        if self.count < earlier.count || self.buckets.len() != earlier.buckets.len() {
            return self.clone();
        }
        Histogram {
            count: self.count - earlier.count,
            sum: self.sum - earlier.sum,
            buckets: self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .map(|((le, n), (_, m))| (*le, n - m))
                .collect(),
        }
    }

    /// The q-quantile, interpolated linearly within its bucket; the top
    /// finite bound when it falls in the +Inf bucket.
    pub(crate) fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last().map(|b| b.1).unwrap_or(self.count);
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut prev_le = 0.0;
        let mut prev_n = 0.0;
        for &(le, n) in &self.buckets {
            if n >= rank {
                if le.is_infinite() {
                    return Some(prev_le);
                }
                let in_bucket = n - prev_n;
                if in_bucket <= 0.0 {
                    return Some(le);
                }
                return Some(prev_le + (le - prev_le) * (rank - prev_n) / in_bucket);
            }
            prev_le = le;
            prev_n = n;
        }
        Some(prev_le)
    }
}

/// Reads `punctual_lateness_seconds` per topic from Prometheus text.
pub(crate) fn parse_lateness(text: &str) -> BTreeMap<String, Histogram> {
    const NAME: &str = "punctual_lateness_seconds";
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(NAME) else {
            continue;
        };
        let (kind, rest) = match rest.find('{') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => continue,
        };
        let Some(close) = rest.rfind('}') else {
            continue;
        };
        let labels = parse_labels(&rest[1..close]);
        let Ok(value) = rest[close + 1..].trim().parse::<f64>() else {
            continue;
        };
        let Some(topic) = labels.get("topic") else {
            continue;
        };
        let h = out.entry(topic.clone()).or_default();
        match kind {
            "_bucket" => {
                let le = match labels.get("le").map(String::as_str) {
                    Some("+Inf") => f64::INFINITY,
                    Some(s) => match s.parse() {
                        Ok(v) => v,
                        Err(_) => continue,
                    },
                    None => continue,
                };
                h.buckets.push((le, value));
            }
            "_sum" => h.sum = value,
            "_count" => h.count = value,
            _ => {}
        }
    }
    for h in out.values_mut() {
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if h.buckets.last().is_none_or(|b| b.0.is_finite()) {
            h.buckets.push((f64::INFINITY, h.count));
        }
    }
    out
}

/// `a="x",b="y\"z"` into a map.
fn parse_labels(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(o) => value.push(o),
                    None => break,
                },
                '"' => break,
                o => value.push(o),
            }
        }
        out.insert(name.trim().to_string(), value);
        if chars.next() != Some(',') {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE punctual_lateness_seconds histogram
punctual_lateness_seconds_bucket{topic="orders",le="0.001"} 50
punctual_lateness_seconds_bucket{topic="orders",le="0.002"} 90
punctual_lateness_seconds_bucket{topic="orders",le="0.005"} 100
punctual_lateness_seconds_bucket{topic="orders",le="+Inf"} 100
punctual_lateness_seconds_sum{topic="orders"} 0.1
punctual_lateness_seconds_count{topic="orders"} 100
punctual_lateness_seconds_bucket{le="0.001",topic="a\"b"} 1
punctual_lateness_seconds_count{topic="a\"b"} 1
punctual_handler_duration_seconds_count{topic="orders",outcome="done"} 100
"#;

    #[test]
    fn lateness_histograms_are_read_per_topic() {
        let m = parse_lateness(TEXT);
        let h = &m["orders"];
        assert_eq!(h.count, 100.0);
        assert_eq!(h.buckets.len(), 4);
        // Half the runs are under 1 ms: the median is the bucket's bound.
        assert!((h.quantile(0.5).unwrap() - 0.001).abs() < 1e-9);
        // p99: the 99th run is in (2 ms, 5 ms], 9/10 of the way.
        assert!((h.quantile(0.99).unwrap() - 0.0047).abs() < 1e-9);
        assert_eq!(m["a\"b"].buckets[0], (0.001, 1.0));
    }

    #[test]
    fn series_are_rates_over_each_interval() {
        let s = Sampler::new(Duration::from_secs(5), None);
        let p = |t_ms, done| Point {
            t_ms,
            pool: 1,
            ready: 2,
            running: 3,
            dead: 4,
            oldest_ready_ms: None,
            enqueued: 0,
            done,
            died: 0,
            retried: 0,
            lateness: None,
        };
        s.data
            .lock()
            .unwrap()
            .insert("t".into(), [p(0, 0), p(5000, 50), p(10_000, 60)].into());
        let series = s.series("t");
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].done_per_s, 10.0);
        assert_eq!(series[1].done_per_s, 2.0);
        assert!(s.series("other").is_empty());
    }

    #[test]
    fn the_ring_holds_one_hour() {
        let s = Sampler::new(Duration::from_secs(5), None);
        assert_eq!(s.capacity, 721);
    }
}
