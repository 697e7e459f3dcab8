//! Fencing: a delivery's token is its lease. A stale holder is refused every
//! ack, fail and extend once the job moved on (re-delivered, replaced, out of
//! running), tokens never repeat, not even after a restart that lost writes,
//! and ack compares tokens as the strings claim returned.

use std::path::{Path, PathBuf};
use std::time::Duration;

use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{Delivery, EnqueueOptions, EnqueueStatus, Job, Queue, State};
use punctual_testkit::eventually;

use crate::steps::{claim_one, claim_retrying, eval, seed, state_of, tick};
use crate::util::{key, part, topic_keys, Fixture, RedisServer, LONG_LEASE};

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

/// A stale holder (A) must be refused everything once B holds the job.
async fn assert_fenced(q: &Queue, t: &str, a: &punctual::Delivery, b: &punctual::Delivery) {
    assert_eq!(a.id, b.id);
    assert_ne!(
        a.token, b.token,
        "the token of the claim before the restart was handed out again"
    );
    assert!(
        b.token > a.token,
        "tokens went back: {} then {}",
        a.token,
        b.token
    );
    let stale = a.lease();
    assert_eq!(
        raw::ack(q, &part(t), std::slice::from_ref(&stale))
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::extend(q, &part(t), std::slice::from_ref(&stale), LONG_LEASE)
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::fail(q, &part(t), &a.lease(), "stale", FailKind::Permanent)
            .await
            .unwrap(),
        Failed::Stale
    );
    let info = q
        .get(t, &b.id)
        .await
        .unwrap()
        .expect("B's job is still there");
    assert_eq!(info.state, State::Running);
    // B, the holder, can ack.
    assert_eq!(
        raw::ack(q, &part(t), &[b.lease()]).await.unwrap(),
        vec![true]
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_do_not_repeat_after_a_restart_from_an_rdb_snapshot() {
    let mut server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    let t = "rdb";
    q.enqueue(t, Job::new("x").id("x")).await.unwrap();
    assert_eq!(server.cli(&["SAVE"]).unwrap().trim(), "OK");
    // A claims after the snapshot: its claim is lost with the restart.
    let a = claim_retrying(&q, t).await;
    server.restart();
    let b = claim_retrying(&q, t).await;
    assert_eq!(b.attempt, 1, "the restart rolled the claim back");
    assert_fenced(&q, t, &a, &b).await;
}

/// The AOF file that receives new writes (Redis 7: appendonlydir/*.incr.aof).
fn incr_aof(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incr AOF file")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_do_not_repeat_after_an_aof_everysec_restart_that_lost_the_claim() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let q = crate::util::queue(&server).await;
    let t = "aof";
    q.enqueue(t, Job::new("x").id("x")).await.unwrap();
    let aof = incr_aof(server.dir());
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    eventually(
        Duration::from_secs(5),
        "the enqueue in the AOF",
        async || size(&aof) > 0,
    )
    .await;
    let before = size(&aof);
    let a = claim_retrying(&q, t).await;
    eventually(Duration::from_secs(5), "the claim in the AOF", async || {
        size(&aof) > before
    })
    .await;
    // What `appendfsync everysec` loses when the host dies within a second:
    // the claim's writes never reached the disk.
    server.kill();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&aof)
        .unwrap()
        .set_len(before)
        .unwrap();
    server.restart();
    let b = claim_retrying(&q, t).await;
    assert_eq!(b.attempt, 1, "the restart rolled the claim back");
    assert_fenced(&q, t, &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_token_written_another_way_is_refused_and_changes_nothing() {
    let f = Fixture::new().await;
    let t = "forms";
    let token = seed(&f, t).await;
    let digits = token.to_string();
    let keys = topic_keys(t);
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    let forms = [
        format!("0x{token:x}"),
        format!("0X{token:X}"),
        format!("+{digits}"),
        format!("0{digits}"),
        format!("{}.{}e{}", &digits[..1], &digits[1..], digits.len() - 1),
        format!("{digits}.0"),
        format!(" {digits}"),
        format!("{digits} "),
    ];
    for form in &forms {
        // Ten years: an extend that took the token would move the deadline.
        for (script, argv) in [
            ("ack", vec!["run", form.as_str()]),
            ("extend", vec!["315360000000", "run", form.as_str()]),
            ("fail", vec!["run", form.as_str(), "err", "", "1"]),
        ] {
            let r = eval(script, &keys, &argv)
                .query_async::<redis::Value>(&mut c)
                .await;
            match &r {
                Err(e) => assert_eq!(e.code(), Some("PUNCTUAL_INVALID"), "{script} {form}: {e}"),
                // ack: none acked, the first pair refused.
                Ok(v) => assert!(
                    matches!(v, redis::Value::Array(a) if a == &[redis::Value::Int(0), redis::Value::Int(1)])
                        || script == "fail",
                    "{script} {form:?} took the token: {v:?}"
                ),
            }
            assert_eq!(
                f.snapshot().await,
                snap,
                "{script} {form:?}: something was written ({r:?})"
            );
        }
    }
    // The token as claim wrote it still works.
    let ok: Vec<i64> = eval("ack", &keys, &["run", &digits])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ok, vec![1]);
    assert!(f.queue.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_follow_the_counter_when_it_is_ahead_of_the_clock() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "ahead");
    q.enqueue_batch(t, vec![Job::new("a").id("a"), Job::new("b").id("b")])
        .await
        .unwrap();
    // Far ahead of Redis's clock in µs (as after a burst, or a clock that
    // stepped back): the tokens must still go up from it.
    let ahead: i64 = 4_000_000_000_000_000;
    f.cli(&["SET", &key(t, "seq"), &ahead.to_string()]);
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    // One token for the claim, both its jobs leased under it.
    let tokens: Vec<i64> = got.iter().map(|d| d.token).collect();
    assert_eq!(tokens, vec![ahead + 1, ahead + 1]);
    let seq: i64 = f.cli(&["GET", &key(t, "seq")]).trim().parse().unwrap();
    assert_eq!(seq, ahead + 1);
    // Behind the clock: tokens start above the claim's time in µs.
    f.cli(&["SET", &key(t, "seq"), "7"]);
    let pairs: Vec<Lease> = got.iter().map(|d| d.lease()).collect();
    assert_eq!(
        raw::ack(q, &part(t), &pairs).await.unwrap(),
        vec![true, true]
    );
    q.enqueue(t, Job::new("c").id("c")).await.unwrap();
    let d = raw::claim(q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(d.token, d.claimed_us + 1);
}

async fn q_twice(f: &Fixture) {
    let t = "acktwice";
    let keys = &topic_keys(t);
    f.queue.enqueue(t, Job::new("p").id("twice")).await.unwrap();
    let d = claim_retrying(&f.queue, t).await;
    assert_eq!(d.id, "twice");
    let tok = d.token.to_string();
    let mut c = f.conn.clone();
    let got: Vec<i64> = eval("ack", keys, &["twice", &tok, "twice", &tok])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        got,
        [1, 2],
        "one pair acked, the second pair of one id refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_compares_tokens_as_the_strings_claim_returned() {
    let f = Fixture::new().await;
    let t = "acktok";
    let token = seed(&f, t).await;
    let keys = topic_keys(t);
    let mut c = f.conn.clone();
    let tok = token.to_string();
    // The stored entry ends in ":<token>"; a token made of its last digits
    // only, one with another first digit, or one more, is refused, and the
    // job stays running.
    let other_first = format!(
        "{}{}",
        if tok.starts_with('2') { '3' } else { '2' },
        &tok[1..]
    );
    for wrong in [tok[1..].to_string(), other_first, (token + 1).to_string()] {
        let got: Vec<i64> = eval("ack", &keys, &["run", &wrong])
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(got, [0, 1], "token {wrong} (the lease's is {tok})");
    }
    assert!(f.queue.get(t, "run").await.unwrap().is_some());
    // Tokens are compared as the strings claim returned: the same value
    // with a leading zero is not a token at all (an error, nothing
    // changed); the token itself acks.
    let zero = format!("0{tok}");
    let err = eval("ack", &keys, &["run", &zero])
        .query_async::<Vec<i64>>(&mut c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("decimal integers"), "{err}");
    assert!(f.queue.get(t, "run").await.unwrap().is_some());
    // The attempts entry form ("0A:T") must carry the live mark and read:
    // the stored entry without its mark, or with no attempt, is an error.
    for bad in [format!("1:{tok}"), format!("0:{tok}"), format!("01:{tok}x")] {
        let err = eval("ack", &keys, &["run", &bad])
            .query_async::<Vec<i64>>(&mut c)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("decimal integers"), "{bad}: {err}");
    }
    assert!(f.queue.get(t, "run").await.unwrap().is_some());
    // An unmarked entry given back as it is stored proves nothing: the job
    // is not running (here in ready), so it is an error, not an ack.
    let att = keys[8].clone();
    let _: i64 = redis::cmd("HSET")
        .arg(&att)
        .arg("ready")
        .arg("1:999")
        .query_async(&mut c)
        .await
        .unwrap();
    let err = eval("ack", &keys, &["ready", "1:999"])
        .query_async::<Vec<i64>>(&mut c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("decimal integers"), "{err}");
    let _: i64 = redis::cmd("HDEL")
        .arg(&att)
        .arg("ready")
        .query_async(&mut c)
        .await
        .unwrap();
    let got: Vec<i64> = eval("ack", &keys, &["run", &tok])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(got, [1]);
    assert!(f.queue.get(t, "run").await.unwrap().is_none());
    // Twice the same pair in one call: acked once.
    q_twice(&f).await;
}
