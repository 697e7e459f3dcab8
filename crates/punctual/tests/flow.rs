//! The steady flow (issue 12): a claim takes due jobs straight from the
//! pool when ready is short, never one not yet due by Redis's clock; a
//! worker alone runs delayed jobs; the scheduler still promotes what no
//! worker has room for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::raw::{self, Wait};
use punctual::{Job, Limits, Outcome, Scheduler, SchedulerConfig, Worker, WorkerConfig};
use punctual_testkit::eventually;
use tokio_util::sync::CancellationToken;

use crate::util::{part, Fixture, LONG_LEASE};

#[tokio::test]
async fn a_claim_takes_due_pool_jobs_when_ready_is_short_and_never_one_not_yet_due() {
    let f = Fixture::new().await;
    let q = &f.queue;
    q.enqueue("t", Job::new("now").id("now")).await.unwrap();
    q.enqueue(
        "t",
        Job::new("soon")
            .id("soon")
            .delay(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    q.enqueue(
        "t",
        Job::new("later")
            .id("later")
            .delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let p = part("t");
    // The ready job first; the reply says when the pool's head is due.
    let got = raw::claim_with_wait(q, &p, 10, LONG_LEASE).await.unwrap();
    let ids: Vec<_> = got.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["now"]);
    let next = got.next_due.expect("the pool's next due time");
    assert!(
        next > Duration::ZERO && next <= Duration::from_millis(300),
        "{next:?}"
    );
    // Claim in a loop (no scheduler runs): "soon" comes straight from the
    // pool, never before its due time by Redis's clock.
    let soon = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let got = raw::claim(q, &p, 10, LONG_LEASE).await.unwrap();
            if let Some(j) = got.into_iter().next() {
                return j;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the due pool job to be claimed without a scheduler");
    assert_eq!(soon.id, "soon");
    assert!(
        soon.claimed_us >= soon.due_ms * 1000,
        "claimed at {} us, before its due time {} ms",
        soon.claimed_us,
        soon.due_ms
    );
    assert_eq!(soon.attempt, 1);
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready, s.running), (1, 0, 2), "{s:?}");
    assert_eq!(s.counters.get("promoted"), Some(&1), "{s:?}");
    assert_eq!(s.counters.get("claimed"), Some(&2), "{s:?}");
    // The job not yet due stays in the pool.
    assert!(raw::claim(q, &p, 10, LONG_LEASE).await.unwrap().is_empty());
    let f2: Vec<String> = f.pool_jobs("t").into_iter().map(|(id, _)| id).collect();
    assert_eq!(f2, ["later"]);
    // Ackable like any other delivery.
    assert_eq!(raw::ack(q, &p, &[soon.lease()]).await.unwrap(), [true]);
}

#[tokio::test]
async fn ready_jobs_go_first_and_pool_jobs_fill_the_rest_in_due_order() {
    let f = Fixture::new().await;
    let q = &f.queue;
    for (id, ms) in [("p3", 30), ("p1", 10), ("p2", 20)] {
        q.enqueue("t", Job::new(id).id(id).delay(Duration::from_millis(ms)))
            .await
            .unwrap();
    }
    let t0 = f.now_ms().await;
    f.wait_past(t0 + 40).await;
    q.enqueue("t", Job::new("r").id("r")).await.unwrap();
    let got = raw::claim(q, &part("t"), 3, LONG_LEASE).await.unwrap();
    let ids: Vec<_> = got.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["r", "p1", "p2"]);
    let got = raw::claim(q, &part("t"), 3, LONG_LEASE).await.unwrap();
    let ids: Vec<_> = got.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["p3"]);
}

#[tokio::test]
async fn a_groups_topic_and_a_paused_topic_leave_the_pool_to_the_scheduler() {
    let f = Fixture::new().await;
    let q = &f.queue;
    q.enqueue(
        "g",
        Job::new("a")
            .id("a")
            .group("x")
            .delay(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    q.enqueue("p", Job::new("b").id("b").delay(Duration::from_millis(20)))
        .await
        .unwrap();
    q.pause("p").await.unwrap();
    let t0 = f.now_ms().await;
    f.wait_past(t0 + 30).await;
    for t in ["g", "p"] {
        let got = raw::claim_with_wait(q, &part(t), 10, LONG_LEASE)
            .await
            .unwrap();
        assert!(got.jobs.is_empty(), "{t}: {:?}", got.jobs);
        assert_eq!(q.stats(t).await.unwrap().pool, 1, "{t}");
    }
}

#[tokio::test]
async fn limits_hold_for_jobs_taken_from_the_pool() {
    let f = Fixture::new().await;
    let q = &f.queue;
    q.set_limits("t", &Limits::default().max_running(2))
        .await
        .unwrap();
    for i in 0..4 {
        let id = format!("j{i}");
        q.enqueue("t", Job::new("x").id(id).delay(Duration::from_millis(20)))
            .await
            .unwrap();
    }
    let t0 = f.now_ms().await;
    f.wait_past(t0 + 30).await;
    let got = raw::claim_with_wait(q, &part("t"), 10, LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(got.jobs.len(), 2);
    // Held back: due jobs are left in the pool, and the claim says so.
    assert_eq!(got.wait, Some(Wait::UntilRunningEnds));
    let got = raw::claim_with_wait(q, &part("t"), 10, LONG_LEASE)
        .await
        .unwrap();
    assert!(got.jobs.is_empty());
    assert_eq!(got.wait, Some(Wait::UntilRunningEnds));
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.running), (2, 2), "{s:?}");
}

/// A worker with the default safety nets and no scheduler at all runs a
/// delayed job at its due time, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_job_runs_with_a_worker_alone() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let worker = Worker::new(q.clone(), WorkerConfig::default()).handle("t", move |d| {
        let log = log.clone();
        async move {
            log.lock()
                .unwrap()
                .push((d.id.clone(), d.due_ms, d.claimed_us));
            Outcome::Done
        }
    });
    let stop = CancellationToken::new();
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    // Let the worker make its first claim (an empty topic), then enqueue.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (id, ms) in [("a", 300), ("b", 600)] {
        q.enqueue("t", Job::new(id).id(id).delay(Duration::from_millis(ms)))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(10), "both jobs ran", async || {
        seen.lock().unwrap().len() == 2
    })
    .await;
    for (id, due, claimed_us) in seen.lock().unwrap().iter() {
        assert!(
            *claimed_us >= due * 1000,
            "{id} claimed before its due time"
        );
    }
    stop.cancel();
    w.await.unwrap().unwrap();
}

/// With no worker room, the scheduler (defaults) still promotes the due job,
/// and it runs once a slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_job_is_promoted_when_no_worker_has_room() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    let release = Arc::new(tokio::sync::Notify::new());
    let ran = Arc::new(AtomicUsize::new(0));
    let (r2, n2) = (release.clone(), ran.clone());
    let worker =
        Worker::new(q.clone(), WorkerConfig::default().concurrency(1)).handle("t", move |d| {
            let (r, n) = (r2.clone(), n2.clone());
            async move {
                if d.id == "busy" {
                    r.notified().await;
                }
                n.fetch_add(1, Ordering::SeqCst);
                Outcome::Done
            }
        });
    let stop = CancellationToken::new();
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    q.enqueue("t", Job::new("x").id("busy")).await.unwrap();
    eventually(Duration::from_secs(5), "the busy job runs", async || {
        q.stats("t").await.unwrap().running == 1
    })
    .await;
    let s = tokio::spawn(
        Scheduler::new(q.clone(), SchedulerConfig::default())
            .topic("t")
            .run(stop.clone().cancelled_owned()),
    );
    q.enqueue(
        "t",
        Job::new("x").id("late").delay(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(5),
        "the scheduler promotes it",
        async || {
            let s = q.stats("t").await.unwrap();
            s.ready == 1 && s.pool == 0
        },
    )
    .await;
    release.notify_one();
    eventually(Duration::from_secs(5), "both ran", async || {
        ran.load(Ordering::SeqCst) == 2
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    s.await.unwrap().unwrap();
}
