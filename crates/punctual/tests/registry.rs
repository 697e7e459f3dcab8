//! The process registry and the overdue figures of `stats`.

use std::time::Duration;

use crate::util::part;
use punctual::raw::{self, TickLimits};
use punctual::registry::{ProcessInfo, Registry, Role};
use punctual::{Job, Outcome, Scheduler, SchedulerConfig, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::util::{Fixture, PREFIX};
use punctual_testkit::eventually;

#[tokio::test]
async fn a_worker_and_a_scheduler_are_listed_while_they_run_and_leave_on_a_clean_stop() {
    let f = Fixture::new().await;
    let stop = CancellationToken::new();
    let worker = Worker::new(
        f.queue.clone(),
        WorkerConfig::default().registry(Registry::default().id("w-1")),
    )
    .handle("orders", |_| async { Outcome::Done })
    .handle("mails", |_| async { Outcome::Done });
    let scheduler = Scheduler::new(f.queue.clone(), SchedulerConfig::default()).topic("orders");
    let (s1, s2) = (stop.clone(), stop.clone());
    let w = tokio::spawn(worker.run(async move { s1.cancelled().await }));
    let s = tokio::spawn(scheduler.run(async move { s2.cancelled().await }));

    eventually(Duration::from_secs(5), "both registered", async || {
        f.queue.processes().await.unwrap().len() == 2
    })
    .await;
    let procs = f.queue.processes().await.unwrap();
    let w_rec = procs.iter().find(|p| p.role == Role::Worker).unwrap();
    assert_eq!(w_rec.id, "w-1");
    assert_eq!(w_rec.topics, ["mails", "orders"]);
    assert_eq!(w_rec.pid, std::process::id());
    assert!(w_rec.beat_ms >= w_rec.started_ms && w_rec.started_ms > 0);
    let s_rec = procs.iter().find(|p| p.role == Role::Scheduler).unwrap();
    assert_eq!(s_rec.topics, ["orders"]);
    // The record expires on its own: its TTL is 3 beats.
    let ttl: i64 = f
        .cmd(redis::cmd("PTTL").arg(format!("{PREFIX}:{{procs}}:p:w-1")))
        .await;
    assert!(ttl > 10_000 && ttl <= 15_000, "ttl {ttl}");

    stop.cancel();
    w.await.unwrap().unwrap();
    s.await.unwrap().unwrap();
    assert!(f.queue.processes().await.unwrap().is_empty());
    let index: i64 = f
        .cmd(redis::cmd("ZCARD").arg(format!("{PREFIX}:{{procs}}:index")))
        .await;
    assert_eq!(index, 0, "a clean stop removes the index entry too");
}

#[tokio::test]
async fn registry_off_keeps_a_worker_out_and_a_dropped_registration_expires() {
    let f = Fixture::new().await;
    let stop = CancellationToken::new();
    let s1 = stop.clone();
    let w = tokio::spawn(
        Worker::new(
            f.queue.clone(),
            WorkerConfig::default().registry(Registry::off()),
        )
        .handle("orders", |_| async { Outcome::Done })
        .run(async move { s1.cancelled().await }),
    );
    // A process that dies without cleaning up: its record expires after
    // 3 beats, and the reader drops the stale index entry.
    let r = f
        .queue
        .register_process(
            ProcessInfo::new(Role::Resident, ["orders"]).with_id("gone-1"),
            Duration::from_millis(200),
        )
        .unwrap();
    eventually(Duration::from_secs(5), "registered", async || {
        f.queue.processes().await.unwrap().len() == 1
    })
    .await;
    drop(r);
    eventually(Duration::from_secs(5), "expired", async || {
        f.queue.processes().await.unwrap().is_empty()
    })
    .await;
    let index: i64 = f
        .cmd(redis::cmd("ZCARD").arg(format!("{PREFIX}:{{procs}}:index")))
        .await;
    assert_eq!(index, 0, "the reader removed the stale index entry");
    stop.cancel();
    w.await.unwrap().unwrap();
}

#[tokio::test]
async fn deregistering_a_process_removes_its_children_too() {
    let f = Fixture::new().await;
    let period = Duration::from_secs(5);
    let mut handles = Vec::new();
    for id in [
        "sup",
        "sup/worker-0",
        "sup/worker-0/resident-1",
        "sup2/worker-0",
    ] {
        handles.push(
            f.queue
                .register_process(ProcessInfo::new(Role::Worker, ["t"]).with_id(id), period)
                .unwrap(),
        );
    }
    eventually(Duration::from_secs(5), "registered", async || {
        f.queue.processes().await.unwrap().len() == 4
    })
    .await;
    // Stop beating (as a SIGKILLed child would), then the supervisor cleans up.
    drop(handles);
    assert_eq!(f.queue.deregister_process("sup/worker-0").await.unwrap(), 2);
    let left: Vec<String> = f
        .queue
        .processes()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(left, ["sup", "sup2/worker-0"]);
    assert!(f.queue.deregister_process("bad id").await.is_err());
}

#[tokio::test]
async fn stats_count_the_jobs_overdue_in_the_pool_and_their_age() {
    let f = Fixture::new().await;
    let s = f.queue.stats("orders").await.unwrap();
    assert_eq!((s.overdue, s.overdue_ms), (0, None));
    for i in 1..=3 {
        f.queue
            .enqueue("orders", Job::new("x").delay(Duration::from_millis(10 * i)))
            .await
            .unwrap();
    }
    f.queue
        .enqueue("orders", Job::new("later").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    // No scheduler runs: the three stay in the pool past their due time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = f.queue.stats("orders").await.unwrap();
    assert_eq!(s.pool, 4);
    assert_eq!(s.overdue, 3);
    let age = s.overdue_ms.unwrap();
    assert!((250..10_000).contains(&age), "age {age}");
    // Promoted, they are ready, not overdue in the pool.
    raw::tick(
        &f.queue,
        &part("orders"),
        &TickLimits {
            promote_batch: 100,
            max_ready: 1000,
            reclaim_batch: 100,
        },
    )
    .await
    .unwrap();
    let s = f.queue.stats("orders").await.unwrap();
    assert_eq!((s.overdue, s.overdue_ms, s.ready), (0, None, 3));
    assert!(s.oldest_ready_ms.unwrap() >= 250);
}

#[tokio::test]
async fn a_process_whose_record_vanished_is_listed_again_at_its_next_beat() {
    let f = Fixture::new().await;
    let _r = f
        .queue
        .register_process(
            ProcessInfo::new(Role::Worker, ["orders"]).with_id("w-9"),
            Duration::from_millis(500),
        )
        .unwrap();
    eventually(Duration::from_secs(5), "registered", async || {
        f.queue.processes().await.unwrap().len() == 1
    })
    .await;
    // As after a pause longer than 3 beats: the record expired and a
    // reader dropped the index entry.
    let _: i64 = f
        .cmd(redis::cmd("DEL").arg(format!("{PREFIX}:{{procs}}:p:w-9")))
        .await;
    assert!(f.queue.processes().await.unwrap().is_empty());
    // Well before the periodic index refresh (12 beats, 6 s).
    eventually(Duration::from_secs(4), "listed again", async || {
        f.queue.processes().await.unwrap().len() == 1
    })
    .await;
    let ttl: i64 = f
        .cmd(redis::cmd("PTTL").arg(format!("{PREFIX}:{{procs}}:p:w-9")))
        .await;
    assert!(ttl > 0 && ttl <= 1500, "ttl {ttl}");
}
