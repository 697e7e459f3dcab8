//! Topic limits (rate, max running), enforced by the claim script for every
//! worker: on a single Redis and on a 3-master cluster, across two workers
//! with their own connections, with the safety nets (idle check, max sleep)
//! at their defaults, so a missing wake-up would stall the test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::raw::{self, Wait};
use punctual::{Job, Limited, Limits, Outcome, Queue, Rate, Worker, WorkerConfig};
use punctual_testkit::{eventually, RedisCluster, RedisServer};
use tokio_util::sync::CancellationToken;

use crate::util::{part, LONG_LEASE};
use crate::worker::{spawn_scheduler, total_live};

/// Enqueues `n` jobs due now, in batches.
async fn enqueue_now(q: &Queue, topic: &str, n: usize) {
    let jobs: Vec<Job> = (0..n).map(|i| Job::new(format!("{i}"))).collect();
    for chunk in jobs.chunks(1000) {
        q.enqueue_batch(topic, chunk.to_vec()).await.unwrap();
    }
}

/// Runs two workers (each with its own connection, as on two hosts) on
/// `topic` until every job is acked; `each` runs inside the handler.
pub(crate) async fn two_workers<F, Fut>(queues: [Queue; 2], topic: &str, n: usize, each: F)
where
    F: Fn(punctual::Delivery) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&queues[0], &[topic], &stop);
    let handled = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for q in &queues {
        let (each, handled) = (each.clone(), handled.clone());
        let w = Worker::new(q.clone(), WorkerConfig::default().concurrency(8)).handle(
            topic,
            move |d| {
                let (each, handled) = (each.clone(), handled.clone());
                async move {
                    each(d).await;
                    handled.fetch_add(1, Ordering::SeqCst);
                    Outcome::Done
                }
            },
        );
        workers.push(tokio::spawn(w.run(stop.clone().cancelled_owned())));
    }
    let q = queues[0].clone();
    eventually(
        Duration::from_secs(25),
        "every job handled and acked",
        || {
            let (q, handled) = (q.clone(), handled.clone());
            async move { handled.load(Ordering::SeqCst) >= n && total_live(&q, topic).await == 0 }
        },
    )
    .await;
    stop.cancel();
    for w in workers {
        w.await.unwrap().unwrap();
    }
    sched.await.unwrap();
    // Nothing lost, nothing handled twice (no lease ran out in these tests).
    assert_eq!(handled.load(Ordering::SeqCst), n);
}

async fn max_running_holds_across_two_workers(queues: [Queue; 2]) {
    let q = queues[0].clone();
    let (topic, n, limit) = ("capped", 80, 3);
    q.set_limits(topic, &Limits::default().max_running(limit))
        .await
        .unwrap();
    enqueue_now(&q, topic, n).await;
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (n2, m2) = (now.clone(), most.clone());
    two_workers(queues, topic, n, move |_| {
        let (now, most) = (n2.clone(), m2.clone());
        async move {
            let running = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(running, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(15)).await;
            now.fetch_sub(1, Ordering::SeqCst);
        }
    })
    .await;
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= limit as usize,
        "{most} handlers ran at once, limit {limit}"
    );
    // The limit was reached (16 slots over two workers, 80 jobs waiting).
    assert!(most >= 2, "only {most} ran at once");
}

async fn rate_holds_across_two_workers(queues: [Queue; 2]) {
    let q = queues[0].clone();
    let (topic, n) = ("paced", 60);
    let (rate, burst) = (50.0, 5);
    q.set_limits(
        topic,
        &Limits::default().rate("50/s".parse().unwrap()).burst(burst),
    )
    .await
    .unwrap();
    enqueue_now(&q, topic, n).await;
    let starts: Arc<Mutex<Vec<i64>>> = Arc::default();
    let s2 = starts.clone();
    two_workers(queues, topic, n, move |d| {
        // Redis's clock at the claim, the one the bucket uses.
        s2.lock().unwrap().push(d.claimed_us / 1000);
        async {}
    })
    .await;
    let mut t = starts.lock().unwrap().clone();
    t.sort();
    assert_eq!(t.len(), n);
    assert_bucket(&t, burst as f64, rate);
    // 60 jobs at 50/s after a burst of 5 take about 1.1 s.
    assert!(t[n - 1] - t[0] >= 1000, "{} ms", t[n - 1] - t[0]);
}

/// In every window [t_i, t_j] of the sorted claim times `t` (ms), at most
/// burst + rate * window claims.
pub(crate) fn assert_bucket(t: &[i64], burst: f64, rate: f64) {
    for i in 0..t.len() {
        for j in i..t.len() {
            let window_s = (t[j] - t[i]) as f64 / 1000.0;
            let allowed = burst + rate * window_s + 1e-6;
            let claims = (j - i + 1) as f64;
            assert!(
                claims <= allowed,
                "{claims} claims within {window_s} s: more than {allowed}"
            );
        }
    }
}

async fn limited_jobs_wait_in_ready_visibly(q: Queue) {
    let t = "visible";
    q.set_limits(t, &Limits::default().max_running(1))
        .await
        .unwrap();
    enqueue_now(&q, t, 5).await;
    let first = raw::claim_with_wait(&q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(first.jobs.len(), 1);
    assert_eq!(first.wait, Some(Wait::UntilRunningEnds));
    let second = raw::claim_with_wait(&q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap();
    assert!(second.jobs.is_empty());
    assert_eq!(second.wait, Some(Wait::UntilRunningEnds));
    let s = q.stats(t).await.unwrap();
    assert_eq!((s.ready, s.running), (4, 1));
    assert_eq!(s.limited, Some(Limited::MaxRunning));
    assert_eq!(s.limits.max_running, Some(1));
    // Acking frees the slot: the next claim gets one.
    raw::ack(&q, &part(t), &[first.jobs[0].lease()])
        .await
        .unwrap();
    assert_eq!(q.stats(t).await.unwrap().limited, None);
    let third = raw::claim_with_wait(&q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(third.jobs.len(), 1);

    // A rate of one an hour: one token (the burst), then a wait of about
    // an hour, and stats says the rate holds the rest back.
    let r = "hourly";
    q.set_limits(r, &Limits::default().rate("1/h".parse().unwrap()))
        .await
        .unwrap();
    enqueue_now(&q, r, 3).await;
    let got = raw::claim_with_wait(&q, &part(r), 10, LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(got.jobs.len(), 1);
    let again = raw::claim_with_wait(&q, &part(r), 10, LONG_LEASE)
        .await
        .unwrap();
    assert!(again.jobs.is_empty());
    match again.wait {
        Some(Wait::For(d)) => assert!(
            d > Duration::from_secs(3500) && d <= Duration::from_secs(3600),
            "{d:?}"
        ),
        other => panic!("expected a wait for the next token, got {other:?}"),
    }
    let s = q.stats(r).await.unwrap();
    assert_eq!((s.ready, s.running), (2, 1));
    assert_eq!(s.limited, Some(Limited::Rate));
    assert_eq!(s.limits.rate, Some("1/h".parse::<Rate>().unwrap()));
    // Removing the limits lets the rest through at once.
    q.set_limits(r, &Limits::default()).await.unwrap();
    let rest = raw::claim_with_wait(&q, &part(r), 10, LONG_LEASE)
        .await
        .unwrap();
    assert_eq!((rest.jobs.len(), rest.wait), (2, None));
    assert_eq!(q.stats(r).await.unwrap().limited, None);
}

async fn partitions_share_the_limits(url: &str) {
    let q = Queue::connect(url.to_string()).await.unwrap();
    q.set_partitions("wide", 3).await.unwrap();
    let l = Limits::default()
        .rate("100/s".parse().unwrap())
        .burst(10)
        .max_running(7);
    q.set_limits("wide", &l).await.unwrap();
    for p in q.partition_names("wide").await.unwrap() {
        let meta = format!("punctual:{{{p}}}:meta");
        let (rate, burst, mr): (String, String, String) = raw_cmd(
            url,
            redis::cmd("HMGET")
                .arg(&meta)
                .arg("rate")
                .arg("burst")
                .arg("max_running"),
        )
        .await;
        assert_eq!(
            (rate.as_str(), burst.as_str(), mr.as_str()),
            ("34/1000", "4", "3")
        );
    }
    // The shares add up to at least what was asked, within the rounding.
    let got = q.limits("wide").await.unwrap();
    assert_eq!(got.rate.unwrap().n, 102);
    assert_eq!((got.burst, got.max_running), (Some(12), Some(9)));
    assert_eq!(q.stats("wide").await.unwrap().limits, got);
    q.set_limits("wide", &Limits::default()).await.unwrap();
    assert!(q.limits("wide").await.unwrap().is_none());
}

/// A raw command on the server or cluster at `url` (seed URLs joined by
/// commas for a cluster).
async fn raw_cmd<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> T {
    if url.contains(',') {
        let seeds: Vec<&str> = url.split(',').collect();
        let client = redis::cluster::ClusterClient::new(seeds).unwrap();
        let mut c = client.get_async_connection().await.unwrap();
        cmd.query_async(&mut c).await.unwrap()
    } else {
        let client = redis::Client::open(url).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        cmd.query_async(&mut c).await.unwrap()
    }
}

pub(crate) async fn two_queues(url: &str) -> [Queue; 2] {
    [
        Queue::connect(url.to_string()).await.unwrap(),
        Queue::connect(url.to_string()).await.unwrap(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_running_is_never_exceeded_by_two_workers() {
    let s = RedisServer::start();
    max_running_holds_across_two_workers(two_queues(&s.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_running_is_never_exceeded_by_two_workers_on_a_cluster() {
    let c = RedisCluster::start();
    max_running_holds_across_two_workers(two_queues(&c.seed_urls()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_is_never_exceeded_by_two_workers_and_every_job_runs() {
    let s = RedisServer::start();
    rate_holds_across_two_workers(two_queues(&s.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_is_never_exceeded_by_two_workers_on_a_cluster() {
    let c = RedisCluster::start();
    rate_holds_across_two_workers(two_queues(&c.seed_urls()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_topic_keeps_its_jobs_in_ready_and_stats_says_why() {
    let s = RedisServer::start();
    limited_jobs_wait_in_ready_visibly(Queue::connect(s.url()).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_topic_keeps_its_jobs_in_ready_on_a_cluster() {
    let c = RedisCluster::start();
    limited_jobs_wait_in_ready_visibly(Queue::connect(c.seed_urls()).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_get_a_share_of_the_limits() {
    let s = RedisServer::start();
    partitions_share_the_limits(&s.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_get_a_share_of_the_limits_on_a_cluster() {
    let c = RedisCluster::start();
    partitions_share_the_limits(&c.seed_urls()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_are_refused_and_change_nothing() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    q.set_limits("t", &Limits::default().max_running(4))
        .await
        .unwrap();
    for bad in [
        Limits::default().max_running(0),
        Limits::default().burst(3),
        Limits::default()
            .rate(Rate {
                n: 0,
                ..Rate::new(1, Duration::from_secs(1)).unwrap()
            })
            .max_running(9),
    ] {
        let e = q.set_limits("t", &bad).await.unwrap_err();
        assert_eq!(e.kind(), punctual::ErrorKind::InvalidInput, "{bad:?}");
    }
    assert_eq!(
        q.limits("t").await.unwrap(),
        Limits::default().max_running(4)
    );
    assert!(q
        .set_limits("a{b}", &Limits::default().max_running(1))
        .await
        .is_err());
}
