//! Per-minute history: snapshots of the counters (`P:{T}:hist:<minute>`),
//! lateness aggregates from the workers (`P:{T}:late:<minute>`) and
//! `Queue::history`, which turns them into per-minute figures.

use std::time::Duration;

use crate::util::part;
use punctual::raw::{self, FailKind, Lease};
use punctual::{Job, Outcome, Scheduler, SchedulerConfig, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::util::{key, Fixture, LONG_LEASE};
use punctual_testkit::eventually;

/// Seven days in ms: the TTL of every history key.
const WEEK_MS: i64 = 7 * 24 * 3600 * 1000;

/// Waits, if needed, until Redis's clock has at least `need` seconds left
/// in its current minute, and returns that minute: the steps that follow
/// then all fall in it.
async fn fresh_minute(fx: &Fixture, need: i64) -> i64 {
    let now = fx.now_ms().await;
    let left = 60_000 - now % 60_000;
    if left < need * 1000 {
        tokio::time::sleep(Duration::from_millis(left as u64 + 50)).await;
    }
    fx.now_ms().await / 60_000
}

fn counter(m: &punctual::MinuteFigures, name: &str) -> u64 {
    m.counters
        .as_ref()
        .unwrap_or_else(|| panic!("minute {} is a gap: {m:?}", m.minute))
        .get(name)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_known_workload_gives_known_counts_and_minutes_without_a_snapshot_are_gaps() {
    let fx = Fixture::new().await;
    let q = &fx.queue;
    let m = fresh_minute(&fx, 15).await;
    q.snapshot_history("t").await.unwrap();
    for i in 0..5 {
        q.enqueue("t", Job::new(format!("{i}")).id(format!("j{i}")))
            .await
            .unwrap();
    }
    let jobs = raw::claim(q, &part("t"), 5, LONG_LEASE).await.unwrap();
    assert_eq!(jobs.len(), 5);
    let done: Vec<Lease> = jobs[..3].iter().map(|d| d.lease()).collect();
    raw::ack(q, &part("t"), &done).await.unwrap();
    raw::fail(
        q,
        &part("t"),
        &jobs[3].lease(),
        "again",
        FailKind::Retry { after: None },
    )
    .await
    .unwrap();
    raw::fail(
        q,
        &part("t"),
        &jobs[4].lease(),
        "never",
        FailKind::Permanent,
    )
    .await
    .unwrap();

    let h = q.history("t", 3).await.unwrap();
    assert_eq!(h.minutes.len(), 3, "{h:?}");
    let mins: Vec<i64> = h.minutes.iter().map(|x| x.minute).collect();
    assert_eq!(mins, vec![m - 2, m - 1, m]);
    // No scheduler ran before: gaps, not zeros.
    assert!(h.minutes[0].counters.is_none(), "{h:?}");
    assert!(h.minutes[1].counters.is_none(), "{h:?}");
    let cur = &h.minutes[2];
    assert!(cur.partial);
    assert_eq!(counter(cur, "enqueued"), 5);
    assert_eq!(counter(cur, "claimed"), 5);
    assert_eq!(counter(cur, "done"), 3);
    assert_eq!(counter(cur, "retried"), 1);
    assert_eq!(counter(cur, "dead"), 1);
    assert_eq!(counter(cur, "reclaimed"), 0);

    // The snapshot keeps its first writer and expires in 7 days.
    let hk = key("t", &format!("hist:{m}"));
    let at: String = fx.cmd(redis::cmd("HGET").arg(&hk).arg("at")).await;
    q.snapshot_history("t").await.unwrap();
    let again: String = fx.cmd(redis::cmd("HGET").arg(&hk).arg("at")).await;
    assert_eq!(
        at, again,
        "a second offer in the same minute changed the snapshot"
    );
    let ttl: i64 = fx.cmd(redis::cmd("PTTL").arg(&hk)).await;
    assert!(ttl > WEEK_MS - 60_000 && ttl <= WEEK_MS, "ttl {ttl}");
    let h = q.history("t", 1).await.unwrap();
    assert_eq!(counter(&h.minutes[0], "done"), 3);
}

#[tokio::test]
async fn complete_minutes_are_differences_of_snapshots_and_a_reset_counts_from_zero() {
    let fx = Fixture::new().await;
    let q = &fx.queue;
    let m = fresh_minute(&fx, 15).await;
    let hist = |minute: i64, enq: i64, done: i64| {
        let mut c = redis::cmd("HSET");
        c.arg(key("t", &format!("hist:{minute}")))
            .arg("at")
            .arg(minute * 60_000)
            .arg("enqueued")
            .arg(enq)
            .arg("done")
            .arg(done);
        c
    };
    let _: i64 = fx.cmd(&hist(m - 5, 10, 4)).await;
    let _: i64 = fx.cmd(&hist(m - 4, 25, 10)).await;
    // The stats hash was deleted during m - 4: the counters went back.
    let _: i64 = fx.cmd(&hist(m - 3, 3, 1)).await;
    // m - 2: no scheduler.
    let _: i64 = fx
        .cmd(
            redis::cmd("HSET")
                .arg(key("t", "stats"))
                .arg("enqueued")
                .arg(7)
                .arg("done")
                .arg(2),
        )
        .await;
    q.snapshot_history("t").await.unwrap();
    let _: i64 = fx
        .cmd(
            redis::cmd("HINCRBY")
                .arg(key("t", "stats"))
                .arg("enqueued")
                .arg(2),
        )
        .await;

    let h = q.history("t", 6).await.unwrap();
    let mins: Vec<i64> = h.minutes.iter().map(|x| x.minute).collect();
    assert_eq!(mins, (m - 5..=m).collect::<Vec<_>>());
    let f = &h.minutes;
    assert_eq!(
        (counter(&f[0], "enqueued"), counter(&f[0], "done")),
        (15, 6)
    );
    assert_eq!(
        (counter(&f[1], "enqueued"), counter(&f[1], "done")),
        (3, 1),
        "a reset counts from 0, never negative"
    );
    assert!(f[2].counters.is_none(), "m-3 has no end snapshot: a gap");
    assert!(f[3].counters.is_none(), "m-2 has no snapshot: a gap");
    assert!(f[4].counters.is_none(), "m-1 has no snapshot: a gap");
    assert_eq!(counter(&f[5], "enqueued"), 2);
    assert_eq!(counter(&f[5], "done"), 0);
    assert_eq!(f[0].start_ms, Some((m - 5) * 60_000));

    assert!(q.history("t", 0).await.is_err());
    assert!(q.history("t", 7 * 24 * 60 + 1).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_record_lateness_in_buckets_with_a_ttl() {
    let fx = Fixture::new().await;
    let q = fx.queue.clone();
    fresh_minute(&fx, 20).await;
    for i in 0..4 {
        q.enqueue("t", Job::new("x").id(format!("j{i}")))
            .await
            .unwrap();
    }
    // The jobs are due now; no worker runs for 1.2 s.
    let due = fx.now_ms().await;
    fx.wait_past(due + 1200).await;
    let stop = CancellationToken::new();
    let worker = {
        let q = q.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            Worker::new(q, WorkerConfig::default().concurrency(4))
                .handle("t", |_| async { Outcome::Done })
                .run(stop.cancelled_owned())
                .await
                .unwrap()
        })
    };
    eventually(Duration::from_secs(10), "4 jobs done", async || {
        q.stats("t").await.unwrap().counters.get("done") == Some(&4)
    })
    .await;
    // Stopping flushes what the worker measured.
    stop.cancel();
    worker.await.unwrap();

    let h = q.history("t", 2).await.unwrap();
    assert_eq!(h.bucket_bounds_ms, vec![1, 10, 100, 1_000, 10_000, 60_000]);
    let mut late = punctual::Lateness::default();
    for m in &h.minutes {
        late.add(&m.lateness);
    }
    assert_eq!(late.count, 4, "{h:?}");
    assert_eq!(
        late.buckets,
        [0, 0, 0, 0, 4, 0, 0],
        "1.2 s late: the (1 s, 10 s] bucket"
    );
    assert!(
        late.max_us >= 1_200_000 && late.max_us < 10_000_000,
        "{late:?}"
    );
    assert!(
        late.sum_us >= 4 * 1_200_000 && late.sum_us <= 4 * late.max_us,
        "{late:?}"
    );
    let keys: Vec<String> = fx.cmd(redis::cmd("KEYS").arg(key("t", "late:*"))).await;
    assert!(!keys.is_empty());
    for k in keys {
        let ttl: i64 = fx.cmd(redis::cmd("PTTL").arg(&k)).await;
        assert!(ttl > WEEK_MS - 60_000 && ttl <= WEEK_MS, "{k}: ttl {ttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_topic_sums_its_partitions() {
    let fx = Fixture::new().await;
    let q = fx.queue.clone();
    q.set_partitions("p", 3).await.unwrap();
    let m = fresh_minute(&fx, 20).await;
    q.snapshot_history("p").await.unwrap();
    for i in 0..3 {
        let hk = key(&format!("p#{i}"), &format!("hist:{m}"));
        let n: i64 = fx.cmd(redis::cmd("EXISTS").arg(&hk)).await;
        assert_eq!(n, 1, "no snapshot of partition {i}");
    }
    for i in 0..30 {
        q.enqueue("p", Job::new("x").id(format!("j{i}")))
            .await
            .unwrap();
    }
    let stop = CancellationToken::new();
    let worker = {
        let q = q.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            Worker::new(q, WorkerConfig::default().concurrency(8))
                .handle("p", |_| async { Outcome::Done })
                .run(stop.cancelled_owned())
                .await
                .unwrap()
        })
    };
    eventually(Duration::from_secs(10), "30 jobs done", async || {
        q.stats("p").await.unwrap().counters.get("done") == Some(&30)
    })
    .await;
    stop.cancel();
    worker.await.unwrap();
    let h = q.history("p", 1).await.unwrap();
    assert_eq!(h.partitions, 3);
    let cur = &h.minutes[0];
    assert_eq!(counter(cur, "enqueued"), 30);
    assert_eq!(counter(cur, "done"), 30);
    assert_eq!(cur.lateness.count, 30);
    // One partition without its snapshot makes the minute a gap.
    let _: i64 = fx
        .cmd(redis::cmd("DEL").arg(key("p#1", &format!("hist:{m}"))))
        .await;
    let h = q.history("p", 1).await.unwrap();
    assert!(h.minutes[0].counters.is_none(), "{h:?}");
}

#[tokio::test]
async fn the_scheduler_offers_a_snapshot_of_the_current_minute() {
    let fx = Fixture::new().await;
    let q = fx.queue.clone();
    q.enqueue("t", Job::new("x")).await.unwrap();
    let stop = CancellationToken::new();
    let sched = {
        let q = q.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            Scheduler::new(q, SchedulerConfig::default())
                .topic("t")
                .run(stop.cancelled_owned())
                .await
                .unwrap()
        })
    };
    eventually(
        Duration::from_secs(5),
        "a snapshot of this minute",
        async || {
            let m = fx.now_ms().await / 60_000;
            let h = q.history("t", 1).await.unwrap();
            h.minutes[0].minute == m && h.minutes[0].counters.is_some()
        },
    )
    .await;
    stop.cancel();
    sched.await.unwrap();
    let keys: Vec<String> = fx.cmd(redis::cmd("KEYS").arg(key("t", "hist:*"))).await;
    assert!(!keys.is_empty());
    let enq: i64 = fx
        .cmd(redis::cmd("HGET").arg(&keys[0]).arg("enqueued"))
        .await;
    assert_eq!(enq, 1, "the snapshot copies the counters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_works_on_a_cluster_with_partitions_on_several_shards() {
    let c = punctual_testkit::RedisCluster::start();
    let q = punctual::Queue::connect(c.seed_urls()).await.unwrap();
    assert!(q.is_cluster());
    q.set_partitions("p", 4).await.unwrap();
    // Leave 20 s in the minute (Redis's clock, via the history itself).
    let h = q.history("p", 1).await.unwrap();
    let left = 60_000 - h.now_ms % 60_000;
    if left < 20_000 {
        tokio::time::sleep(Duration::from_millis(left as u64 + 50)).await;
    }
    q.snapshot_history("p").await.unwrap();
    for i in 0..20 {
        q.enqueue("p", Job::new("x").id(format!("j{i}")))
            .await
            .unwrap();
    }
    let stop = CancellationToken::new();
    let worker = {
        let q = q.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            Worker::new(q, WorkerConfig::default().concurrency(4))
                .handle("p", |_| async { Outcome::Done })
                .run(stop.cancelled_owned())
                .await
                .unwrap()
        })
    };
    eventually(Duration::from_secs(10), "20 jobs done", async || {
        q.stats("p").await.unwrap().counters.get("done") == Some(&20)
    })
    .await;
    stop.cancel();
    worker.await.unwrap();
    let h = q.history("p", 2).await.unwrap();
    let cur = h.minutes.last().unwrap();
    assert_eq!(counter(cur, "enqueued"), 20, "{h:?}");
    assert_eq!(counter(cur, "done"), 20, "{h:?}");
    let started: u64 = h.minutes.iter().map(|m| m.lateness.count).sum();
    assert_eq!(started, 20);
}

#[tokio::test]
async fn deleting_a_topic_deletes_its_history() {
    let fx = Fixture::new().await;
    let q = &fx.queue;
    q.enqueue("t", Job::new("x")).await.unwrap();
    q.snapshot_history("t").await.unwrap();
    // An old minute too, as a scheduler left it days ago.
    let old = fx.now_ms().await / 60_000 - 3 * 24 * 60;
    let old_late = key("t", &format!("late:{old}"));
    let _: () = fx
        .cmd(redis::cmd("HSET").arg(&old_late).arg("n").arg(1))
        .await;
    let claimed = raw::claim(q, &part("t"), 1, LONG_LEASE).await.unwrap();
    raw::ack(q, &part("t"), &[claimed[0].lease()])
        .await
        .unwrap();
    let before: Vec<String> = fx.cmd(redis::cmd("KEYS").arg(key("t", "*"))).await;
    assert!(before.iter().any(|k| k.contains(":hist:")), "{before:?}");
    assert_eq!(
        q.delete_topic("t").await.unwrap(),
        punctual::TopicDeleted::Deleted
    );
    let after: Vec<String> = fx.cmd(redis::cmd("KEYS").arg(key("t", "*"))).await;
    assert!(after.is_empty(), "left behind: {after:?}");
}

/// The history scripts refuse bad arguments before they write anything,
/// like every other script (a TTL, a lateness, a field or an increment
/// that is not what punctual sends).
#[tokio::test]
async fn the_history_scripts_refuse_bad_arguments_and_write_nothing() {
    let fx = Fixture::new().await;
    fx.queue.enqueue("t", Job::new("x")).await.unwrap();
    let m = fx.now_ms().await / 60_000;
    let late = key("t", &format!("late:{m}"));
    let hist = key("t", &format!("hist:{m}"));
    let stats = key("t", "stats");
    let lateness = include_str!("../lua/history/lateness.lua");
    let snapshot = include_str!("../lua/history/snapshot.lua");
    let week = WEEK_MS.to_string();
    let minute = m.to_string();
    let calls: Vec<(&str, Vec<String>, Vec<&str>)> = vec![
        (lateness, vec![late.clone()], vec!["0", "5", "count", "1"]),
        (lateness, vec![late.clone()], vec!["x", "5", "count", "1"]),
        (
            lateness,
            vec![late.clone()],
            vec![&week, "nan", "count", "1"],
        ),
        (
            lateness,
            vec![late.clone()],
            vec![&week, "5", "count", "1.5"],
        ),
        (
            lateness,
            vec![late.clone()],
            vec![&week, "5", "count", "1", "max_us", "2"],
        ),
        (lateness, vec![late.clone()], vec![&week, "5", "count"]),
        (
            snapshot,
            vec![stats.clone(), hist.clone()],
            vec![&minute, "0"],
        ),
        (
            snapshot,
            vec![stats.clone(), hist.clone()],
            vec![&minute, "7d"],
        ),
        (snapshot, vec![stats.clone(), hist.clone()], vec![&minute]),
    ];
    for (script, keys, argv) in calls {
        let mut c = fx.conn.clone();
        let err = redis::cmd("EVAL")
            .arg(script)
            .arg(keys.len())
            .arg(&keys)
            .arg(&argv)
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err(&format!("{argv:?} was accepted"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{argv:?}: {err}");
        let n: i64 = fx.cmd(redis::cmd("EXISTS").arg(&late).arg(&hist)).await;
        assert_eq!(n, 0, "{argv:?}: something was written");
    }
}
