//! Bulk writes (docs/PROTOCOL.md "Bulk writes"): a script's HSET or ZADD of
//! 16 entries or more converts a listpack-encoded key with one extra entry
//! (the field "" or a member with a NUL byte) and deletes it in the same
//! script. These tests hold the scripts to that: after bulk enqueues,
//! claims, promotions and cold moves no key holds the extra entry, every
//! count is the jobs' own, the keys are hashtables or skiplists, and a
//! small batch leaves small keys as they were.

use punctual::{Job, When};

use crate::util::{key, part, Fixture, LONG_LEASE, TICK_ALL};

/// The extra ZADD member: a NUL byte and 64 '-'.
fn bulk_member() -> String {
    format!("\0{}", "-".repeat(64))
}

async fn encoding(f: &Fixture, topic: &str, name: &str) -> String {
    f.cmd(redis::cmd("OBJECT").arg("ENCODING").arg(key(topic, name)))
        .await
}

/// Neither extra entry is in any of the topic's hashes and sorted sets.
async fn assert_no_extra_entry(f: &Fixture, topic: &str) {
    for name in ["jobs", "attempts", "meta", "stats"] {
        let has: bool = f
            .cmd(redis::cmd("HEXISTS").arg(key(topic, name)).arg(""))
            .await;
        assert!(!has, "{name} holds the field \"\"");
    }
    for name in ["pool", "ready", "running", "dead"] {
        let score: Option<f64> = f
            .cmd(
                redis::cmd("ZSCORE")
                    .arg(key(topic, name))
                    .arg(bulk_member()),
            )
            .await;
        assert_eq!(score, None, "{name} holds the bulk member");
    }
}

/// 100 jobs with a short payload (records under 64 bytes: the jobs hash
/// would stay a listpack to 128 entries), enqueued due now, claimed in one
/// call and acked: the keys written in bulk are converted, and every
/// step's counts are the jobs' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_claim_converts_its_keys_and_leaves_no_extra_entry() {
    let f = Fixture::new().await;
    let t = "bulk";
    let jobs: Vec<Job> = (0..100)
        .map(|i| Job::new("p").id(format!("j{i}")))
        .collect();
    f.queue.enqueue_batch(t, jobs).await.unwrap();
    assert_no_extra_entry(&f, t).await;
    assert_eq!(f.card(t, "ready").await + f.card(t, "pool").await, 100);
    let jobs_len: usize = f.cmd(redis::cmd("HLEN").arg(key(t, "jobs"))).await;
    assert_eq!(jobs_len, 100);
    assert_eq!(encoding(&f, t, "jobs").await, "hashtable");

    let got = punctual::raw::claim(&f.queue, &part(t), 1000, LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(got.len(), 100);
    assert_no_extra_entry(&f, t).await;
    assert_eq!(f.card(t, "running").await, 100);
    let att_len: usize = f.cmd(redis::cmd("HLEN").arg(key(t, "attempts"))).await;
    assert_eq!(att_len, 100, "one attempts entry per job claimed");
    assert_eq!(encoding(&f, t, "attempts").await, "hashtable");
    assert_eq!(encoding(&f, t, "running").await, "skiplist");
    let claimed: u64 = f
        .cmd(redis::cmd("HGET").arg(key(t, "stats")).arg("claimed"))
        .await;
    assert_eq!(claimed, 100);
    assert!(f.queue.check(t).await.unwrap().is_empty());

    let leases: Vec<_> = got.iter().map(|d| d.lease()).collect();
    let acked = punctual::raw::ack(&f.queue, &part(t), &leases)
        .await
        .unwrap();
    assert!(acked.iter().all(|&a| a), "every lease acks");
    for name in ["jobs", "attempts", "running"] {
        let n: usize = f.cmd(redis::cmd("EXISTS").arg(key(t, name))).await;
        assert_eq!(n, 0, "{name} is left after every job was acked");
    }
}

/// 100 jobs due in 100 ms go to pool, then the tick promotes all of them
/// to ready in one call: both are converted, and hold the jobs and nothing
/// else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_promotion_leaves_no_extra_entry() {
    let f = Fixture::new().await;
    let t = "promote";
    let jobs: Vec<Job> = (0..100)
        .map(|i| {
            Job::new("p")
                .id(format!("j{i}"))
                .when(When::Delay(std::time::Duration::from_millis(100)))
        })
        .collect();
    f.queue.enqueue_batch(t, jobs).await.unwrap();
    assert_eq!(f.card(t, "pool").await, 100);
    assert_eq!(encoding(&f, t, "pool").await, "skiplist");
    assert_no_extra_entry(&f, t).await;
    let now = f.now_ms().await;
    f.wait_past(now + 100).await;
    let tick = punctual::raw::tick(&f.queue, &part(t), &TICK_ALL)
        .await
        .unwrap();
    assert_eq!(tick.promoted, 100);
    assert_eq!(f.card(t, "ready").await, 100);
    assert_eq!(encoding(&f, t, "ready").await, "skiplist");
    assert_eq!(f.card(t, "pool").await, 0);
    assert_no_extra_entry(&f, t).await;
    assert!(f.queue.check(t).await.unwrap().is_empty());
}

/// A batch under 16 entries writes plainly: a small topic's keys stay
/// listpacks (Redis's compact encoding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_batch_leaves_small_keys_as_listpacks() {
    let f = Fixture::new().await;
    let t = "small";
    let jobs: Vec<Job> = (0..15).map(|i| Job::new("p").id(format!("j{i}"))).collect();
    f.queue.enqueue_batch(t, jobs).await.unwrap();
    assert_eq!(encoding(&f, t, "jobs").await, "listpack");
    let got = punctual::raw::claim(&f.queue, &part(t), 15, LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(got.len(), 15);
    assert_eq!(encoding(&f, t, "attempts").await, "listpack");
    assert_eq!(encoding(&f, t, "running").await, "listpack");
    assert_no_extra_entry(&f, t).await;
}

/// Jobs placed cold (meta cold_after 1 s, the topic opened by a tick) and
/// moved into pool by one tick: meta cold_n counts them down to exactly 0
/// (the tick counts what its ZADD added, the extra member not included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_cold_move_counts_only_the_jobs() {
    let f = Fixture::new().await;
    let t = "coldbulk";
    let meta = key(t, "meta");
    let _: i64 = f
        .cmd(redis::cmd("HSET").arg(&meta).arg("cold_after").arg(1000))
        .await;
    punctual::raw::tick(&f.queue, &part(t), &TICK_ALL)
        .await
        .unwrap();
    let jobs: Vec<Job> = (0..100)
        .map(|i| {
            Job::new("p")
                .id(format!("j{i}"))
                .when(When::Delay(std::time::Duration::from_secs(5)))
        })
        .collect();
    f.queue.enqueue_batch(t, jobs).await.unwrap();
    let cold_n = || async {
        let v: i64 = f.cmd(redis::cmd("HGET").arg(&meta).arg("cold_n")).await;
        v
    };
    assert_eq!(cold_n().await, 100, "placed cold");
    assert_eq!(f.card(t, "pool").await, 0);
    let _: i64 = f
        .cmd(redis::cmd("HSET").arg(&meta).arg("cold_after").arg(600_000))
        .await;
    punctual::raw::tick(&f.queue, &part(t), &TICK_ALL)
        .await
        .unwrap();
    assert_eq!(f.card(t, "pool").await, 100, "moved into pool");
    assert_eq!(encoding(&f, t, "pool").await, "skiplist");
    assert_eq!(cold_n().await, 0, "cold_n after the move");
    assert_no_extra_entry(&f, t).await;
    assert!(f.queue.check(t).await.unwrap().is_empty());
}
