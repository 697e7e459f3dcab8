//! Fair groups (tenants): claim serves the groups of a topic in turn, so one
//! group's backlog cannot starve another's few jobs; within a group, due
//! order. On a single Redis and on a 3-master cluster, with stale index
//! entries (cancel, reschedule), a topic switching to groups with a ready
//! backlog, retries and reclaims re-indexed, and partitioned topics.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use punctual::raw::{self, FailKind, Partition};
use punctual::{Job, Queue, When};
use punctual_testkit::{RedisCluster, RedisServer};

use crate::util::{part, LONG_LEASE, TICK_ALL};

/// Enqueues `n` jobs due now in `group` (None: ungrouped), ids
/// `<prefix><i>`, in batches of 1000.
async fn enqueue_group(q: &Queue, topic: &str, group: Option<&str>, prefix: &str, n: usize) {
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            let j = Job::new("x").id(format!("{prefix}{i:06}"));
            match group {
                Some(g) => j.group(g),
                None => j,
            }
        })
        .collect();
    for chunk in jobs.chunks(1000) {
        q.enqueue_batch(topic, chunk.to_vec()).await.unwrap();
    }
}

/// Claims `part` in batches of `k` until a claim returns nothing, acking
/// each batch; returns the ids in claim order.
async fn drain(q: &Queue, p: &Partition, k: usize) -> Vec<String> {
    let mut order = Vec::new();
    loop {
        let got = raw::claim(q, p, k, LONG_LEASE).await.unwrap();
        if got.is_empty() {
            return order;
        }
        let leases: Vec<_> = got.iter().map(|d| d.lease()).collect();
        assert!(raw::ack(q, p, &leases).await.unwrap().iter().all(|ok| *ok));
        order.extend(got.into_iter().map(|d| d.id));
    }
}

/// Every id exactly once.
fn assert_once(order: &[String], expected: usize) {
    let set: HashSet<&String> = order.iter().collect();
    assert_eq!(set.len(), order.len(), "an id was claimed twice");
    assert_eq!(
        order.len(),
        expected,
        "claimed {} of {expected}",
        order.len()
    );
}

async fn small_group_is_not_starved(q: &Queue, topic: &str, big: usize) {
    enqueue_group(q, topic, Some("big"), "b", big).await;
    enqueue_group(q, topic, Some("small"), "s", 100).await;
    let order = drain(q, &part(topic), 50).await;
    assert_once(&order, big + 100);
    let last_small = order.iter().rposition(|id| id.starts_with('s')).unwrap();
    assert!(
        last_small < 250,
        "the 100 small jobs should be claimed among the first 250, the last was #{last_small}"
    );
}

#[tokio::test]
async fn a_small_group_is_served_beside_a_backlog_of_100000() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    small_group_is_not_starved(&q, "fair", 100_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_group_is_served_beside_a_backlog_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    small_group_is_not_starved(&q, "fair", 20_000).await;
}

#[tokio::test]
async fn due_order_within_a_group_and_stale_entries_are_dropped() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let t = "ord";
    // One call each, so the due times rise with the ids.
    for i in 0..20 {
        q.enqueue(t, Job::new("x").id(format!("a{i:02}")).group("a"))
            .await
            .unwrap();
    }
    // Cancelled: their index entries go stale.
    for i in [3, 7, 11] {
        assert!(q.cancel(t, &format!("a{i:02}")).await.unwrap().is_some());
    }
    // Rescheduled to now (re-indexed in place) and to later (stale until promoted).
    q.reschedule(t, "a05", When::Now).await.unwrap();
    q.reschedule(t, "a09", When::Delay(Duration::from_millis(300)))
        .await
        .unwrap();
    // Cancelled and enqueued again in another group: the stale entry in
    // "a" and the live one in "b" must not hand it out twice.
    q.cancel(t, "a13").await.unwrap();
    q.enqueue(t, Job::new("x").id("a13").group("b"))
        .await
        .unwrap();
    let p = part(t);
    let order = drain(&q, &p, 3).await;
    assert_once(&order, 16);
    let in_a: Vec<&String> = order
        .iter()
        .filter(|id| *id != "a13" && *id != "a05")
        .collect();
    let mut sorted = in_a.clone();
    sorted.sort();
    assert_eq!(in_a, sorted, "group a's jobs in due order");
    assert!(!order
        .iter()
        .any(|id| ["a03", "a07", "a09", "a11"].contains(&id.as_str())));
    // The rescheduled one comes once it is due and promoted.
    tokio::time::sleep(Duration::from_millis(350)).await;
    raw::tick(&q, &p, &TICK_ALL).await.unwrap();
    assert_eq!(drain(&q, &p, 3).await, vec!["a09".to_string()]);
    assert_eq!(drain(&q, &p, 3).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_ready_backlog_switching_to_groups_loses_nothing() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let t = "switch";
    enqueue_group(&q, t, None, "u", 3000).await;
    // Some are claimed and acked before the switch, some stay running.
    let p = part(t);
    let running = raw::claim(&q, &p, 100, LONG_LEASE).await.unwrap();
    enqueue_group(&q, t, Some("g"), "g", 50).await;
    let order = drain(&q, &p, 100).await;
    assert_once(&order, 2950);
    // Served in turn: the grouped jobs come early, not after the backlog.
    let last_g = order.iter().rposition(|id| id.starts_with('g')).unwrap();
    assert!(last_g < 200, "last grouped job at #{last_g}");
    let leases: Vec<_> = running.iter().map(|d| d.lease()).collect();
    assert!(raw::ack(&q, &p, &leases)
        .await
        .unwrap()
        .iter()
        .all(|ok| *ok));
}

#[tokio::test]
async fn retries_and_reclaimed_leases_are_indexed_again() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let t = "again";
    let p = part(t);
    enqueue_group(&q, t, Some("small"), "s", 2).await;
    let got = raw::claim(&q, &p, 2, LONG_LEASE).await.unwrap();
    assert_eq!(got.len(), 2);
    enqueue_group(&q, t, Some("big"), "b", 200).await;
    // s000000 retries at once (back to ready), s000001's lease expires and
    // the tick reclaims it (first backoff step: 0).
    let retry = FailKind::Retry {
        after: Some(Duration::ZERO),
    };
    let failed = raw::fail(&q, &p, &got[0].lease(), "boom", retry)
        .await
        .unwrap();
    assert!(matches!(failed, raw::Failed::Retry));
    let again = raw::claim(&q, &p, 3, LONG_LEASE).await.unwrap();
    assert!(
        again.iter().any(|d| d.id == "s000000"),
        "a retried job is served in its turn, not after the backlog: {:?}",
        again.iter().map(|d| &d.id).collect::<Vec<_>>()
    );
    let short = raw::claim(&q, &p, 200, LONG_LEASE).await.unwrap();
    assert!(!short.iter().any(|d| d.id.starts_with('s')));
    let leases: Vec<_> = short
        .iter()
        .chain(again.iter())
        .map(|d| d.lease())
        .collect();
    raw::ack(&q, &p, &leases).await.unwrap();
    enqueue_group(&q, t, Some("big"), "c", 200).await;
    let lease = raw::claim(&q, &p, 1, LONG_LEASE).await.unwrap();
    assert_eq!(lease.len(), 1);
    // The other small job, claimed with a short lease, is reclaimed by a tick.
    q.enqueue(t, Job::new("x").id("s9").group("small"))
        .await
        .unwrap();
    let mut s9 = Vec::new();
    for _ in 0..3 {
        let got = raw::claim(&q, &p, 1, Duration::from_millis(50))
            .await
            .unwrap();
        if got.iter().any(|d| d.id == "s9") {
            s9 = got;
            break;
        }
        raw::ack(&q, &p, &got.iter().map(|d| d.lease()).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    assert_eq!(s9.len(), 1, "s9 served within 3 claims");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(raw::tick(&q, &p, &TICK_ALL).await.unwrap().reclaimed, 1);
    let again = raw::claim(&q, &p, 3, LONG_LEASE).await.unwrap();
    assert!(
        again.iter().any(|d| d.id == "s9"),
        "a reclaimed job is served in its turn: {:?}",
        again.iter().map(|d| &d.id).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_fair_each_and_delete_cleans_up() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    let t = "parts";
    q.set_partitions(t, 4).await.unwrap();
    enqueue_group(&q, t, Some("big"), "b", 4000).await;
    enqueue_group(&q, t, Some("small"), "s", 80).await;
    let mut all = Vec::new();
    let mut per: HashMap<String, usize> = HashMap::new();
    for p in raw::partitions(&q, t).await.unwrap() {
        let order = drain(&q, &p, 10).await;
        let small = order.iter().filter(|id| id.starts_with('s')).count();
        if let Some(last) = order.iter().rposition(|id| id.starts_with('s')) {
            assert!(
                last < 2 * small + 10,
                "{p:?}: last of {small} small jobs at #{last}"
            );
        }
        per.insert(p.as_str().to_string(), order.len());
        all.extend(order);
    }
    assert_once(&all, 4080);
    assert!(per.values().all(|n| *n > 0), "{per:?}");
    q.delete_topic(t).await.unwrap();
    for p in raw::partitions(&q, t).await.unwrap() {
        assert!(drain(&q, &p, 10).await.is_empty());
    }
}

#[tokio::test]
async fn queue_groups_lists_the_active_groups() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let t = "list";
    enqueue_group(&q, t, None, "u", 3).await;
    assert!(
        q.groups(t).await.unwrap().is_empty(),
        "no groups before a grouped job"
    );
    enqueue_group(&q, t, Some("a"), "a", 5).await;
    let g = q.groups(t).await.unwrap();
    let names: Vec<(&str, u64)> = g.iter().map(|g| (g.group.as_str(), g.indexed)).collect();
    assert_eq!(names, vec![("", 3), ("a", 5)]);
    raw::claim(&q, &part(t), 2, LONG_LEASE).await.unwrap();
    let g = q.groups(t).await.unwrap();
    assert_eq!(g.iter().map(|g| g.indexed).sum::<u64>(), 6);
    assert!(g.iter().all(|g| g.vtime == 1.0), "{g:?}");
}

#[tokio::test]
async fn a_claim_after_many_stale_entries_still_returns_the_live_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let t = "stale";
    enqueue_group(&q, t, Some("a"), "a", 300).await;
    for i in 0..299 {
        q.cancel(t, &format!("a{i:06}")).await.unwrap();
    }
    // 299 stale entries before the live one: more than one claim's steps.
    let got = raw::claim(&q, &part(t), 1, LONG_LEASE).await.unwrap();
    assert_eq!(
        got.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["a000299"]
    );
    assert!(drain(&q, &part(t), 10).await.is_empty());
}
