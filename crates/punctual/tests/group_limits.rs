//! Per-group limits (rate, max running), enforced by the claim script for
//! every worker: on a single Redis and on a 3-master cluster, across two
//! workers with their own connections, with the safety nets at their
//! defaults (a missing wake-up would stall a test). A group held back by its
//! own limit never holds the other groups back, and the running count of
//! each group is exact on every path out of running.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::raw::{self, FailKind, Wait};
use punctual::{EnqueueOptions, GroupHold, Job, Limits, Outcome, Queue, Worker, WorkerConfig};
use punctual_testkit::{eventually, RedisCluster, RedisServer};
use tokio_util::sync::CancellationToken;

use crate::limits::{assert_bucket, two_queues, two_workers};
use crate::util::{part, LONG_LEASE, TICK_ALL};
use crate::worker::total_live;

/// Enqueues `n` jobs due now in `group`, ids `<prefix><i>`.
async fn enqueue_group(q: &Queue, topic: &str, group: &str, prefix: &str, n: usize) {
    let jobs: Vec<Job> = (0..n)
        .map(|i| Job::new("x").id(format!("{prefix}{i:04}")).group(group))
        .collect();
    for chunk in jobs.chunks(1000) {
        q.enqueue_batch(topic, chunk.to_vec()).await.unwrap();
    }
}

/// Each group's running count as the topic keeps it.
async fn running(q: &Queue, topic: &str) -> HashMap<String, u64> {
    q.groups(topic)
        .await
        .unwrap()
        .into_iter()
        .filter(|g| g.running > 0)
        .map(|g| (g.group, g.running))
        .collect()
}

fn ids(got: &[punctual::Delivery]) -> Vec<&str> {
    got.iter().map(|d| d.id.as_str()).collect()
}

async fn group_max_running_holds_across_two_workers(queues: [Queue; 2]) {
    let q = queues[0].clone();
    let (topic, per, limit) = ("gcapped", 30, 2);
    q.set_group_limits(topic, None, &Limits::default().max_running(limit))
        .await
        .unwrap();
    for g in ["a", "b", "c"] {
        enqueue_group(&q, topic, g, g, per).await;
    }
    // Handlers running now and the most at once, per group.
    let now: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let most: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let (n2, m2) = (now.clone(), most.clone());
    two_workers(queues, topic, 3 * per, move |d| {
        let (now, most) = (n2.clone(), m2.clone());
        async move {
            let g = d.group.clone().unwrap_or_default();
            {
                let mut now = now.lock().unwrap();
                let c = now.entry(g.clone()).or_default();
                *c += 1;
                let mut most = most.lock().unwrap();
                let m = most.entry(g.clone()).or_default();
                *m = (*m).max(*c);
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
            *now.lock().unwrap().get_mut(&g).unwrap() -= 1;
        }
    })
    .await;
    let most = most.lock().unwrap().clone();
    assert_eq!(most.len(), 3, "{most:?}");
    for (g, m) in &most {
        assert!(
            *m <= limit as usize,
            "group {g}: {m} ran at once, limit {limit}"
        );
    }
    // The limit was reached (16 slots, 3 groups of 30 waiting).
    assert!(most.values().any(|m| *m == limit as usize), "{most:?}");
    assert!(running(&q, topic).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_max_running_is_never_exceeded_by_two_workers() {
    let s = RedisServer::start();
    group_max_running_holds_across_two_workers(two_queues(&s.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_max_running_is_never_exceeded_by_two_workers_on_a_cluster() {
    let c = RedisCluster::start();
    group_max_running_holds_across_two_workers(two_queues(&c.seed_urls()).await).await;
}

async fn group_rate_holds_across_two_workers(queues: [Queue; 2]) {
    let q = queues[0].clone();
    let (topic, n, free) = ("gpaced", 30, 60);
    let (rate, burst) = (20.0, 3);
    // Every group 20/s with a burst of 3, but "free" has no limit.
    q.set_group_limits(
        topic,
        None,
        &Limits::default().rate("20/s".parse().unwrap()).burst(burst),
    )
    .await
    .unwrap();
    q.set_group_limits(topic, Some("free"), &Limits::default())
        .await
        .unwrap();
    enqueue_group(&q, topic, "paced", "p", n).await;
    enqueue_group(&q, topic, "free", "f", free).await;
    let starts: Arc<Mutex<HashMap<String, Vec<i64>>>> = Arc::default();
    let s2 = starts.clone();
    two_workers(queues, topic, n + free, move |d| {
        // Redis's clock at the claim, the one the buckets use.
        let g = d.group.clone().unwrap_or_default();
        s2.lock()
            .unwrap()
            .entry(g)
            .or_default()
            .push(d.claimed_us / 1000);
        async {}
    })
    .await;
    let starts = starts.lock().unwrap().clone();
    let mut t = starts["paced"].clone();
    t.sort();
    assert_eq!(t.len(), n);
    assert_bucket(&t, burst as f64, rate);
    // 30 jobs at 20/s after a burst of 3 take about 1.35 s.
    assert!(t[n - 1] - t[0] >= 1300, "{} ms", t[n - 1] - t[0]);
    // The unlimited group went on meanwhile: all of it was claimed before
    // the paced group's last claim.
    let f = &starts["free"];
    assert_eq!(f.len(), free);
    assert!(
        f.iter().max().unwrap() < &t[n - 1],
        "free {f:?}, paced {t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_rate_is_never_exceeded_by_two_workers() {
    let s = RedisServer::start();
    group_rate_holds_across_two_workers(two_queues(&s.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_rate_is_never_exceeded_by_two_workers_on_a_cluster() {
    let c = RedisCluster::start();
    group_rate_holds_across_two_workers(two_queues(&c.seed_urls()).await).await;
}

/// A group at its max_running: the claims serve the other groups in full,
/// never empty, and report the wait only once they are all that is left.
async fn a_held_group_does_not_hold_others_back(q: Queue) {
    let t = "gheld";
    let p = part(t);
    q.set_group_limits(t, Some("slow"), &Limits::default().max_running(1))
        .await
        .unwrap();
    enqueue_group(&q, t, "slow", "s", 20).await;
    enqueue_group(&q, t, "fast", "f", 100).await;
    let first = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(first.jobs.len(), 10, "{:?}", ids(&first.jobs));
    assert_eq!(first.wait, None);
    let slow: Vec<_> = first
        .jobs
        .iter()
        .filter(|d| d.id.starts_with('s'))
        .collect();
    assert_eq!(slow.len(), 1, "{:?}", ids(&first.jobs));
    let mut fast = 9;
    while fast < 100 {
        let got = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
        assert!(!got.jobs.is_empty(), "empty while the fast group has work");
        assert!(
            got.jobs.iter().all(|d| d.id.starts_with('f')),
            "{:?}",
            ids(&got.jobs)
        );
        fast += got.jobs.len();
        if fast < 100 {
            assert_eq!(got.jobs.len(), 10);
        }
    }
    assert_eq!(fast, 100);
    assert_eq!(
        running(&q, t).await,
        HashMap::from([("slow".into(), 1), ("fast".into(), 100)])
    );
    // Only the held group has ready jobs left: nothing, and wait for a
    // running job to end.
    let got = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert!(got.jobs.is_empty(), "{:?}", ids(&got.jobs));
    assert_eq!(got.wait, Some(Wait::UntilRunningEnds));
    let g = q.groups(t).await.unwrap();
    let held: Vec<_> = g.iter().filter(|g| g.held.is_some()).collect();
    assert_eq!(held.len(), 1, "{g:?}");
    assert_eq!(
        (held[0].group.as_str(), held[0].held),
        ("slow", Some(GroupHold::RunningEnds))
    );
    assert_eq!(held[0].limits.max_running, Some(1));
    // Its job ends: the next one of the group is served.
    assert_eq!(
        raw::ack(&q, &p, &[slow[0].lease()]).await.unwrap(),
        vec![true]
    );
    let got = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(ids(&got.jobs), ["s0001"]);
    assert_eq!(got.wait, Some(Wait::UntilRunningEnds));
}

/// A group whose limit is lowered below its running jobs while it is the
/// next to serve: the claim sets it aside and serves the others in full.
async fn a_lowered_limit_does_not_hold_others_back(q: Queue) {
    let (t, p) = ("glowered", part("glowered"));
    q.set_group_limits(t, None, &Limits::default().max_running(100))
        .await
        .unwrap();
    enqueue_group(&q, t, "a", "a", 5).await;
    enqueue_group(&q, t, "b", "b", 20).await;
    // "a" then "b" served once: both at virtual time 1, "a" next.
    assert_eq!(
        ids(&raw::claim(&q, &p, 1, LONG_LEASE).await.unwrap()),
        ["a0000"]
    );
    assert_eq!(
        ids(&raw::claim(&q, &p, 1, LONG_LEASE).await.unwrap()),
        ["b0000"]
    );
    q.set_group_limits(t, Some("a"), &Limits::default().max_running(1))
        .await
        .unwrap();
    let got = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(got.jobs.len(), 10, "{:?}", ids(&got.jobs));
    assert!(
        got.jobs.iter().all(|d| d.id.starts_with('b')),
        "{:?}",
        ids(&got.jobs)
    );
    assert_eq!(got.wait, None);
}

#[tokio::test]
async fn a_group_over_a_lowered_limit_does_not_hold_the_others_back() {
    let s = RedisServer::start();
    a_lowered_limit_does_not_hold_others_back(Queue::connect(s.url()).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_over_a_lowered_limit_does_not_hold_the_others_back_on_a_cluster() {
    let c = RedisCluster::start();
    a_lowered_limit_does_not_hold_others_back(Queue::connect(c.seed_urls()).await.unwrap()).await;
}

/// claim serves many groups in passes (the lowest 32 and a bound): the
/// result is exactly one job per step, the lowest virtual time first, ties
/// by name: after T jobs, group i (of 100, in name order) has had T / 100
/// jobs, one more when i < T % 100.
#[tokio::test]
async fn many_groups_are_served_exactly_in_turn() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let (t, p) = ("gturns", part("gturns"));
    for g in 0..100 {
        enqueue_group(&q, t, &format!("g{g:03}"), &format!("g{g:03}-"), 5).await;
    }
    let mut served = [0usize; 100];
    let mut total = 0;
    for k in [50, 7, 100, 33, 64, 1, 200, 45] {
        let got = raw::claim(&q, &p, k, LONG_LEASE).await.unwrap();
        assert_eq!(got.len(), k);
        for d in &got {
            served[d.id[1..4].parse::<usize>().unwrap()] += 1;
        }
        total += k;
        let want: Vec<usize> = (0..100)
            .map(|i| total / 100 + usize::from(i < total % 100))
            .collect();
        assert_eq!(served.to_vec(), want, "after {total} jobs");
    }
}

#[tokio::test]
async fn a_group_at_its_max_running_does_not_hold_the_others_back() {
    let s = RedisServer::start();
    a_held_group_does_not_hold_others_back(Queue::connect(s.url()).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_at_its_max_running_does_not_hold_the_others_back_on_a_cluster() {
    let c = RedisCluster::start();
    a_held_group_does_not_hold_others_back(Queue::connect(c.seed_urls()).await.unwrap()).await;
}

#[tokio::test]
async fn a_rate_held_group_reports_the_time_to_its_next_token() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let (t, p) = ("gtoken", part("gtoken"));
    q.set_group_limits(
        t,
        None,
        &Limits::default().rate("2/s".parse().unwrap()).burst(1),
    )
    .await
    .unwrap();
    enqueue_group(&q, t, "a", "a", 3).await;
    let got = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(ids(&got.jobs), ["a0000"]);
    match got.wait {
        Some(Wait::For(d)) => assert!(
            d > Duration::from_millis(400) && d <= Duration::from_millis(500),
            "{d:?}"
        ),
        other => panic!("expected a wait for the next token, got {other:?}"),
    }
    let again = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert!(again.jobs.is_empty());
    assert!(matches!(again.wait, Some(Wait::For(_))), "{:?}", again.wait);
    let g = q.groups(t).await.unwrap();
    assert!(matches!(g[0].held, Some(GroupHold::Until(_))), "{g:?}");
}

/// One worker, a group limited to one running job, three jobs: each
/// following job is claimed when the one before is acked, by the wake-up
/// that ack publishes (the idle check stays at its 30 s default, longer
/// than the test waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_group_slot_wakes_a_waiting_worker() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let t = "gwake";
    q.set_group_limits(t, None, &Limits::default().max_running(1))
        .await
        .unwrap();
    enqueue_group(&q, t, "a", "a", 3).await;
    let stop = CancellationToken::new();
    let done = Arc::new(AtomicUsize::new(0));
    let d2 = done.clone();
    let w = Worker::new(q.clone(), WorkerConfig::default().concurrency(4)).handle(t, move |_| {
        let d = d2.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            d.fetch_add(1, Ordering::SeqCst);
            Outcome::Done
        }
    });
    let run = tokio::spawn(w.run(stop.clone().cancelled_owned()));
    eventually(
        Duration::from_secs(10),
        "three jobs done one after another",
        || {
            let (q, done) = (q.clone(), done.clone());
            async move { done.load(Ordering::SeqCst) == 3 && total_live(&q, t).await == 0 }
        },
    )
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
}

/// Every path out of running takes the job out of its group's count: ack,
/// fail (retry and dead), tick's reclaim, cancel, enqueue with replace; and
/// jobs already running when the first group limit is set are counted.
async fn running_counts_stay_exact(q: Queue) {
    let (t, p) = ("gcount", part("gcount"));
    enqueue_group(&q, t, "a", "a", 6).await;
    enqueue_group(&q, t, "b", "b", 6).await;
    // Claimed before any group limit: counted when the first one is set.
    let early = raw::claim(&q, &p, 4, LONG_LEASE).await.unwrap();
    q.set_group_limits(t, None, &Limits::default().max_running(5))
        .await
        .unwrap();
    assert_eq!(
        running(&q, t).await,
        HashMap::from([("a".into(), 2), ("b".into(), 2)])
    );
    let mut got = raw::claim(&q, &p, 6, LONG_LEASE).await.unwrap();
    got.extend(early);
    assert_eq!(
        running(&q, t).await,
        HashMap::from([("a".into(), 5), ("b".into(), 5)])
    );
    let by = |id: &str| got.iter().find(|d| d.id == id).unwrap().lease();
    // ack
    assert_eq!(
        raw::ack(&q, &p, &[by("a0000"), by("b0000")]).await.unwrap(),
        vec![true, true]
    );
    // fail: a retry at once, a retry later, a permanent failure (dead)
    let now = FailKind::Retry {
        after: Some(Duration::ZERO),
    };
    let later = FailKind::Retry {
        after: Some(Duration::from_secs(60)),
    };
    raw::fail(&q, &p, &by("a0001"), "x", now).await.unwrap();
    raw::fail(&q, &p, &by("b0001"), "x", later).await.unwrap();
    raw::fail(&q, &p, &by("a0002"), "x", FailKind::Permanent)
        .await
        .unwrap();
    assert_eq!(
        running(&q, t).await,
        HashMap::from([("a".into(), 2), ("b".into(), 3)])
    );
    // cancel
    assert!(q.cancel(t, "b0002").await.unwrap().is_some());
    // enqueue with replace, into another group
    let opts = EnqueueOptions::default().replace(true);
    q.enqueue_with(
        t,
        vec![Job::new("y")
            .id("a0003")
            .group("c")
            .delay(Duration::from_secs(60))],
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(
        running(&q, t).await,
        HashMap::from([("a".into(), 1), ("b".into(), 2)])
    );
    // tick's reclaim: the rest, claimed again with a short lease
    let rest: Vec<_> = ["a0004", "b0003", "b0004"]
        .iter()
        .map(|id| by(id))
        .collect();
    let done = raw::ack(&q, &p, &rest).await.unwrap();
    assert_eq!(done, vec![true, true, true]);
    assert!(
        running(&q, t).await.is_empty(),
        "{:?}",
        running(&q, t).await
    );
    let short = raw::claim(&q, &p, 3, Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(short.len(), 3, "{:?}", ids(&short));
    assert_eq!(running(&q, t).await.values().sum::<u64>(), 3);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(raw::tick(&q, &p, &TICK_ALL).await.unwrap().reclaimed, 3);
    assert!(
        running(&q, t).await.is_empty(),
        "{:?}",
        running(&q, t).await
    );
    // Whatever is left runs and is acked: every count back to 0.
    loop {
        let got = raw::claim(&q, &p, 10, LONG_LEASE).await.unwrap();
        if got.is_empty() {
            break;
        }
        let leases: Vec<_> = got.iter().map(|d| d.lease()).collect();
        raw::ack(&q, &p, &leases).await.unwrap();
    }
    assert!(
        running(&q, t).await.is_empty(),
        "{:?}",
        running(&q, t).await
    );
}

#[tokio::test]
async fn group_running_counts_return_to_zero_on_every_path() {
    let s = RedisServer::start();
    running_counts_stay_exact(Queue::connect(s.url()).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_running_counts_return_to_zero_on_every_path_on_a_cluster() {
    let c = RedisCluster::start();
    running_counts_stay_exact(Queue::connect(c.seed_urls()).await.unwrap()).await;
}

#[tokio::test]
async fn group_limits_are_stored_cleared_and_checked() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let t = "gset";
    let every = Limits::default()
        .rate("10/s".parse().unwrap())
        .burst(4)
        .max_running(2);
    q.set_group_limits(t, None, &every).await.unwrap();
    q.set_group_limits(t, Some("vip"), &Limits::default())
        .await
        .unwrap();
    let l = q.group_limits(t).await.unwrap();
    assert_eq!(l.default, every);
    assert!(l.of("vip").is_none());
    assert_eq!(l.of("other"), every);
    assert!(q
        .set_group_limits(t, Some("bad name"), &every)
        .await
        .is_err());
    assert!(q
        .set_group_limits(t, None, &Limits::default().burst(3))
        .await
        .is_err());
    q.clear_group_limits(t, "vip").await.unwrap();
    q.set_group_limits(t, None, &Limits::default())
        .await
        .unwrap();
    assert_eq!(
        q.group_limits(t).await.unwrap(),
        punctual::GroupLimits::default()
    );
    // A partitioned topic: each partition gets its share, rounded up.
    q.set_partitions("gparts", 4).await.unwrap();
    q.set_group_limits("gparts", None, &Limits::default().max_running(6))
        .await
        .unwrap();
    assert_eq!(
        q.group_limits("gparts").await.unwrap().default.max_running,
        Some(8)
    );
}

/// A group held back by its rate sits in `gwait`, not in `groups`; when
/// its last indexed job is cancelled, the index keeps a stale entry. A
/// topic delete must remove that index too: no key of the topic is left.
#[tokio::test]
async fn topic_delete_leaves_no_index_of_a_held_group() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let (t, p) = ("gleak", part("gleak"));
    q.set_group_limits(
        t,
        None,
        &Limits::default().rate("1/h".parse().unwrap()).burst(1),
    )
    .await
    .unwrap();
    enqueue_group(&q, t, "a", "a", 2).await;
    let got = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(ids(&got.jobs), ["a0000"]);
    let again = raw::claim_with_wait(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert!(again.jobs.is_empty());
    let g = q.groups(t).await.unwrap();
    assert!(matches!(g[0].held, Some(GroupHold::Until(_))), "{g:?}");
    q.cancel(t, "a0001").await.unwrap();
    let acked = raw::ack(&q, &p, &[got.jobs[0].lease()]).await.unwrap();
    assert_eq!(acked, [true]);
    q.delete_topic(t).await.unwrap();
    let mut c = redis::Client::open(s.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*{gleak}*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(left.is_empty(), "keys left after topic delete: {left:?}");
}

/// Enqueues one job due now in `group` with the given options.
async fn enqueue_one(q: &Queue, topic: &str, job: Job) {
    let opts = EnqueueOptions::default().replace(true);
    q.enqueue_with(topic, vec![job], &opts).await.unwrap();
}

/// Claims (up to three times) until `id` is delivered; the deliveries.
async fn claim_until(q: &Queue, p: &raw::Partition, id: &str) -> Vec<punctual::Delivery> {
    let mut all = Vec::new();
    for _ in 0..3 {
        let got = raw::claim(q, p, 10, LONG_LEASE).await.unwrap();
        all.extend(got);
        if all.iter().any(|d| d.id == id) {
            break;
        }
    }
    all
}

/// A group at max_running 1 whose first ready job expired before any claim:
/// the claim sends it to dead and serves the next job of the group; the
/// expired one takes no room, and the group is not left held with nothing
/// running (issue 29, item 1).
#[tokio::test]
async fn an_expired_job_does_not_hold_its_group() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let (t, p) = ("gexpired", part("gexpired"));
    q.set_group_limits(t, None, &Limits::default().max_running(1))
        .await
        .unwrap();
    // Due 10 s ago with an expiry of 1 ms: its deadline has passed.
    let past = std::time::SystemTime::now() - Duration::from_secs(10);
    enqueue_one(
        &q,
        t,
        Job::new("x")
            .id("a1")
            .group("a")
            .at(past)
            .expire(Duration::from_millis(1)),
    )
    .await;
    enqueue_one(&q, t, Job::new("x").id("a2").group("a")).await;
    let got = claim_until(&q, &p, "a2").await;
    assert_eq!(ids(&got), ["a2"], "the group's next job is served");
    assert_eq!(
        q.get(t, "a1").await.unwrap().map(|j| j.state),
        Some(punctual::State::Dead)
    );
    assert_eq!(running(&q, t).await, HashMap::from([("a".into(), 1)]));
    assert!(q.check(t).await.unwrap().is_empty());
    // Its job ends: nothing of the group is left held.
    raw::ack(&q, &p, &[got[0].lease()]).await.unwrap();
    let g = q.groups(t).await.unwrap();
    assert!(g.iter().all(|g| g.held.is_none()), "{g:?}");
}

/// A job that moved from group a to group b while ready (a replace) keeps
/// a stale entry in a's index: a claim must not serve it through a, past
/// b's max_running (issue 29, item 3). The same after a cancel and a new
/// enqueue of the id into another group.
#[tokio::test]
async fn a_stale_group_index_entry_does_not_exceed_max_running() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let (t, p) = ("gstale", part("gstale"));
    q.set_group_limits(t, None, &Limits::default().max_running(1))
        .await
        .unwrap();
    enqueue_one(&q, t, Job::new("y").id("y").group("b")).await;
    let y = raw::claim(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(ids(&y), ["y"]);
    // x: pushed in a, then replaced into b (b is at its max_running).
    enqueue_one(&q, t, Job::new("x").id("x").group("a")).await;
    enqueue_one(&q, t, Job::new("x").id("x").group("b")).await;
    // z: pushed in a, cancelled, then pushed again into b.
    enqueue_one(&q, t, Job::new("z").id("z").group("a")).await;
    assert!(q.cancel(t, "z").await.unwrap().is_some());
    enqueue_one(&q, t, Job::new("z").id("z").group("b")).await;
    let got = raw::claim(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert!(
        got.is_empty(),
        "served past b's max_running: {:?}",
        ids(&got)
    );
    assert_eq!(running(&q, t).await, HashMap::from([("b".into(), 1)]));
    // y ends: b's next job runs, one at a time.
    raw::ack(&q, &p, &[y[0].lease()]).await.unwrap();
    let got = raw::claim(&q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(got.len(), 1, "{:?}", ids(&got));
    assert_eq!(running(&q, t).await, HashMap::from([("b".into(), 1)]));
}

/// `check` reports a group held until one of its running jobs ends while
/// fewer than its max_running are running: nothing would release it.
#[tokio::test]
async fn check_reports_a_group_held_with_nothing_running() {
    let s = RedisServer::start();
    let q = Queue::connect(s.url()).await.unwrap();
    let t = "gstuck";
    q.set_group_limits(t, None, &Limits::default().max_running(1))
        .await
        .unwrap();
    enqueue_one(&q, t, Job::new("x").id("a2").group("a")).await;
    assert!(q.check(t).await.unwrap().is_empty());
    // The state issue 29 item 1 left: a held at "until a running job
    // ends", with none of its jobs running.
    let mut c = redis::Client::open(s.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg("punctual:{gstuck}:groups")
        .arg("a")
        .ignore()
        .cmd("ZADD")
        .arg("punctual:{gstuck}:gwait")
        .arg("+inf")
        .arg("a")
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    let v = q.check(t).await.unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].problem.contains("held") && v[0].problem.contains("0 of its max_running 1"),
        "{v:?}"
    );
}
