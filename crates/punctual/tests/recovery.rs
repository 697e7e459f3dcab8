//! Recovery: a tick drops a lease whose record vanished; scripts are loaded
//! again after SCRIPT FLUSH and after a restart of Redis.

use std::time::{Duration, Instant};

use punctual::raw::{self};
use punctual::{EnqueueStatus, Job};
use punctual_testkit::eventually;

use crate::steps::{claim_one, pair, tick};
use crate::util::{key, part, Fixture, RedisServer, LONG_LEASE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_drops_a_lease_whose_record_vanished() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "orphan");
    q.enqueue(t, Job::new("x").id("o")).await.unwrap();
    let d = claim_one(q, t, Duration::from_millis(300)).await;
    assert_eq!(f.cli(&["HDEL", &key(t, "jobs"), "o"]).trim(), "1");
    assert_eq!(f.card(t, "running").await, 1);

    eventually(
        Duration::from_secs(5),
        "the stranded lease to go",
        async || {
            tick(q, t).await;
            f.card(t, "running").await == 0
        },
    )
    .await;
    let stats = q.stats(t).await.unwrap();
    assert_eq!(stats.counters.get("orphans"), Some(&1), "{stats:?}");
    assert_eq!(stats.counters.get("reclaimed").copied().unwrap_or(0), 0);
    assert_eq!(
        (stats.pool, stats.ready, stats.running, stats.dead),
        (0, 0, 0, 0)
    );
    assert!(q.get(t, "o").await.unwrap().is_none());
    assert_eq!(
        raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
        vec![false]
    );
    let v = q.check(t).await.unwrap();
    assert!(v.is_empty(), "{v:?}");
    // The id is free again.
    let r = q.enqueue(t, Job::new("y").id("o")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_reloaded_after_script_flush() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "flush");
    let sha = redis::Script::new(&punctual::internal::script_source("enqueue").unwrap())
        .get_hash()
        .to_string();
    q.enqueue(t, Job::new("a").id("a")).await.unwrap();
    assert_eq!(f.cli(&["SCRIPT", "EXISTS", &sha]).trim(), "1");

    f.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(f.cli(&["SCRIPT", "EXISTS", &sha]).trim(), "0");
    let r = q.enqueue(t, Job::new("b").id("b")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    f.cli(&["SCRIPT", "FLUSH"]);
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    assert_eq!(got.len(), 2);
    f.cli(&["SCRIPT", "FLUSH"]);
    let acks: Vec<_> = got.iter().map(pair).collect();
    assert_eq!(
        raw::ack(q, &part(t), &acks).await.unwrap(),
        vec![true, true]
    );
    f.cli(&["SCRIPT", "FLUSH"]);
    tick(q, t).await;
    assert!(q.get(t, "a").await.unwrap().is_none());
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_reconnects_and_reloads_scripts_after_redis_restart() {
    // AOF on, so the job enqueued before the restart survives it.
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let q = crate::util::queue(&server).await;
    let t = "restart";
    q.enqueue(t, Job::new("before").id("before")).await.unwrap();

    server.restart();

    // The first call may see the dropped connection; it must recover.
    let deadline = Instant::now() + Duration::from_secs(5);
    let stats = loop {
        match q.stats(t).await {
            Ok(s) => break s,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the queue did not recover after a restart: {e}"),
        }
    };
    assert_eq!(stats.ready, 1);
    // The script cache of the new process is empty: every call must work.
    let d = claim_one(&q, t, LONG_LEASE).await;
    assert_eq!(d.id, "before");
    assert_eq!(
        raw::ack(&q, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );
    let r = q.enqueue(t, Job::new("after").id("after")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    let d = claim_one(&q, t, LONG_LEASE).await;
    assert_eq!(d.id, "after");
    assert_eq!(
        raw::ack(&q, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );
    assert!(q.check(t).await.unwrap().is_empty());
}
