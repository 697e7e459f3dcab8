//! Attempts: counted at claim, so leases that keep expiring reach dead;
//! failures reach dead with the last error, a permanent one at once; the
//! attempts entries live outside the record and leave with it; a job sent
//! back to wait (retried set) keeps counting.

use std::time::Duration;

use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{EnqueueOptions, EnqueueStatus, Job, State};
use punctual_testkit::eventually;

use crate::steps::{claim_one, claim_retrying, tick};
use crate::util::{key, part, Fixture, LONG_LEASE, TICK_ALL};

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

/// The members of P:{T}:retried, sorted; meta retried_n must count them.
async fn retried(f: &Fixture, t: &str) -> Vec<String> {
    let mut m: Vec<String> = f.cmd(redis::cmd("SMEMBERS").arg(key(t, "retried"))).await;
    m.sort();
    let n: Option<i64> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried_n"))
        .await;
    assert_eq!(n.unwrap_or(0), m.len() as i64, "meta retried_n: {m:?}");
    m
}

/// A job sent back to wait with its attempts entry, by fail's retry or by a
/// reclaim, is in P:{T}:retried until a claim takes it: the claim counts its
/// attempts on from its entry, though a claim reads entries only for the
/// set's ids. A job that never failed is claimed on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_sent_back_to_wait_keeps_counting_its_attempts() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "retried");
    q.enqueue(t, Job::new("p").id("a")).await.unwrap();
    q.enqueue(t, Job::new("p").id("b")).await.unwrap();
    let first = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    assert_eq!(first.iter().map(|d| d.attempt).collect::<Vec<_>>(), [1, 1]);
    let meta: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried"))
        .await;
    assert_eq!(meta.as_deref(), Some("1"), "a new topic's set is trusted");
    let (a, b) = if first[0].id == "a" {
        (&first[0], &first[1])
    } else {
        (&first[1], &first[0])
    };
    // a: failed, retried at once; b: acked.
    let retry = FailKind::Retry {
        after: Some(Duration::ZERO),
    };
    assert!(matches!(
        raw::fail(q, &part(t), &a.lease(), "boom", retry)
            .await
            .unwrap(),
        Failed::Retry
    ));
    assert_eq!(retried(&f, t).await, ["a"]);
    assert_eq!(raw::ack(q, &part(t), &[b.lease()]).await.unwrap(), [true]);
    q.enqueue(t, Job::new("p").id("c")).await.unwrap();
    let second = raw::claim(q, &part(t), 2, Duration::from_millis(1))
        .await
        .unwrap();
    let mut got: Vec<(&str, u32)> = second.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    got.sort();
    assert_eq!(got, [("a", 2), ("c", 1)]);
    assert!(
        retried(&f, t).await.is_empty(),
        "the claim took a out of the set"
    );
    // Both leases expire: the reclaim sends both back, a after attempt 2
    // (to the pool: the default ladder's second step is 5 s), c after 1 (to
    // ready). a stays in the set when it is rescheduled to now.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let r = raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    assert_eq!(r.reclaimed, 2);
    assert_eq!(retried(&f, t).await, ["a", "c"]);
    assert!(q.check(t).await.unwrap().is_empty());
    assert_eq!(
        q.reschedule(t, "a", punctual::When::Now).await.unwrap(),
        Some(State::Pool)
    );
    assert_eq!(retried(&f, t).await, ["a", "c"]);
    let third = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    let mut got: Vec<(&str, u32)> = third.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    got.sort();
    assert_eq!(got, [("a", 3), ("c", 2)]);
    assert!(retried(&f, t).await.is_empty());
    let leases: Vec<Lease> = third.iter().map(|d| d.lease()).collect();
    assert_eq!(raw::ack(q, &part(t), &leases).await.unwrap(), [true, true]);
}

/// A topic whose attempts entries may predate P:{T}:retried (written by a
/// version without it: meta retried unset, the attempts hash not empty)
/// has every claimed id's entry read, and is trusted only once the attempts
/// hash is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_from_before_the_retried_set_reads_every_entry() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "before-retried");
    q.enqueue(t, Job::new("p").id("old")).await.unwrap();
    // As an earlier version left a job reclaimed twice: waiting, with an
    // unmarked entry, in no set.
    let _: i64 = f
        .cmd(
            redis::cmd("HSET")
                .arg(key(t, "attempts"))
                .arg("old")
                .arg("2:7"),
        )
        .await;
    let d = claim_retrying(q, t).await;
    assert_eq!((d.id.as_str(), d.attempt), ("old", 3));
    let meta: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried"))
        .await;
    assert_eq!(meta, None, "trusted while an entry was there");
    assert_eq!(raw::ack(q, &part(t), &[d.lease()]).await.unwrap(), [true]);
    // The attempts hash is empty now: the next claim trusts the set.
    q.enqueue(t, Job::new("p").id("new")).await.unwrap();
    let d = claim_retrying(q, t).await;
    assert_eq!(d.attempt, 1);
    let meta: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried"))
        .await;
    assert_eq!(meta.as_deref(), Some("1"));
}

/// A retried job that leaves without a claim (cancelled, replaced) leaves
/// P:{T}:retried too; and check reports a waiting job with an entry that the
/// set is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_that_is_cancelled_or_replaced_leaves_the_set() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "retried-gone");
    for id in ["x", "y", "z"] {
        q.enqueue(t, Job::new("p").id(id)).await.unwrap();
    }
    let got = raw::claim(q, &part(t), 3, LONG_LEASE).await.unwrap();
    let later = FailKind::Retry {
        after: Some(Duration::from_secs(3600)),
    };
    for d in &got {
        let out = raw::fail(q, &part(t), &d.lease(), "later", later)
            .await
            .unwrap();
        assert_eq!(out, Failed::Retry);
    }
    assert_eq!(retried(&f, t).await, ["x", "y", "z"]);
    assert!(q.check(t).await.unwrap().is_empty());
    q.cancel(t, "x").await.unwrap();
    let replaced = q
        .enqueue_with(
            t,
            vec![Job::new("again").id("y")],
            &EnqueueOptions::default().replace(true),
        )
        .await
        .unwrap();
    assert_eq!(replaced[0].status, EnqueueStatus::Replaced);
    assert_eq!(retried(&f, t).await, ["z"]);
    // Taken out of the set by hand: check finds z. And a member that is
    // not waiting (an id of no job, added by hand): check finds it too.
    let _: i64 = f
        .cmd(redis::cmd("SREM").arg(key(t, "retried")).arg("z"))
        .await;
    let _: i64 = f
        .cmd(redis::cmd("SADD").arg(key(t, "retried")).arg("ghost"))
        .await;
    assert_eq!(retried(&f, t).await, ["ghost"]);
    let found = q.check(t).await.unwrap();
    let found: Vec<(&str, &str)> = found
        .iter()
        .map(|v| (v.id.as_str(), v.problem.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("ghost", "in P:{T}:retried, not waiting"),
            ("z", "waiting with an attempts entry, not in P:{T}:retried")
        ]
    );
}

/// P:{T}:retried is not among the scripts' KEYS: on a Redis Cluster whose
/// slot is migrating, touching it where it is not fails the script. So a
/// script touches it only when meta retried_n says it has members, and
/// then before any other write. Here the key holds a string, so that any
/// touch fails (WRONGTYPE) as the migrating slot's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retried_set_is_touched_only_with_members_and_before_any_write() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "retried-touch");
    let set = key(t, "retried");
    let _: () = f.cmd(redis::cmd("SET").arg(&set).arg("not a set")).await;
    for id in ["a", "b", "c"] {
        q.enqueue(t, Job::new("p").id(id)).await.unwrap();
    }
    // No member: claim, ack, cancel and replace never touch it.
    let got = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    assert_eq!(got.len(), 2);
    q.cancel(t, "c").await.unwrap();
    let opts = EnqueueOptions::default().replace(true);
    q.enqueue_with(t, vec![Job::new("p").id("c")], &opts)
        .await
        .unwrap();
    assert_eq!(
        raw::ack(q, &part(t), &[got[0].lease()]).await.unwrap(),
        [true]
    );
    // A retry must add a member: it fails, and writes nothing.
    let snap = f.snapshot().await;
    let retry = FailKind::Retry {
        after: Some(Duration::ZERO),
    };
    let err = raw::fail(q, &part(t), &got[1].lease(), "boom", retry)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(f.snapshot().await, snap, "a failed fail wrote something");
    // With members (as meta counts them), a claim touches the set before
    // it writes anything; so do cancel and replace.
    let _: i64 = f
        .cmd(
            redis::cmd("HSET")
                .arg(key(t, "meta"))
                .arg("retried_n")
                .arg("1"),
        )
        .await;
    let snap = f.snapshot().await;
    let err = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let err = q.cancel(t, "c").await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let err = q
        .enqueue_with(t, vec![Job::new("q").id("c")], &opts)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(f.snapshot().await, snap, "a failed call wrote something");
}
