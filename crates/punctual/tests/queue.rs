//! Queue-level semantics: every operation against a private redis-server.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::util::{part, TICK_ALL};
use punctual::raw::{self, FailKind, Failed, Lease, TickLimits};
use punctual::{
    DeadSelector, Delivery, EnqueueOptions, EnqueueStatus, ErrorKind, Job, Queue, State, When,
    MAX_DELAY,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::util::{key, radix36, take_slowlog, topic_keys, Fixture, RedisServer, LONG_LEASE};
use punctual_testkit::eventually;

/// Promote and reclaim with generous limits (tests that check limits pass
/// their own).
async fn tick(q: &Queue, topic: &str) -> raw::Tick {
    raw::tick(q, &part(topic), &TICK_ALL).await.expect("tick")
}

/// Claims exactly one job.
async fn claim_one(q: &Queue, topic: &str, lease: Duration) -> Delivery {
    let mut got = raw::claim(q, &part(topic), 10, lease).await.expect("claim");
    assert_eq!(
        got.len(),
        1,
        "expected exactly one job to claim, got {got:?}"
    );
    got.remove(0)
}

fn pair(d: &Delivery) -> Lease {
    d.lease()
}

fn state_of(info: &Option<punctual::JobInfo>) -> Option<State> {
    info.as_ref().map(|i| i.state)
}

// ---- 1. fencing --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_never_moves_a_lease_deadline_earlier() {
    // No scheduler is told when a deadline moves earlier, so one asleep
    // until the old deadline would reclaim the job up to max_sleep late.
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "extend-shorter");
    q.enqueue(t, Job::new("p").id("j")).await.unwrap();
    let d = claim_one(q, t, Duration::from_secs(60)).await;
    let deadline = || async { q.get(t, "j").await.unwrap().unwrap().state_since_ms };
    let leased = deadline().await.expect("a lease deadline");
    assert_eq!(
        raw::extend(q, &part(t), &[d.lease()], Duration::from_millis(1000))
            .await
            .unwrap(),
        vec![true],
        "the lease is still held"
    );
    assert_eq!(
        deadline().await,
        Some(leased),
        "a shorter extend left the deadline where it was"
    );
    // A longer one moves it later, as before.
    raw::extend(q, &part(t), &[d.lease()], Duration::from_secs(120))
        .await
        .unwrap();
    assert!(deadline().await.unwrap() >= leased + 59_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_token_cannot_ack_fail_or_extend_the_next_delivery() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "fencing");
    q.enqueue(t, Job::new("p").id("j").backoff(vec![Duration::ZERO]))
        .await
        .unwrap();

    let first = claim_one(q, t, Duration::from_millis(300)).await;
    assert_eq!((first.id.as_str(), first.attempt), ("j", 1));

    // The lease runs out; tick reclaims the job (backoff 0: straight to ready).
    eventually(
        Duration::from_secs(5),
        "the lease to be reclaimed",
        async || {
            let r = tick(q, t).await;
            assert_eq!(r.dead, 0);
            r.reclaimed == 1
        },
    )
    .await;
    assert_eq!(state_of(&q.get(t, "j").await.unwrap()), Some(State::Ready));
    // While the job waits in ready, the old token is refused too.
    assert_eq!(
        raw::ack(q, &part(t), &[first.lease()]).await.unwrap(),
        vec![false]
    );
    assert_eq!(state_of(&q.get(t, "j").await.unwrap()), Some(State::Ready));

    let second = claim_one(q, t, LONG_LEASE).await;
    assert_eq!((second.id.as_str(), second.attempt), ("j", 2));
    assert!(
        second.token > first.token,
        "a new claim must get a new, larger token ({} then {})",
        first.token,
        second.token
    );
    let before = q.get(t, "j").await.unwrap().unwrap();
    let snap = f.snapshot().await;

    // The first worker wakes up late: everything it tries is refused.
    assert_eq!(
        raw::ack(q, &part(t), &[first.lease()]).await.unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("j", first.token),
            "late failure",
            FailKind::Retry { after: None }
        )
        .await
        .unwrap(),
        Failed::Stale
    );
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("j", first.token),
            "late permanent failure",
            FailKind::Permanent
        )
        .await
        .unwrap(),
        Failed::Stale
    );
    assert_eq!(
        raw::extend(q, &part(t), &[first.lease()], Duration::from_secs(3600))
            .await
            .unwrap(),
        vec![false]
    );

    // The second delivery is undisturbed: same state, lease and record.
    assert_eq!(f.snapshot().await, snap, "a stale token changed the topic");
    let after = q.get(t, "j").await.unwrap().unwrap();
    assert_eq!(after.state, State::Running);
    assert_eq!(after.attempts, 2);
    assert_eq!(after.state_since_ms, before.state_since_ms);
    assert_eq!(after.last_error, before.last_error);

    assert_eq!(
        raw::extend(q, &part(t), &[second.lease()], LONG_LEASE)
            .await
            .unwrap(),
        vec![true]
    );
    assert_eq!(
        raw::ack(q, &part(t), &[second.lease()]).await.unwrap(),
        vec![true]
    );
    assert!(q.get(t, "j").await.unwrap().is_none());
    assert_eq!(f.card(t, "running").await, 0);
    assert_eq!(f.card(t, "jobs").await, 0);
    // Acking twice is refused, not an error.
    assert_eq!(
        raw::ack(q, &part(t), &[second.lease()]).await.unwrap(),
        vec![false]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_running_job_fences_out_the_old_delivery() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "replace-running");
    q.enqueue(t, Job::new("v1").id("j")).await.unwrap();
    let old = claim_one(q, t, LONG_LEASE).await;

    let r = q
        .enqueue_with(
            t,
            vec![Job::new("v2").id("j")],
            &EnqueueOptions::default().replace(true),
        )
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Replaced);
    assert_eq!(f.card(t, "running").await, 0);

    assert_eq!(
        raw::ack(q, &part(t), &[old.lease()]).await.unwrap(),
        vec![false]
    );
    let new = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(new.payload, b"v2");
    assert_eq!(new.attempt, 1);
    assert_ne!(new.token, old.token);
    assert_eq!(
        raw::ack(q, &part(t), &[old.lease()]).await.unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("j", old.token),
            "old",
            FailKind::Permanent
        )
        .await
        .unwrap(),
        Failed::Stale
    );
    assert_eq!(
        raw::ack(q, &part(t), &[new.lease()]).await.unwrap(),
        vec![true]
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

/// A stale ack of `d` is refused and writes nothing; the job stays in
/// `state`, its attempts counted (1).
async fn assert_stale_ack_refused(f: &Fixture, t: &str, d: &Delivery, state: Option<State>) {
    let snap = f.snapshot().await;
    // Both forms: the attempts entry the claim wrote ("0A:T", what
    // Delivery::lease sends), and the token alone.
    for lease in [d.lease(), Lease::new(&d.id, d.token)] {
        assert_eq!(
            raw::ack(&f.queue, &part(t), std::slice::from_ref(&lease))
                .await
                .unwrap(),
            vec![false],
            "the stale lease {lease:?} acked it",
        );
    }
    assert_eq!(
        f.snapshot().await,
        snap,
        "a stale ack of {:?} changed the topic",
        d.id
    );
    let info = f.queue.get(t, &d.id).await.unwrap();
    assert_eq!(state_of(&info), state, "{:?}", d.id);
    if let Some(info) = info {
        assert_eq!(info.attempts, 1, "{:?}", d.id);
    }
}

// ack proves a lease by the attempts entry alone when it carries the live
// mark: every way out of running must drop the mark (or the entry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_is_refused_after_every_way_out_of_running() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "left-running");
    let hour = Duration::from_secs(3600);
    let short = Duration::from_millis(300);

    // fail, retried: back to pool.
    q.enqueue(t, Job::new("p").id("retried").backoff(vec![hour]))
        .await
        .unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    let retry = FailKind::Retry { after: None };
    let failed = raw::fail(q, &part(t), &d.lease(), "boom", retry).await;
    assert_eq!(failed.unwrap(), Failed::Retry);
    assert_stale_ack_refused(&f, t, &d, Some(State::Pool)).await;

    // fail, permanent: dead.
    q.enqueue(t, Job::new("p").id("failed")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    let failed = raw::fail(q, &part(t), &d.lease(), "boom", FailKind::Permanent).await;
    assert_eq!(failed.unwrap(), Failed::Dead);
    assert_stale_ack_refused(&f, t, &d, Some(State::Dead)).await;

    // Reclaimed by tick: back to pool (backoff 1 h), or dead (attempts used up).
    q.enqueue(t, Job::new("p").id("reclaimed").backoff(vec![hour]))
        .await
        .unwrap();
    let d = claim_one(q, t, short).await;
    eventually(
        Duration::from_secs(5),
        "the lease to be reclaimed",
        async || tick(q, t).await.reclaimed == 1,
    )
    .await;
    assert_stale_ack_refused(&f, t, &d, Some(State::Pool)).await;

    q.enqueue(t, Job::new("p").id("expired").max_attempts(1))
        .await
        .unwrap();
    let d = claim_one(q, t, short).await;
    eventually(
        Duration::from_secs(5),
        "the lease to run out into dead",
        async || tick(q, t).await.dead == 1,
    )
    .await;
    assert_stale_ack_refused(&f, t, &d, Some(State::Dead)).await;

    // Cancelled while running: gone, and its token acks nothing.
    q.enqueue(t, Job::new("p").id("cancelled")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(
        q.cancel(t, "cancelled").await.unwrap(),
        Some(State::Running)
    );
    assert_stale_ack_refused(&f, t, &d, None).await;
    assert!(q.check(t).await.unwrap().is_empty());
}

// An attempts entry without the live mark ("A:T", as versions before the mark
// wrote it while the lease was live, and kept it after) acks only while its
// job is in running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmarked_attempts_entry_acks_only_while_its_job_is_running() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "unmarked");
    let att = key(t, "attempts");
    q.enqueue(t, Job::new("p").id("running")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    let entry: String = f.cmd(redis::cmd("HGET").arg(&att).arg("running")).await;
    assert_eq!(
        entry,
        format!("01:{}", d.token),
        "claim writes the live mark"
    );
    let info = q.get(t, "running").await.unwrap().unwrap();
    assert_eq!(info.attempts, 1, "get reads the marked entry");

    // A job in ready whose entry holds a token, unmarked: refused.
    q.enqueue(t, Job::new("p").id("waiting")).await.unwrap();
    let stale = Lease::new("waiting", d.token + 1000);
    let unmarked = format!("1:{}", stale.token);
    let _: i64 = f
        .cmd(redis::cmd("HSET").arg(&att).arg("waiting").arg(&unmarked))
        .await;
    let snap = f.snapshot().await;
    assert_eq!(
        raw::ack(q, &part(t), std::slice::from_ref(&stale))
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(f.snapshot().await, snap, "a stale ack changed the topic");
    assert_eq!(
        state_of(&q.get(t, "waiting").await.unwrap()),
        Some(State::Ready)
    );

    // The live mark outside running is a broken invariant that check reports.
    let marked = format!("0{unmarked}");
    let _: i64 = f
        .cmd(redis::cmd("HSET").arg(&att).arg("waiting").arg(&marked))
        .await;
    let found = q.check(t).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].id.as_str(), found[0].problem.as_str()),
        ("waiting", "attempts entry marked live outside running")
    );

    // A lease whose entry is unmarked (taken before the mark existed) acks.
    let unmarked = format!("1:{}", d.token);
    let _: i64 = f
        .cmd(redis::cmd("HSET").arg(&att).arg("running").arg(&unmarked))
        .await;
    assert_eq!(
        raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );
    assert!(q.get(t, "running").await.unwrap().is_none());
}

// ack takes the attempts entry the claim wrote ("0A:T") in place of the
// token: the entry of a live lease acks (one string comparison in the
// script); otherwise its token is checked as if given alone, so a stale
// entry is refused, and an unmarked entry acks only while its job runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_takes_the_attempts_entry_of_the_claim() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "ack-entry");
    let att = key(t, "attempts");
    let ack = |l: Lease| async move { raw::ack(q, &part(t), &[l]).await };

    // A live lease: Delivery::lease carries the attempt, and its entry acks.
    q.enqueue(t, Job::new("p").id("live").backoff(vec![Duration::ZERO]))
        .await
        .unwrap();
    let first = claim_one(q, t, LONG_LEASE).await;
    let retry = FailKind::Retry { after: None };
    let failed = raw::fail(q, &part(t), &first.lease(), "boom", retry).await;
    assert_eq!(failed.unwrap(), Failed::Retry);
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!((d.attempt, d.lease().attempt), (2, 2));
    let entry: String = f.cmd(redis::cmd("HGET").arg(&att).arg("live")).await;
    assert_eq!(entry, format!("02:{}", d.token));
    // The first delivery's entry is stale: refused, nothing changed.
    let snap = f.snapshot().await;
    assert_eq!(ack(first.lease()).await.unwrap(), [false]);
    assert_eq!(f.snapshot().await, snap, "a stale entry changed the topic");
    assert_eq!(ack(d.lease()).await.unwrap(), [true]);
    assert!(q.get(t, "live").await.unwrap().is_none());
    assert_eq!(ack(d.lease()).await.unwrap(), [false], "acked twice");

    // The entry form with another attempt is only a wrong shortcut: the
    // token decides, as when given alone.
    q.enqueue(t, Job::new("p").id("other")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    let wrong = Lease::with_attempt("other", d.token, 7);
    assert_eq!(ack(wrong).await.unwrap(), [true]);

    // An unmarked entry ("A:T", a lease taken before the mark): the entry
    // form acks it while the job is in running...
    q.enqueue(t, Job::new("p").id("unmarked")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    let _: i64 = f
        .cmd(
            redis::cmd("HSET")
                .arg(&att)
                .arg("unmarked")
                .arg(format!("1:{}", d.token)),
        )
        .await;
    assert_eq!(ack(d.lease()).await.unwrap(), [true]);
    assert!(q.get(t, "unmarked").await.unwrap().is_none());
    // ... and not once it is out of running (here in ready).
    q.enqueue(t, Job::new("p").id("waiting")).await.unwrap();
    let stale = Lease::with_attempt("waiting", d.token + 1000, 1);
    let _: i64 = f
        .cmd(
            redis::cmd("HSET")
                .arg(&att)
                .arg("waiting")
                .arg(format!("1:{}", stale.token)),
        )
        .await;
    // (A job waiting with an entry is in P:{T}:retried, as a reclaim
    // leaves it.)
    let _: i64 = f
        .cmd(redis::cmd("SADD").arg(key(t, "retried")).arg("waiting"))
        .await;
    let snap = f.snapshot().await;
    assert_eq!(ack(stale).await.unwrap(), [false]);
    assert_eq!(f.snapshot().await, snap, "a stale ack changed the topic");
    assert_eq!(
        state_of(&q.get(t, "waiting").await.unwrap()),
        Some(State::Ready)
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

// ---- 2. never early ----------------------------------------------------

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

// ---- 3. attempts count at claim ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_count_at_claim_so_expiring_leases_reach_dead() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "attempts-lease");
    q.enqueue(
        t,
        Job::new("crash")
            .id("c")
            .max_attempts(3)
            .backoff(vec![Duration::ZERO]),
    )
    .await
    .unwrap();

    for attempt in 1..=3u32 {
        let d = claim_one(q, t, Duration::from_millis(200)).await;
        assert_eq!(d.attempt, attempt);
        assert_eq!(d.max_attempts, 3);
        // Counted at claim: visible before the attempt ends.
        assert_eq!(q.get(t, "c").await.unwrap().unwrap().attempts, attempt);
        // The worker "crashes": never acks; the lease runs out.
        let mut seen = (0, 0);
        eventually(Duration::from_secs(5), "the lease to run out", async || {
            let r = tick(q, t).await;
            seen = (seen.0 + r.reclaimed, seen.1 + r.dead);
            seen != (0, 0)
        })
        .await;
        if attempt < 3 {
            assert_eq!(seen, (1, 0), "attempt {attempt}: reclaimed for a retry");
        } else {
            assert_eq!(seen, (0, 1), "attempt {attempt}: moved to dead");
        }
    }
    let info = q.get(t, "c").await.unwrap().unwrap();
    assert_eq!(info.state, State::Dead);
    assert_eq!(info.attempts, 3);
    let err = info.last_error.expect("a last error");
    assert!(
        err.contains("lease"),
        "last error {err:?} should mention the lease"
    );
    let dead = q.dead_list(t, 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, "c");
    assert!(dead[0]
        .last_error
        .as_deref()
        .unwrap_or("")
        .contains("lease"));
    assert!(raw::claim(q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap()
        .is_empty());
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_reach_dead_with_the_last_error_and_permanent_goes_at_once() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "attempts-fail");
    q.enqueue(
        t,
        Job::new("flaky")
            .id("f")
            .max_attempts(3)
            .backoff(vec![Duration::ZERO]),
    )
    .await
    .unwrap();
    for attempt in 1..=3u32 {
        let d = claim_one(q, t, LONG_LEASE).await;
        assert_eq!(d.attempt, attempt);
        let outcome = raw::fail(
            q,
            &part(t),
            &Lease::new("f", d.token),
            &format!("boom {attempt}"),
            FailKind::Retry { after: None },
        )
        .await
        .unwrap();
        let want = if attempt < 3 {
            Failed::Retry
        } else {
            Failed::Dead
        };
        assert_eq!(outcome, want, "attempt {attempt}");
    }
    let info = q.get(t, "f").await.unwrap().unwrap();
    assert_eq!(info.state, State::Dead);
    assert_eq!(info.attempts, 3);
    assert_eq!(info.last_error.as_deref(), Some("boom 3"));
    let dead = q.dead_list(t, 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].id.as_str(), dead[0].attempts), ("f", 3));
    assert_eq!(dead[0].last_error.as_deref(), Some("boom 3"));
    assert_eq!(dead[0].payload, b"flaky");

    // Permanent: dead after one attempt although five are allowed.
    q.enqueue(t, Job::new("bad").id("p").max_attempts(5))
        .await
        .unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("p", d.token),
            "malformed payload",
            FailKind::Permanent
        )
        .await
        .unwrap(),
        Failed::Dead
    );
    let info = q.get(t, "p").await.unwrap().unwrap();
    assert_eq!(info.state, State::Dead);
    assert_eq!(info.attempts, 1);
    assert_eq!(info.last_error.as_deref(), Some("malformed payload"));
    assert_eq!(q.dead_list(t, 0, 10).await.unwrap().len(), 2);
    assert!(q.check(t).await.unwrap().is_empty());
}

// ---- 4. duplicate ids --------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_enqueue_of_a_dead_id_is_reported_as_dead_not_duplicate() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "deadid");
    q.enqueue(t, Job::new("a").id("order:1")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    let r = raw::fail(q, &part(t), &d.lease(), "declined", FailKind::Permanent)
        .await
        .unwrap();
    assert_eq!(r, Failed::Dead);
    let snap = f.snapshot().await;

    // Alone and in a batch (with a new id beside it): "dead", nothing
    // changed for it; counted as a duplicate.
    let r = q.enqueue(t, Job::new("b").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Dead);
    assert!(r.is_duplicate(), "nothing was enqueued");
    let r = q
        .enqueue_batch(
            t,
            vec![Job::new("c").id("order:1"), Job::new("n").id("new")],
        )
        .await
        .unwrap();
    let st: Vec<_> = r.iter().map(|e| (e.id.as_str(), e.status)).collect();
    assert_eq!(
        st,
        vec![
            ("order:1", EnqueueStatus::Dead),
            ("new", EnqueueStatus::Created)
        ]
    );
    let now = q.get(t, "order:1").await.unwrap().unwrap();
    assert_eq!(
        (now.state, now.payload.as_slice()),
        (State::Dead, &b"a"[..])
    );
    assert_eq!(
        q.stats(t).await.unwrap().counters.get("duplicates"),
        Some(&2)
    );
    q.cancel(t, "new").await.unwrap();
    let mut after = f.snapshot().await;
    let mut before = snap.clone();
    for m in [&mut after, &mut before] {
        m.remove(&key(t, "stats"));
        m.remove(&key(t, "seq"));
    }
    assert_eq!(after, before, "a dead id was changed");

    // A live id elsewhere is still a plain duplicate; replace still applies.
    q.enqueue(t, Job::new("p").id("live")).await.unwrap();
    let r = q.enqueue(t, Job::new("p2").id("live")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Duplicate);
    let replace = EnqueueOptions::default().replace(true);
    let r = q
        .enqueue_with(t, vec![Job::new("d").id("order:1")], &replace)
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Replaced);
    assert_eq!(
        q.get(t, "order:1").await.unwrap().unwrap().state,
        State::Ready
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_ids_change_nothing_replace_applies_and_done_ids_are_free_again() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "dups");
    let hour = Duration::from_secs(3600);
    let r = q
        .enqueue(t, Job::new("a").id("order:1").delay(hour))
        .await
        .unwrap();
    assert_eq!(
        (r.id.as_str(), r.status),
        ("order:1", EnqueueStatus::Created)
    );
    let first = q.get(t, "order:1").await.unwrap().unwrap();
    let snap = f.snapshot().await;

    let r = q.enqueue(t, Job::new("b").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Duplicate);
    assert!(r.is_duplicate());
    let now = q.get(t, "order:1").await.unwrap().unwrap();
    assert_eq!(now.state, State::Pool);
    assert_eq!(now.payload, b"a");
    assert_eq!(now.due_ms, first.due_ms);
    assert_eq!(now.created_ms, first.created_ms);
    // Only the duplicates counter moved.
    let mut after = f.snapshot().await;
    assert!(after.remove(&key(t, "stats")).is_some());
    let mut before = snap.clone();
    before.remove(&key(t, "stats"));
    assert_eq!(after, before, "a duplicate enqueue changed the topic");
    let stats = q.stats(t).await.unwrap();
    assert_eq!(stats.counters.get("duplicates"), Some(&1));

    // Replace: the new payload and due time apply.
    let replace = EnqueueOptions::default().replace(true);
    let r = q
        .enqueue_with(t, vec![Job::new("c").id("order:1")], &replace)
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Replaced);
    let now = q.get(t, "order:1").await.unwrap().unwrap();
    assert_eq!(now.state, State::Ready);
    assert_eq!(now.payload, b"c");
    assert!(now.due_ms < first.due_ms && now.due_ms <= now.now_ms);
    assert_eq!(f.card(t, "pool").await, 0);

    // Done: the id is free again.
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(d.payload, b"c");
    let r = q.enqueue(t, Job::new("d").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Duplicate, "a running job is live");
    assert_eq!(
        raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );
    let r = q.enqueue(t, Job::new("e").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    assert_eq!(q.get(t, "order:1").await.unwrap().unwrap().payload, b"e");

    // The same id twice in one batch: the first wins, with or without replace.
    let r = q
        .enqueue_batch(t, vec![Job::new("x1").id("x"), Job::new("x2").id("x")])
        .await
        .unwrap();
    let st: Vec<_> = r.iter().map(|e| (e.id.as_str(), e.status)).collect();
    assert_eq!(
        st,
        vec![
            ("x", EnqueueStatus::Created),
            ("x", EnqueueStatus::Duplicate)
        ]
    );
    assert_eq!(q.get(t, "x").await.unwrap().unwrap().payload, b"x1");
    let r = q
        .enqueue_with(
            t,
            vec![Job::new("y1").id("y"), Job::new("y2").id("y")],
            &replace,
        )
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Created);
    assert_eq!(r[1].status, EnqueueStatus::Duplicate);
    assert_eq!(q.get(t, "y").await.unwrap().unwrap().payload, b"y1");
    assert!(q.check(t).await.unwrap().is_empty());
}

// ---- 5. bad input ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_and_writes_nothing() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "bad");
    q.enqueue(
        t,
        Job::new("seed").id("seed").delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let snap = f.snapshot().await;
    let cli = f.cli_keys();

    let good = |i: usize| Job::new(format!("good {i}")).id(format!("g{i}"));
    let batch_bad_last = |n: usize, bad: Job| {
        let mut v: Vec<Job> = (0..n).map(good).collect();
        v.push(bad);
        v
    };
    let cases: Vec<(&str, &str, Vec<Job>)> = vec![
        ("topic with braces", "a{b}", vec![Job::new("x")]),
        ("topic with a closing brace", "ab}", vec![Job::new("x")]),
        ("empty topic", "", vec![Job::new("x")]),
        ("topic with '#'", "orders#1", vec![Job::new("x")]),
        ("empty id", t, vec![Job::new("x").id("")]),
        (
            "id over 200 bytes",
            t,
            vec![Job::new("x").id("i".repeat(201))],
        ),
        (
            "payload over 64 KiB",
            t,
            vec![Job::new(vec![b'x'; 64 * 1024 + 1])],
        ),
        (
            "delay over ten years",
            t,
            vec![Job::new("x").when(When::Delay(MAX_DELAY + Duration::from_secs(1)))],
        ),
        ("max attempts 0", t, vec![Job::new("x").max_attempts(0)]),
        (
            "batch whose last job has a bad id",
            t,
            batch_bad_last(99, Job::new("x").id("i".repeat(201))),
        ),
        (
            "batch whose last job has a big payload",
            t,
            batch_bad_last(10, Job::new(vec![b'x'; 64 * 1024 + 1])),
        ),
        (
            "batch of more than 1000 whose last job is bad",
            t,
            batch_bad_last(1500, Job::new("x").max_attempts(0)),
        ),
    ];
    for (what, topic, jobs) in cases {
        let single = jobs.len() == 1;
        let err = if single {
            q.enqueue(topic, jobs.into_iter().next().unwrap())
                .await
                .unwrap_err()
        } else {
            q.enqueue_batch(topic, jobs).await.unwrap_err()
        };
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{what}: {err}");
        assert!(!err.is_retryable(), "{what}");
        assert!(!err.to_string().is_empty());
        assert_eq!(f.snapshot().await, snap, "{what}: something was written");
        assert_eq!(f.cli_keys(), cli, "{what}: keys changed");
    }

    // Reschedule with an absurd delay is refused too.
    let err = q
        .reschedule(t, "seed", When::Delay(MAX_DELAY + Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);

    // A custom payload limit.
    let small = Queue::builder(f.server.url())
        .max_payload(100)
        .connect()
        .await
        .unwrap();
    assert_eq!(small.max_payload(), 100);
    let err = small
        .enqueue(t, Job::new(vec![b'x'; 101]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(f.snapshot().await, snap, "over a custom limit: written");
    assert_eq!(f.cli_keys(), cli);

    // The limits themselves are allowed.
    let ok = vec![
        Job::new(vec![b'x'; 100]).id("at-custom-limit"),
        Job::new("x").id("i".repeat(200)),
        Job::new("x").when(When::Delay(MAX_DELAY)),
        Job::new("x").max_attempts(1),
    ];
    let r = small.enqueue_batch(t, ok).await.unwrap();
    assert!(
        r.iter().all(|e| e.status == EnqueueStatus::Created),
        "{r:?}"
    );
    let r = q
        .enqueue(t, Job::new(vec![b'x'; 64 * 1024]).id("at-default-limit"))
        .await
        .unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    assert!(q.check(t).await.unwrap().is_empty());
}

/// An EVAL of the enqueue script as a producer in another language sends
/// it; each job is five arguments: id, payload, when, max attempts, backoff.
fn raw_enqueue(topic: &str, jobs: &[[&str; 5]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(punctual::internal::script_source("enqueue").unwrap())
        .arg(9)
        .arg(topic_keys(topic));
    cmd.arg("65536").arg("0").arg(jobs.len());
    for j in jobs {
        cmd.arg(&j[..]);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_script_called_raw_rejects_bad_due_times_and_writes_nothing() {
    let f = Fixture::new().await;
    let t = "raw";
    let eval = |jobs: &[[&str; 5]]| raw_enqueue(t, jobs);
    let mut c = f.conn.clone();
    // Sanity: the call shape is right.
    let ok: Vec<redis::Value> = eval(&[["ok", "p", "d1000", "", ""]])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ok.len(), 2);
    let snap = f.snapshot().await;
    let cli = f.cli_keys();

    for when in ["d-5", "a-5", "x5", "d", "d1.5", "5", "", "d 5", "d5ms"] {
        let batches = [
            vec![["", "p", when, "", ""]],
            vec![["first", "p", "d0", "", ""], ["second", "p", when, "", ""]],
        ];
        for jobs in &batches {
            let err = eval(jobs)
                .query_async::<redis::Value>(&mut c)
                .await
                .unwrap_err();
            assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "when {when:?}: {err}");
            assert_eq!(
                f.snapshot().await,
                snap,
                "when {when:?}: something was written"
            );
            assert_eq!(f.cli_keys(), cli);
        }
    }
    // Other malformed fields, for good measure.
    for job in [
        ["", "p", "d0", "0", ""],
        ["", "p", "d0", "x", ""],
        ["", "p", "d0", "", "1;2"],
        [&"i".repeat(201), "p", "d0", "", ""],
        ["", &"x".repeat(65537), "d0", "", ""],
        ["", "p", "d0", "00", ""],
        // 15 digits: Lua would write "1e+15" and the record would be unreadable.
        ["", "p", "d0", "100000000000000", ""],
    ] {
        let err = eval(&[job])
            .query_async::<redis::Value>(&mut c)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
        assert_eq!(f.snapshot().await, snap);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_attempts_up_to_the_bound_are_accepted() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "max-attempts");
    q.enqueue(
        t,
        Job::new("x").id("x").max_attempts(punctual::MAX_ATTEMPTS),
    )
    .await
    .unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(d.max_attempts, punctual::MAX_ATTEMPTS);
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_script_rejects_backoff_steps_over_ten_years() {
    let f = Fixture::new().await;
    let t = "absurd-backoff-raw";
    f.queue
        .enqueue(t, Job::new("seed").id("seed"))
        .await
        .unwrap();
    let snap = f.snapshot().await;
    // The library refuses such a ladder before calling the script ...
    let err = f
        .queue
        .enqueue(
            t,
            Job::new("x").backoff(vec![MAX_DELAY + Duration::from_millis(1)]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    // ... and so must the script, which producers in other languages call.
    let mut c = f.conn.clone();
    for ladder in ["315360000001", "0,99999999999999999999"] {
        let r = raw_enqueue(t, &[["", "p", "d0", "", ladder]])
            .query_async::<redis::Value>(&mut c)
            .await;
        let err = r.expect_err(&format!("backoff {ladder:?} was accepted"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
        assert_eq!(f.snapshot().await, snap);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_topic_defaults_rejects_bad_values_and_writes_nothing() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "absurd-defaults");
    q.set_topic_defaults(t, Some(3), Some(&[Duration::from_secs(1)]))
        .await
        .unwrap();
    let snap = f.snapshot().await;
    let err = q.set_topic_defaults(t, Some(0), None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);
    let err = q
        .set_topic_defaults(
            t,
            None,
            Some(&[Duration::ZERO, MAX_DELAY + Duration::from_secs(1)]),
        )
        .await
        .expect_err("a backoff step over ten years was accepted as a topic default");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);
    let err = q
        .set_topic_defaults("a{b}", Some(3), None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);
}

// ---- 6. cancel, reschedule, get ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_cancel_and_reschedule_by_id_in_every_state() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "by-id");
    let hour = Duration::from_secs(3600);

    // One job in each state.
    q.enqueue(t, Job::new("dead").id("dead")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("dead", d.token),
            "no",
            FailKind::Permanent
        )
        .await
        .unwrap(),
        Failed::Dead
    );
    q.enqueue(t, Job::new("running").id("running"))
        .await
        .unwrap();
    let running = claim_one(q, t, LONG_LEASE).await;
    q.enqueue(t, Job::new("ready").id("ready")).await.unwrap();
    q.enqueue(t, Job::new("pool").id("pool").delay(hour))
        .await
        .unwrap();

    for (id, want) in [
        ("pool", State::Pool),
        ("ready", State::Ready),
        ("running", State::Running),
        ("dead", State::Dead),
    ] {
        let info = q.get(t, id).await.unwrap().expect(id);
        assert_eq!(info.id, id);
        assert_eq!(info.state, want, "{id}");
        assert_eq!(info.payload, id.as_bytes());
        match want {
            State::Pool => {
                // Counted from the enqueue's ms rounded up.
                let gap = info.due_ms - info.created_ms;
                assert!((3_600_000..=3_600_001).contains(&gap), "{gap}");
                assert!(info.due_ms > info.now_ms);
            }
            State::Running => {
                let deadline = info.state_since_ms.expect("a lease deadline");
                assert!(
                    deadline > info.now_ms + 50_000,
                    "{deadline} vs {}",
                    info.now_ms
                );
                assert_eq!(info.attempts, 1);
            }
            State::Dead => assert!(info.state_since_ms.is_some()),
            _ => assert!(info.due_ms <= info.now_ms),
        }
    }
    assert!(q.get(t, "missing").await.unwrap().is_none());

    // Reschedule of running or dead is refused and changes nothing.
    let snap = f.snapshot().await;
    for (id, st) in [("running", State::Running), ("dead", State::Dead)] {
        assert_eq!(q.reschedule(t, id, When::Now).await.unwrap(), Some(st));
        assert_eq!(
            q.reschedule(t, id, When::Delay(hour)).await.unwrap(),
            Some(st)
        );
    }
    assert_eq!(q.reschedule(t, "missing", When::Now).await.unwrap(), None);
    assert_eq!(
        f.snapshot().await,
        snap,
        "a refused reschedule changed something"
    );

    // Pool -> later: still in pool, new due time.
    let before = f.now_ms().await;
    assert_eq!(
        q.reschedule(t, "pool", When::Delay(2 * hour))
            .await
            .unwrap(),
        Some(State::Pool)
    );
    let after = f.now_ms().await;
    let info = q.get(t, "pool").await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    // The delay counts from the call's ms rounded up: at most `after` + 1.
    assert!((before + 7_200_000..=after + 7_200_001).contains(&info.due_ms));

    // Pool -> earlier, still in the future: ready only once due, via tick.
    let before = f.now_ms().await;
    assert_eq!(
        q.reschedule(t, "pool", When::Delay(Duration::from_millis(300)))
            .await
            .unwrap(),
        Some(State::Pool)
    );
    let info = q.get(t, "pool").await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    assert!(info.due_ms >= before + 300);
    let due = info.due_ms;
    let conn = f.conn.clone();
    eventually(
        Duration::from_secs(5),
        "the rescheduled job to be promoted",
        || {
            let conn = conn.clone();
            async move {
                let r = tick(q, t).await;
                let now = crate::util::redis_time_ms(&conn).await;
                if r.promoted > 0 {
                    assert!(now >= due, "promoted at {now}, before its due time {due}");
                }
                r.promoted == 1
            }
        },
    )
    .await;
    assert_eq!(
        state_of(&q.get(t, "pool").await.unwrap()),
        Some(State::Ready)
    );

    // Ready -> later: back to pool.
    assert_eq!(
        q.reschedule(t, "ready", When::Delay(hour)).await.unwrap(),
        Some(State::Ready)
    );
    let info = q.get(t, "ready").await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    assert!(info.due_ms > info.now_ms + 3_500_000);
    // Pool -> due now: straight to ready, no tick needed.
    assert_eq!(
        q.reschedule(t, "ready", When::Now).await.unwrap(),
        Some(State::Pool)
    );
    let info = q.get(t, "ready").await.unwrap().unwrap();
    assert_eq!(info.state, State::Ready);
    assert!(info.due_ms <= info.now_ms);
    // A time in the past means now.
    q.enqueue(t, Job::new("past").id("past").delay(hour))
        .await
        .unwrap();
    let long_ago = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    assert_eq!(
        q.reschedule(t, "past", When::At(long_ago)).await.unwrap(),
        Some(State::Pool)
    );
    assert_eq!(
        state_of(&q.get(t, "past").await.unwrap()),
        Some(State::Ready)
    );
    assert!(q.check(t).await.unwrap().is_empty());

    // Cancel in every state.
    for (id, st) in [
        ("pool", State::Ready),
        ("past", State::Ready),
        ("dead", State::Dead),
        ("running", State::Running),
    ] {
        assert_eq!(q.cancel(t, id).await.unwrap(), Some(st), "{id}");
        assert!(q.get(t, id).await.unwrap().is_none(), "{id}");
    }
    q.enqueue(t, Job::new("p2").id("p2").delay(hour))
        .await
        .unwrap();
    assert_eq!(q.cancel(t, "p2").await.unwrap(), Some(State::Pool));
    assert_eq!(q.cancel(t, "p2").await.unwrap(), None);
    assert_eq!(q.cancel(t, "missing").await.unwrap(), None);

    // The worker of the cancelled running job cannot ack, fail or extend.
    assert_eq!(
        raw::ack(q, &part(t), &[running.lease()]).await.unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("running", running.token),
            "x",
            FailKind::Retry { after: None }
        )
        .await
        .unwrap(),
        Failed::Stale
    );
    assert_eq!(
        raw::extend(q, &part(t), &[running.lease()], LONG_LEASE)
            .await
            .unwrap(),
        vec![false]
    );
    assert!(q.get(t, "running").await.unwrap().is_none());

    // Only "ready" is left.
    assert_eq!(f.card(t, "jobs").await, 1);
    assert_eq!(f.card(t, "ready").await, 1);
    for set in ["pool", "running", "dead"] {
        assert_eq!(f.card(t, set).await, 0, "{set}");
    }
    assert!(q.check(t).await.unwrap().is_empty());
}

// ---- 7. dead letters ---------------------------------------------------

/// Enqueues `ids` one by one and kills each with a permanent failure, each in
/// a later millisecond than the one before.
async fn make_dead(f: &Fixture, t: &str, ids: &[&str]) {
    for id in ids {
        f.queue
            .enqueue(t, Job::new(format!("payload {id}")).id(*id))
            .await
            .unwrap();
        let d = claim_one(&f.queue, t, LONG_LEASE).await;
        assert_eq!(d.id, *id);
        let outcome = raw::fail(
            &f.queue,
            &part(t),
            &Lease::new(id.to_string(), d.token),
            &format!("error {id}"),
            FailKind::Permanent,
        )
        .await
        .unwrap();
        assert_eq!(outcome, Failed::Dead);
        let died = f
            .queue
            .get(t, id)
            .await
            .unwrap()
            .unwrap()
            .state_since_ms
            .unwrap();
        f.wait_past(died).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_page_newest_first_replay_and_purge() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "dead");
    let ids = ["d0", "d1", "d2", "d3", "d4", "d5"];
    make_dead(&f, t, &ids).await;

    let all = q.dead_list(t, 0, 100).await.unwrap();
    let listed: Vec<&str> = all.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        listed,
        vec!["d5", "d4", "d3", "d2", "d1", "d0"],
        "newest first"
    );
    for w in all.windows(2) {
        assert!(w[0].state_since_ms > w[1].state_since_ms);
    }
    for j in &all {
        assert_eq!(j.state, State::Dead);
        assert_eq!(j.attempts, 1);
        assert_eq!(
            j.last_error.as_deref(),
            Some(format!("error {}", j.id).as_str())
        );
        assert_eq!(j.payload, format!("payload {}", j.id).into_bytes());
    }
    let mut paged = Vec::new();
    for offset in [0, 2, 4] {
        let page = q.dead_list(t, offset, 2).await.unwrap();
        assert_eq!(page.len(), 2);
        paged.extend(page.into_iter().map(|j| j.id));
    }
    assert_eq!(paged, listed);
    assert_eq!(q.dead_list(t, 3, 10).await.unwrap().len(), 3);
    assert!(q.dead_list(t, 6, 2).await.unwrap().is_empty());
    assert_eq!(
        q.dead_list(t, 0, 0).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );

    // Replay by id: back to ready, attempts reset, claimable.
    let replayed = q
        .dead_replay(t, DeadSelector::Ids(vec!["d3".into(), "not-dead".into()]))
        .await
        .unwrap();
    assert_eq!(replayed, vec!["d3".to_string()]);
    let info = q.get(t, "d3").await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (State::Ready, 0));
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!((d.id.as_str(), d.attempt), ("d3", 1));
    assert_eq!(
        raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );

    // Replay the two oldest.
    let replayed = q.dead_replay(t, DeadSelector::Oldest(2)).await.unwrap();
    assert_eq!(replayed, vec!["d0".to_string(), "d1".to_string()]);
    let mut got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let got_ids: Vec<(&str, u32)> = got.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    assert_eq!(got_ids, vec![("d0", 1), ("d1", 1)]);
    let acks: Vec<_> = got.iter().map(pair).collect();
    assert_eq!(
        raw::ack(q, &part(t), &acks).await.unwrap(),
        vec![true, true]
    );

    // Purge by id, then all.
    assert_eq!(
        q.dead_purge(t, DeadSelector::Ids(vec!["d4".into(), "d3".into()]))
            .await
            .unwrap(),
        1
    );
    assert!(q.get(t, "d4").await.unwrap().is_none());
    assert_eq!(q.dead_purge(t, DeadSelector::All).await.unwrap(), 2);
    assert!(q.get(t, "d2").await.unwrap().is_none());
    assert!(q.get(t, "d5").await.unwrap().is_none());
    assert_eq!(f.card(t, "dead").await, 0);
    assert_eq!(f.card(t, "jobs").await, 0);
    assert_eq!(q.dead_purge(t, DeadSelector::All).await.unwrap(), 0);
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_replay_of_more_than_are_dead_replays_them_all() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "replay-more");
    make_dead(&f, t, &["a", "b"]).await;
    let replayed = q.dead_replay(t, DeadSelector::Oldest(5)).await.unwrap();
    assert_eq!(replayed, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(f.card(t, "ready").await, 2);
    // Nothing dead: nothing to do, not an error.
    assert!(q
        .dead_replay(t, DeadSelector::Oldest(1))
        .await
        .unwrap()
        .is_empty());
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let acks: Vec<_> = got.iter().map(pair).collect();
    assert_eq!(
        raw::ack(q, &part(t), &acks).await.unwrap(),
        vec![true, true]
    );
    make_dead(&f, t, &["c"]).await;
    let replayed = q.dead_replay(t, DeadSelector::All).await.unwrap();
    assert_eq!(replayed, vec!["c".to_string()]);
    assert_eq!(f.card(t, "dead").await, 0);
    assert!(q.check(t).await.unwrap().is_empty());
}

// ---- 8. check ----------------------------------------------------------

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

// ---- 9. orphan lease ---------------------------------------------------

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

// ---- 10. NOSCRIPT ------------------------------------------------------

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

// ---- 11. many due at once ----------------------------------------------

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

// ---- 12. max_ready -------------------------------------------------------

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

// ---- 13. generated ids -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_ids_are_unique_and_sort_by_creation_order() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "ids");
    let mut rng = StdRng::seed_from_u64(13);
    let mut ids = Vec::new();
    for round in 0..30 {
        let n = rng.random_range(1..=200);
        let jobs: Vec<Job> = (0..n).map(|i| Job::new(format!("{round}.{i}"))).collect();
        let r = q.enqueue_batch(t, jobs).await.unwrap();
        assert_eq!(r.len(), n);
        ids.extend(r.into_iter().map(|e| {
            assert_eq!(e.status, EnqueueStatus::Created);
            e.id
        }));
        ids.push(q.enqueue(t, Job::new("single")).await.unwrap().id);
        // Claims draw tokens from the same sequence: ids must still sort.
        if round % 3 == 0 {
            raw::claim(q, &part(t), 5, LONG_LEASE).await.unwrap();
        }
    }
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "ids out of order: {:?} then {:?}", w[0], w[1]);
    }
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
    assert_eq!(f.card(t, "jobs").await, ids.len());
    // Enqueues to another topic do not disturb this one's order, nor does
    // the clock moving on.
    q.enqueue("ids-other", Job::new("other")).await.unwrap();
    let now = f.now_ms().await;
    f.wait_past(now).await;
    let last = q.enqueue(t, Job::new("last")).await.unwrap().id;
    assert!(ids.last().unwrap() < &last);
}

// ---- 14. large batches -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_batches_are_split_and_results_keep_input_order() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "big-batch");
    let n = 2500;
    let given = |i: usize| i.is_multiple_of(3) && i != 1500;
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            let j = Job::new(i.to_string());
            if given(i) {
                j.id(format!("given:{i}"))
            } else if i == 1500 {
                // The same id as job 0, in another chunk: a duplicate.
                j.id("given:0")
            } else {
                j
            }
        })
        .collect();
    let r = q.enqueue_batch(t, jobs).await.unwrap();
    assert_eq!(r.len(), n);
    for (i, e) in r.iter().enumerate() {
        if given(i) {
            assert_eq!(e.id, format!("given:{i}"));
        }
        let want = if i == 1500 {
            EnqueueStatus::Duplicate
        } else {
            EnqueueStatus::Created
        };
        assert_eq!(e.status, want, "job {i}");
    }
    assert_eq!(r[1500].id, "given:0");
    let unique: HashSet<_> = r.iter().map(|e| &e.id).collect();
    assert_eq!(unique.len(), n - 1);
    assert_eq!(f.card(t, "jobs").await, n - 1);
    // Each result names the job at its position: its payload is its index.
    for (i, e) in r.iter().enumerate() {
        let info = q.get(t, &e.id).await.unwrap().unwrap();
        let want = if i == 1500 { 0 } else { i };
        assert_eq!(info.payload, want.to_string().into_bytes(), "job {i}");
    }
}

/// A batch goes in calls of enqueue_chunk jobs (250 by default), so that no
/// producer holds Redis long; the setting is bounded by the script's own
/// limit of 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_goes_in_calls_of_the_enqueue_chunk() {
    let f = Fixture::new().await;
    let t = "chunked";
    assert_eq!(f.queue.enqueue_chunk(), punctual::DEFAULT_ENQUEUE_CHUNK);
    // Loads the script and registers the topic first.
    f.queue.enqueue(t, Job::new("warm")).await.unwrap();
    let jobs = |n: usize| (0..n).map(|i| Job::new(i.to_string())).collect::<Vec<_>>();
    let before = f.server.command_calls("evalsha");
    let r = f.queue.enqueue_batch(t, jobs(600)).await.unwrap();
    assert!(r.iter().all(|e| e.status == EnqueueStatus::Created));
    assert_eq!(
        f.server.command_calls("evalsha") - before,
        3,
        "600 jobs in calls of 250"
    );

    let big = Queue::builder(f.server.url())
        .enqueue_chunk(punctual::MAX_BATCH)
        .connect()
        .await
        .unwrap();
    let before = f.server.command_calls("evalsha");
    big.enqueue_batch(t, jobs(1000)).await.unwrap();
    assert_eq!(
        f.server.command_calls("evalsha") - before,
        1,
        "1,000 jobs in one call"
    );
    assert_eq!(f.card(t, "ready").await, 1601);

    for bad in [0, punctual::MAX_BATCH + 1] {
        let err = Queue::builder(f.server.url())
            .enqueue_chunk(bad)
            .connect()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad}: {err}");
        assert!(err.to_string().contains("1 to 1000 jobs"), "{err}");
    }
}

#[tokio::test]
async fn replace_moves_a_job_between_pool_and_ready_without_leaving_a_copy() {
    let f = Fixture::new().await;
    let q = &f.queue;
    let replace = EnqueueOptions::default().replace(true);
    // ready -> pool
    q.enqueue("t", Job::new("a").id("x")).await.unwrap();
    let r = q
        .enqueue_with(
            "t",
            vec![Job::new("b").id("x").delay(Duration::from_secs(60))],
            &replace,
        )
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Replaced);
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready), (1, 0));
    // pool -> ready
    q.enqueue_with("t", vec![Job::new("c").id("x")], &replace)
        .await
        .unwrap();
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready), (0, 1));
    // pool -> pool keeps one entry with the new due time
    q.enqueue_with(
        "t",
        vec![Job::new("d").id("x").delay(Duration::from_secs(5))],
        &replace,
    )
    .await
    .unwrap();
    q.enqueue_with(
        "t",
        vec![Job::new("e").id("x").delay(Duration::from_secs(50))],
        &replace,
    )
    .await
    .unwrap();
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready), (1, 0));
    let j = q.get("t", "x").await.unwrap().unwrap();
    assert_eq!(j.payload, b"e");
    assert!(j.due_ms - j.now_ms > 40_000);
    // running -> ready: the lease goes too
    q.enqueue_with("t", vec![Job::new("f").id("x")], &replace)
        .await
        .unwrap();
    let d = raw::claim(q, &part("t"), 1, LONG_LEASE).await.unwrap();
    assert_eq!(d.len(), 1);
    q.enqueue_with("t", vec![Job::new("g").id("x")], &replace)
        .await
        .unwrap();
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready, s.running), (0, 1, 0));
    assert!(q.check("t").await.unwrap().is_empty());
}

#[tokio::test]
async fn attempts_live_outside_the_record_and_leave_with_it() {
    let f = Fixture::new().await;
    let q = &f.queue;
    q.enqueue("t", Job::new("x").id("a").backoff(vec![Duration::ZERO]))
        .await
        .unwrap();
    let rec_before: String = f
        .cmd(redis::cmd("HGET").arg(key("t", "jobs")).arg("a"))
        .await;
    let d = raw::claim(q, &part("t"), 1, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    // A claim leaves the record as it was and counts in the attempts hash.
    let rec_after: String = f
        .cmd(redis::cmd("HGET").arg(key("t", "jobs")).arg("a"))
        .await;
    assert_eq!(rec_before, rec_after);
    let att: String = f
        .cmd(redis::cmd("HGET").arg(key("t", "attempts")).arg("a"))
        .await;
    // "0A:T": the live mark while the lease is live (PROTOCOL.md "Attempts
    // and tokens").
    assert_eq!(att, format!("01:{}", d.token));
    assert_eq!(q.get("t", "a").await.unwrap().unwrap().attempts, 1);
    assert_eq!(
        raw::ack(q, &part("t"), &[d.lease()]).await.unwrap(),
        vec![true]
    );
    let left: i64 = f.cmd(redis::cmd("HLEN").arg(key("t", "attempts"))).await;
    assert_eq!(left, 0, "the attempts entry goes with the job");
    // An attempts entry without its record is a violation check reports.
    let _: i64 = f
        .cmd(
            redis::cmd("HSET")
                .arg(key("t", "attempts"))
                .arg("ghost")
                .arg("1:9"),
        )
        .await;
    let v = q.check("t").await.unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(
        (v[0].id.as_str(), v[0].problem.as_str()),
        ("ghost", "attempts entry without a record")
    );
}

#[tokio::test]
async fn a_generated_id_never_overwrites_a_live_job() {
    let f = Fixture::new().await;
    let q = &f.queue;
    // The next generated id will be <8 digits of the ms><sequence 101>. Make
    // that id live, for every millisecond of the next 3 s, with ids of our
    // own: the generator must skip it, not overwrite it.
    let _: () = f.cmd(redis::cmd("SET").arg(key("t", "seq")).arg(100)).await;
    let now = f.now_ms().await;
    let taken: Vec<String> = (now..now + 3000)
        .map(|ms| format!("{:0>8}{:0>4}", radix36(ms), radix36(101)))
        .collect();
    let mine = taken
        .iter()
        .map(|id| Job::new("mine").id(id.clone()))
        .collect();
    q.enqueue_batch("t", mine).await.unwrap();
    let generated = q.enqueue("t", Job::new("gen")).await.unwrap();
    assert!(
        f.now_ms().await < now + 3000,
        "the generation fell in the window"
    );
    assert_eq!(generated.status, EnqueueStatus::Created);
    assert!(!taken.contains(&generated.id), "{} was live", generated.id);
    assert!(generated.id.ends_with(&format!("{:0>4}", radix36(102))));
    let stamp = &generated.id[..8];
    let clash = taken.iter().find(|id| id.starts_with(stamp)).unwrap();
    assert_eq!(q.get("t", clash).await.unwrap().unwrap().payload, b"mine");
    assert_eq!(q.stats("t").await.unwrap().ready, 3001);
}

/// A batch whose ids are all to be generated goes without ids ("=*n",
/// "~*n") and gets back the first id only; the library counts the others
/// up from it, also where their last four digits wrap from zzzz to 0000.
#[tokio::test]
async fn a_batch_of_generated_ids_is_sent_without_ids_and_gets_them_across_the_wrap() {
    let f = Fixture::new().await;
    let q = &f.queue;
    let _: () = f
        .cmd(
            redis::cmd("SET")
                .arg(key("t", "seq"))
                .arg(1_679_616 * 7 - 4),
        )
        .await;
    let mut slow = f.conn.clone();
    f.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    take_slowlog(&mut slow).await;
    let alike = (0..6).map(|i| Job::new(format!("a{i}"))).collect();
    let alike = q.enqueue_batch("t", alike).await.unwrap();
    let own = (0..6)
        .map(|i| Job::new(format!("b{i}")).delay(Duration::from_millis(60_000 + i)))
        .collect();
    let own = q.enqueue_batch("t", own).await.unwrap();
    let enqueue = redis::Script::new(&punctual::internal::script_source("enqueue").unwrap());
    let log = take_slowlog(&mut slow).await;
    let forms: Vec<&str> = log
        .iter()
        .filter(|(_, args)| args.get(1).map(String::as_str) == Some(enqueue.get_hash()))
        .filter_map(|(_, args)| args.get(14).map(String::as_str))
        .collect();
    assert!(
        forms.contains(&"=*6") && forms.contains(&"~*6"),
        "{forms:?}"
    );
    let suffixes: Vec<&str> = alike.iter().chain(&own).map(|e| &e.id[8..]).collect();
    assert_eq!(
        suffixes,
        [
            "zzzx", "zzzy", "zzzz", "0000", "0001", "0002", "0003", "0004", "0005", "0006", "0007",
            "0008"
        ]
    );
    for (i, e) in alike.iter().enumerate() {
        let job = q.get("t", &e.id).await.unwrap().unwrap();
        assert_eq!(job.payload, format!("a{i}").into_bytes());
        assert_eq!(e.status, EnqueueStatus::Created);
    }
    for (i, e) in own.iter().enumerate() {
        let job = q.get("t", &e.id).await.unwrap().unwrap();
        assert_eq!(
            (job.payload, job.state),
            (format!("b{i}").into_bytes(), State::Pool)
        );
    }
}

#[tokio::test]
async fn a_batch_of_generated_ids_skips_a_live_one_in_its_middle() {
    let f = Fixture::new().await;
    let q = &f.queue;
    // A batch of three takes sequence numbers 101, 102, 103 as candidates
    // (looked up together); 102 is live for every millisecond of the next
    // 3 s, so the batch must get 101, 103 and then 104 (past the
    // candidates, looked up one by one).
    let _: () = f.cmd(redis::cmd("SET").arg(key("t", "seq")).arg(100)).await;
    let now = f.now_ms().await;
    let taken: Vec<String> = (now..now + 3000)
        .map(|ms| format!("{:0>8}{:0>4}", radix36(ms), radix36(102)))
        .collect();
    for chunk in taken.chunks(1000) {
        let mine = chunk
            .iter()
            .map(|id| Job::new("mine").id(id.clone()))
            .collect();
        q.enqueue_batch("t", mine).await.unwrap();
    }
    let got = q
        .enqueue_batch("t", (0..3).map(|i| Job::new(format!("gen{i}"))).collect())
        .await
        .unwrap();
    assert!(
        f.now_ms().await < now + 3000,
        "the generation fell in the window"
    );
    let suffixes: Vec<&str> = got.iter().map(|e| &e.id[8..]).collect();
    let want: Vec<String> = [101, 103, 104]
        .iter()
        .map(|s| format!("{:0>4}", radix36(*s)))
        .collect();
    assert_eq!(suffixes, want);
    for (i, e) in got.iter().enumerate() {
        assert_eq!(e.status, EnqueueStatus::Created);
        assert_eq!(
            q.get("t", &e.id).await.unwrap().unwrap().payload,
            format!("gen{i}").into_bytes()
        );
    }
    let stamp = &got[0].id[..8];
    let clash = taken.iter().find(|id| id.starts_with(stamp)).unwrap();
    assert_eq!(q.get("t", clash).await.unwrap().unwrap().payload, b"mine");
}
