//! `Queue::check`: nothing to report after a random mix of operations, and
//! every violation injected by hand reported.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use punctual::raw::{self, FailKind, Lease, TickLimits};
use punctual::{DeadSelector, EnqueueOptions, Job, State, When};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::steps::{claim_one, claim_retrying, pair, state_of, tick};
use crate::util::{key, part, Fixture, LONG_LEASE};

/// Picks an element of a non-empty slice.
fn pick<'a, T>(rng: &mut StdRng, v: &'a [T]) -> &'a T {
    &v[rng.random_range(0..v.len())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_finds_nothing_after_a_random_mix_of_operations() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "mix");
    q.set_topic_defaults(
        t,
        Some(2),
        Some(&[Duration::ZERO, Duration::from_millis(30)]),
    )
    .await
    .unwrap();
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let replace = EnqueueOptions::default().replace(true);
    let mut known: Vec<String> = Vec::new();
    let mut held: Vec<Lease> = Vec::new();
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    let ms = |rng: &mut StdRng, max: u64| Duration::from_millis(rng.random_range(0..=max));

    for step in 0..2000 {
        let op = match rng.random_range(0..100) {
            0..=19 => {
                let n = rng.random_range(1..=4);
                let jobs: Vec<Job> = (0..n)
                    .map(|i| {
                        let j = Job::new(format!("{step}.{i}")).delay(ms(&mut rng, 200));
                        if rng.random_bool(0.5) {
                            j.id(format!("k{}", rng.random_range(0..40)))
                        } else {
                            j
                        }
                    })
                    .collect();
                let opts = if rng.random_bool(0.3) {
                    replace.clone()
                } else {
                    EnqueueOptions::default()
                };
                let r = q.enqueue_with(t, jobs, &opts).await.unwrap();
                known.extend(r.into_iter().map(|e| e.id));
                "enqueue"
            }
            20..=27 if !known.is_empty() => {
                let id = pick(&mut rng, &known).clone();
                q.cancel(t, &id).await.unwrap();
                "cancel"
            }
            28..=35 if !known.is_empty() => {
                let id = pick(&mut rng, &known).clone();
                let when = if rng.random_bool(0.3) {
                    When::Now
                } else {
                    When::Delay(ms(&mut rng, 200))
                };
                q.reschedule(t, &id, when).await.unwrap();
                "reschedule"
            }
            36..=50 => {
                let k = rng.random_range(1..=5);
                let lease = Duration::from_millis(rng.random_range(20..=400));
                let got = raw::claim(q, &part(t), k, lease).await.unwrap();
                held.extend(got.iter().map(pair));
                "claim"
            }
            51..=62 if !held.is_empty() => {
                let i = rng.random_range(0..held.len());
                let h = held.swap_remove(i);
                raw::ack(q, &part(t), &[h]).await.unwrap();
                "ack"
            }
            63..=70 if !held.is_empty() => {
                let i = rng.random_range(0..held.len());
                let h = held.swap_remove(i);
                let retry = rng.random_bool(0.5).then(|| ms(&mut rng, 50));
                let permanent = rng.random_bool(0.2);
                raw::fail(
                    q,
                    &part(t),
                    &h,
                    "random failure",
                    if permanent {
                        FailKind::Permanent
                    } else {
                        FailKind::Retry { after: retry }
                    },
                )
                .await
                .unwrap();
                "fail"
            }
            71..=76 if !held.is_empty() => {
                let h = pick(&mut rng, &held).clone();
                let lease = Duration::from_millis(rng.random_range(20..=400));
                raw::extend(q, &part(t), &[h], lease).await.unwrap();
                "extend"
            }
            77..=90 => {
                let (b, r) = (rng.random_range(1..=50), rng.random_range(1..=50));
                raw::tick(
                    q,
                    &part(t),
                    &TickLimits {
                        promote_batch: b,
                        max_ready: 1_000_000,
                        reclaim_batch: r,
                    },
                )
                .await
                .unwrap();
                "tick"
            }
            91..=95 => {
                let dead = q.dead_list(t, 0, 20).await.unwrap();
                if dead.is_empty() || rng.random_bool(0.3) {
                    q.dead_replay(t, DeadSelector::Oldest(rng.random_range(1..=3)))
                        .await
                        .unwrap();
                } else {
                    let ids = vec![pick(&mut rng, &dead).id.clone(), "not-dead".into()];
                    q.dead_replay(t, DeadSelector::Ids(ids)).await.unwrap();
                }
                "replay"
            }
            96..=99 => {
                let dead = q.dead_list(t, 0, 20).await.unwrap();
                if dead.is_empty() || rng.random_bool(0.3) {
                    q.dead_purge(t, DeadSelector::Oldest(1)).await.unwrap();
                } else {
                    let ids = vec![pick(&mut rng, &dead).id.clone()];
                    q.dead_purge(t, DeadSelector::Ids(ids)).await.unwrap();
                }
                "purge"
            }
            _ => "skipped",
        };
        *ops.entry(op).or_default() += 1;
        if step % 250 == 249 {
            let v = q.check(t).await.unwrap();
            assert!(v.is_empty(), "after step {step}: {v:?}");
        }
        if known.len() > 400 {
            known.drain(..200);
        }
    }
    // Every kind of operation ran, and some jobs reached every state.
    for op in [
        "enqueue",
        "cancel",
        "reschedule",
        "claim",
        "ack",
        "fail",
        "extend",
        "tick",
        "replay",
        "purge",
    ] {
        assert!(
            ops.get(op).copied().unwrap_or(0) > 20,
            "too few {op}: {ops:?}"
        );
    }
    let stats = q.stats(t).await.unwrap();
    for c in [
        "claimed",
        "done",
        "retried",
        "dead",
        "reclaimed",
        "promoted",
        "replayed",
    ] {
        assert!(
            stats.counters.get(c).copied().unwrap_or(0) > 0,
            "{c}: {stats:?}"
        );
    }
    let v = q.check(t).await.unwrap();
    assert!(v.is_empty(), "{v:?}");
    let sets = stats.pool + stats.ready + stats.running + stats.dead;
    assert_eq!(sets as usize, f.card(t, "jobs").await, "{stats:?}");

    // Drain: every live job ends done or dead, and then nothing is left.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the topic did not drain");
        tick(q, t).await;
        let got = raw::claim(q, &part(t), 1000, LONG_LEASE).await.unwrap();
        if !got.is_empty() {
            let acks: Vec<_> = got.iter().map(pair).collect();
            assert!(raw::ack(q, &part(t), &acks)
                .await
                .unwrap()
                .iter()
                .all(|a| *a));
        }
        let s = q.stats(t).await.unwrap();
        if s.pool + s.ready + s.running == 0 {
            break;
        }
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let v = q.check(t).await.unwrap();
    assert!(v.is_empty(), "{v:?}");
    q.dead_purge(t, DeadSelector::All).await.unwrap();
    assert_eq!(f.card(t, "jobs").await, 0);
    assert_eq!(f.card(t, "dead").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_violations_injected_by_hand() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "broken");
    // Due in 5 minutes: in pool, not in the cold pool (10 minutes ahead).
    let later = Duration::from_secs(300);
    for id in ["both", "lost", "fine"] {
        q.enqueue(t, Job::new(id).id(id).delay(later))
            .await
            .unwrap();
    }
    q.enqueue(t, Job::new("gone").id("gone")).await.unwrap();
    claim_one(q, t, LONG_LEASE).await;
    assert!(q.check(t).await.unwrap().is_empty());

    // In pool and ready at once.
    assert_eq!(f.cli(&["ZADD", &key(t, "ready"), "1", "both"]).trim(), "1");
    // A running entry whose record was deleted.
    assert_eq!(f.cli(&["HDEL", &key(t, "jobs"), "gone"]).trim(), "1");
    // A record in no set.
    assert_eq!(f.cli(&["ZREM", &key(t, "pool"), "lost"]).trim(), "1");

    let found: BTreeMap<String, String> = q
        .check(t)
        .await
        .unwrap()
        .into_iter()
        .map(|v| {
            assert_eq!(v.topic, t);
            (v.id, v.problem)
        })
        .collect();
    let want: BTreeMap<String, String> = [
        ("both", "in pool,ready"),
        ("gone", "no record (in running)"),
        ("lost", "record in no set"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(found, want);
    assert_eq!(
        state_of(&q.get(t, "lost").await.unwrap()),
        Some(State::Orphan)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_a_running_job_without_an_attempts_entry() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "no-attempts");
    q.enqueue(t, Job::new("x").id("x")).await.unwrap();
    claim_retrying(q, t).await;
    assert!(q.check(t).await.unwrap().is_empty());
    assert_eq!(f.cli(&["HDEL", &key(t, "attempts"), "x"]).trim(), "1");
    let found = q.check(t).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].id, "x");
    assert_eq!(found[0].problem, "running without an attempts entry");
}
