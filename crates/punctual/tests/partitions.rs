//! Changing a topic's partition count under a producer: a producer with a
//! stale count cannot strand a job, and a change that fails midway leaves the
//! topic open to producers.

use punctual::{EnqueueStatus, ErrorKind, Job, State};

use crate::steps::eval;
use crate::util::{key, topic_keys, Fixture, PREFIX};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_with_a_stale_partition_count_cannot_strand_a_job() {
    let f = Fixture::new().await;
    let t = "re-part";
    // Another process that read the count (1) just before the change, and
    // caches it for a second.
    let stale = crate::util::queue(&f.server).await;
    assert_eq!(stale.partitions(t).await.unwrap(), 1);
    f.queue.set_partitions(t, 3).await.unwrap();
    let r = stale.enqueue(t, Job::new("x").id("late")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    // Not in the old layout, where no worker of the 3 partitions looks ...
    for set in ["pool", "ready"] {
        assert_eq!(f.card(t, set).await, 0, "a job was left in {t}'s {set}");
    }
    // ... but in its partition.
    let info = f.queue.get(t, "late").await.unwrap();
    assert_eq!(info.map(|i| i.state), Some(State::Ready));
    assert!(f.queue.check(t).await.unwrap().is_empty());

    // The script refuses a call routed with a stale count, writing nothing.
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    let p0 = punctual::internal::partition_name(t, 0, 3);
    let err = eval(
        "enqueue",
        &topic_keys(&p0),
        &["65536", "0", "1", "", "p", "d0", "", "", "2"],
    )
    .query_async::<redis::Value>(&mut c)
    .await
    .unwrap_err();
    assert_eq!(err.code(), Some("PUNCTUAL_STALE"), "{err}");
    assert_eq!(f.snapshot().await, snap);
    // Without the count (older producers) the call is not checked.
    let id0 = (0..)
        .map(|i| format!("raw{i}"))
        .find(|id| punctual::internal::partition_of(id, 3) == 0)
        .unwrap();
    let ok: Vec<redis::Value> = eval(
        "enqueue",
        &topic_keys(&p0),
        &["65536", "0", "1", &id0, "p", "d0", "", ""],
    )
    .query_async(&mut c)
    .await
    .unwrap();
    assert_eq!(ok.len(), 2);

    // A change refused because a partition holds jobs leaves every mark as
    // it was: producers routing with 3 still get in.
    let err = f.queue.set_partitions(t, 2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let fresh = crate::util::queue(&f.server).await;
    let many: Vec<Job> = (0..30).map(|i| Job::new("y").id(format!("m{i}"))).collect();
    let r = fresh.enqueue_batch(t, many).await.unwrap();
    assert!(r.iter().all(|e| e.status == EnqueueStatus::Created));
    assert!(f.queue.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_change_that_fails_midway_leaves_the_topic_open_to_producers() {
    let f = Fixture::new().await;
    let t = "half-split";
    let mut c = f.conn.clone();
    let p2 = punctual::internal::partition_name(t, 2, 3);
    // Redis refuses to mark a new partition: its meta is not a hash (a
    // stand-in for any error after the old layout was checked and marked).
    let _: () = redis::cmd("SET")
        .arg(key(&p2, "meta"))
        .arg("not a hash")
        .query_async(&mut c)
        .await
        .unwrap();
    let err = f.queue.set_partitions(t, 3).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    // Producers still get in, with the old count or a fresh read of it.
    let fresh = crate::util::queue(&f.server).await;
    assert_eq!(fresh.partitions(t).await.unwrap(), 1);
    let r = fresh.enqueue(t, Job::new("x").id("a")).await;
    assert_eq!(r.expect("an enqueue").status, EnqueueStatus::Created);
    f.queue.enqueue(t, Job::new("x").id("b")).await.unwrap();
    assert!(f.queue.check(t).await.unwrap().is_empty());

    // A change that stopped after storing the new count in P:partitions
    // (a crash before the new partitions were marked: here they still hold
    // the marks of an earlier change back to 1) is finished by running it
    // again: enqueues are refused until then.
    let u = "half-split-2";
    for i in 0..3 {
        let _: () = redis::cmd("HSET")
            .arg(key(&punctual::internal::partition_name(u, i, 3), "meta"))
            .arg("partitions")
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg(format!("{PREFIX}:partitions"))
        .arg(u)
        .arg(3)
        .query_async(&mut c)
        .await
        .unwrap();
    let stuck = crate::util::queue(&f.server).await;
    assert!(stuck.enqueue(u, Job::new("x").id("c")).await.is_err());
    f.queue.set_partitions(u, 3).await.unwrap();
    let r = crate::util::queue(&f.server)
        .await
        .enqueue_batch(
            u,
            (0..12).map(|i| Job::new("y").id(format!("m{i}"))).collect(),
        )
        .await
        .unwrap();
    assert!(r.iter().all(|e| e.status == EnqueueStatus::Created));
    assert!(f.queue.check(u).await.unwrap().is_empty());
}
