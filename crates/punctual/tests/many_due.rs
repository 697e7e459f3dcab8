//! Many jobs due at once: promoted, claimed and reclaimed in bounded batches,
//! and never promoted past max_ready.

use std::collections::HashSet;
use std::time::Duration;

use punctual::raw::{self, TickLimits};
use punctual::Job;
use punctual_testkit::eventually;

use crate::steps::{pair, tick};
use crate::util::{part, Fixture, LONG_LEASE, TICK_ALL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_8000_due_at_once_are_promoted_claimed_and_reclaimed_in_bounded_batches() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "flood");
    let n = 10_000;
    let now_jobs: Vec<Job> = (0..n).map(|i| Job::new(format!("now {i}"))).collect();
    let r = q.enqueue_batch(t, now_jobs).await.unwrap();
    assert_eq!(r.len(), n);
    let later: Vec<Job> = (0..n)
        .map(|i| Job::new(format!("later {i}")).delay(Duration::from_millis(1 + i as u64 % 20)))
        .collect();
    let r = q.enqueue_batch(t, later).await.unwrap();
    assert_eq!(r.len(), n);
    let enqueued = f.now_ms().await;
    assert_eq!(f.card(t, "ready").await, n);
    assert_eq!(f.card(t, "pool").await, n);
    f.wait_past(enqueued + 21).await;

    // Promote: at most a batch per tick; a batch over 1000 is capped.
    let first = raw::tick(
        q,
        &part(t),
        &TickLimits {
            promote_batch: 5000,
            max_ready: 1_000_000,
            reclaim_batch: 1000,
        },
    )
    .await
    .unwrap();
    assert_eq!(first.promoted, 1000);
    assert!(first.more);
    let (mut promoted, mut ticks) = (first.promoted, 1);
    while promoted < n as u64 {
        let r = raw::tick(
            q,
            &part(t),
            &TickLimits {
                promote_batch: 700,
                max_ready: 1_000_000,
                reclaim_batch: 1000,
            },
        )
        .await
        .unwrap();
        assert!(r.promoted <= 700, "{r:?}");
        assert!(r.promoted > 0, "promotion stalled at {promoted}: {r:?}");
        promoted += r.promoted;
        ticks += 1;
    }
    assert_eq!(promoted, n as u64);
    assert!(ticks >= 14);
    let r = tick(q, t).await;
    assert_eq!((r.promoted, r.more), (0, false));
    assert_eq!(f.card(t, "ready").await, 2 * n);

    // Claim in batches of 1000: everything, once.
    let mut seen = HashSet::new();
    loop {
        let got = raw::claim(q, &part(t), 1000, Duration::from_millis(300))
            .await
            .unwrap();
        assert!(got.len() <= 1000);
        if got.is_empty() {
            break;
        }
        for d in got {
            assert!(seen.insert(d.id), "claimed twice");
        }
    }
    assert_eq!(seen.len(), 2 * n);
    assert_eq!(f.card(t, "running").await, 2 * n);

    // All 20,000 leases expire together: reclaimed in bounded batches.
    let mut reclaimed = 0;
    eventually(
        Duration::from_secs(10),
        "every lease to be reclaimed",
        async || {
            let r = raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
            assert!(r.reclaimed <= 1000, "{r:?}");
            assert_eq!(r.dead, 0);
            reclaimed += r.reclaimed;
            reclaimed == 2 * n as u64
        },
    )
    .await;
    assert_eq!(f.card(t, "running").await, 0);

    // Second delivery of everything, acked in one call (split by the library).
    let mut held = Vec::new();
    loop {
        let got = raw::claim(q, &part(t), 1000, LONG_LEASE).await.unwrap();
        if got.is_empty() {
            break;
        }
        assert!(got.iter().all(|d| d.attempt == 2));
        held.extend(got.iter().map(pair));
    }
    assert_eq!(held.len(), 2 * n);
    let acks = raw::ack(q, &part(t), &held).await.unwrap();
    assert_eq!(acks.len(), 2 * n);
    assert!(acks.iter().all(|a| *a));
    for set in ["pool", "ready", "running", "dead", "jobs"] {
        assert_eq!(f.card(t, set).await, 0, "{set}");
    }
    let stats = q.stats(t).await.unwrap();
    assert_eq!(stats.counters.get("done"), Some(&(2 * n as u64)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_refuses_to_promote_past_max_ready() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "max-ready");
    let jobs: Vec<Job> = (0..50)
        .map(|i| Job::new(format!("{i}")).delay(Duration::from_millis(1)))
        .collect();
    q.enqueue_batch(t, jobs).await.unwrap();
    let enqueued = f.now_ms().await;
    f.wait_past(enqueued + 1).await;

    let r = raw::tick(
        q,
        &part(t),
        &TickLimits {
            max_ready: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(r.promoted, 10, "{r:?}");
    assert_eq!(f.card(t, "ready").await, 10);
    let r = raw::tick(
        q,
        &part(t),
        &TickLimits {
            max_ready: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(r.promoted, 0, "{r:?}");
    assert!(r.refused, "a full ready must be reported: {r:?}");
    assert_eq!(f.card(t, "ready").await, 10);
    assert_eq!(f.card(t, "pool").await, 40);

    // Room for 4 more after claiming 4.
    let got = raw::claim(q, &part(t), 4, LONG_LEASE).await.unwrap();
    assert_eq!(got.len(), 4);
    let r = raw::tick(
        q,
        &part(t),
        &TickLimits {
            max_ready: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(r.promoted, 4, "{r:?}");
    assert!(!r.refused);
    assert_eq!(f.card(t, "ready").await, 10);
    let r = raw::tick(
        q,
        &part(t),
        &TickLimits {
            max_ready: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(r.refused && r.promoted == 0, "{r:?}");
    assert_eq!(f.card(t, "pool").await, 36);
    assert!(q.check(t).await.unwrap().is_empty());
}
