//! Regressions of the worker and scheduler runtime found by the review of
//! issue 9, each against a real redis-server: the concurrency limit, settle
//! calls that must not wait behind each other, and leases that must be
//! reclaimed on time with the default safety nets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use punctual::{Job, Outcome, Queue, Worker, WorkerConfig};
use punctual_testkit::RedisServer;
use tokio_util::sync::CancellationToken;

use crate::util::wait_until;

/// Counts the handlers running at once and remembers the most seen.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
    done: AtomicUsize,
}

impl Gauge {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

// ---- 1. the concurrency limit ----------------------------------------------

/// Runs `jobs` jobs with a worker of `concurrency` slots and the given claim
/// batch; returns the most handlers seen running at once.
async fn most_at_once(q: &Queue, topic: &str, concurrency: usize, batch: usize) -> usize {
    let jobs = 12 * concurrency + 6;
    q.enqueue_batch(topic, (0..jobs).map(|i| Job::new(format!("{i}"))).collect())
        .await
        .unwrap();
    let gauge = Arc::new(Gauge::default());
    let g = gauge.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(concurrency)
            .claim_batch(batch),
    )
    .handle(topic, move |_| {
        let g = g.clone();
        async move {
            g.enter();
            // Hold the slot until the limit was reached once (so that the
            // test sees it is reachable), then a little longer, so that runs
            // overlap with the next claims.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while g.max.load(Ordering::SeqCst) < concurrency
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
            g.leave();
            Outcome::Done
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    wait_until(Duration::from_secs(60), "every job to run", async || {
        gauge.done.load(Ordering::SeqCst) == jobs
    })
    .await;
    stop.cancel();
    let stopped = w.await.unwrap().unwrap();
    assert_eq!(stopped.abandoned, 0);
    gauge.max.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_never_run_more_than_concurrency_at_once_for_any_claim_batch() {
    let server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    let mut seen = Vec::new();
    for concurrency in [1, 2, 3, 5] {
        for batch in [0, 1, 2, 3, 4, 5, 8] {
            let topic = format!("c{concurrency}b{batch}");
            let max = most_at_once(&q, &topic, concurrency, batch).await;
            seen.push((concurrency, batch, max));
        }
    }
    let over: Vec<_> = seen.iter().filter(|(c, _, m)| m > c).collect();
    assert!(
        over.is_empty(),
        "(concurrency, claim_batch, most at once) over the limit: {over:?}"
    );
    let under: Vec<_> = seen.iter().filter(|(c, _, m)| m < c).collect();
    assert!(
        under.is_empty(),
        "(concurrency, claim_batch, most at once) never reached the limit: {under:?}"
    );
}
