//! Never early: no job is claimed, nor its handler started, before its due
//! time, to the microsecond.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use punctual::raw::{self};
use punctual::{EnqueueStatus, Job};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::steps::tick;
use crate::util::{part, Fixture, LONG_LEASE, TICK_ALL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_early_every_claim_is_at_or_after_its_due_time() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "never-early");
    let mut rng = StdRng::seed_from_u64(2);
    let n = 2000;
    let delays: Vec<i64> = (0..n).map(|_| rng.random_range(0..=1500)).collect();
    let jobs: Vec<Job> = delays
        .iter()
        .enumerate()
        .map(|(i, d)| Job::new(i.to_string()).delay(Duration::from_millis(*d as u64)))
        .collect();

    let before = f.now_ms().await;
    let res = q.enqueue_batch(t, jobs).await.unwrap();
    let after = f.now_ms().await;
    assert_eq!(res.len(), n);
    assert!(res.iter().all(|e| e.status == EnqueueStatus::Created));
    // id -> (index in the batch, requested delay)
    let sent: HashMap<String, (usize, i64)> = res
        .iter()
        .zip(&delays)
        .enumerate()
        .map(|(i, (e, d))| (e.id.clone(), (i, *d)))
        .collect();

    let mut claimed = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while claimed.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} claimed",
            claimed.len()
        );
        tick(q, t).await;
        let got = raw::claim(q, &part(t), 1000, LONG_LEASE).await.unwrap();
        let now = f.now_ms().await;
        for d in &got {
            let (index, delay) = sent[&d.id];
            assert!(
                now >= d.due_ms,
                "job {} claimed early: Redis time {now} < due {}",
                d.id,
                d.due_ms
            );
            // A delay counts from the enqueue's ms rounded up (never
            // early to the microsecond); created is that ms rounded down.
            let gap = d.due_ms - d.created_ms;
            assert!(
                gap == delay || (delay > 0 && gap == delay + 1),
                "job {}: due must be created + the requested delay, got {gap} for {delay}",
                d.id
            );
            assert!(
                (before..=after).contains(&d.created_ms),
                "job {} created at {} outside the enqueue call [{before}, {after}]",
                d.id,
                d.created_ms
            );
            assert_eq!(d.payload, index.to_string().into_bytes());
            assert_eq!(d.attempt, 1);
            assert!(claimed.insert(d.id.clone()), "job {} claimed twice", d.id);
        }
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    tick(q, t).await;
    assert!(raw::claim(q, &part(t), 1000, LONG_LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(f.card(t, "running").await, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_job_never_starts_before_enqueue_time_plus_delay_to_the_microsecond() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "sub-ms");
    let mut c = f.conn.clone();
    for i in 0..40 {
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
        let before_us = s * 1_000_000 + us;
        q.enqueue(
            t,
            Job::new("x")
                .id(format!("j{i}"))
                .delay(Duration::from_millis(1)),
        )
        .await
        .unwrap();
        let d = loop {
            raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
            let mut got = raw::claim(q, &part(t), 1, LONG_LEASE).await.unwrap();
            if let Some(d) = got.pop() {
                break d;
            }
        };
        assert!(
            d.claimed_us >= before_us + 1000,
            "job {i} started {} us early (enqueued after {before_us} us, claimed at {} us)",
            before_us + 1000 - d.claimed_us,
            d.claimed_us
        );
        assert_eq!(
            raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
            vec![true]
        );
    }
}
