//! Leases as claim writes them and ack reads them: one attempts entry per
//! claimed job (its attempt and the claim's token, with the live mark), each
//! delivery and each ack flag its own in the compact replies and the grouped
//! ack, an id leased once per claim, and a claim or tick of some due jobs
//! leaving exactly the others.

use std::time::Duration;

use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{Job, State};

use crate::steps::{claim_one, eval, plant_id_not_utf8, seed, state_of};
use crate::util::{key, part, take_slowlog, topic_keys, Fixture, LONG_LEASE, TICK_ALL};

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

/// claim makes one attempts entry string per attempt (its jobs share its
/// token): every entry of a batch of 1,000 is exactly "0", the job's
/// attempt, ":" and the claim's token, with mixed attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_writes_each_attempts_entry_as_the_attempt_and_token_it_returns() {
    let f = Fixture::new().await;
    let t = "entries";
    let jobs: Vec<Job> = (0..1000)
        .map(|i| Job::new("p").id(format!("j{i}")))
        .collect();
    f.queue.enqueue_batch(t, jobs).await.unwrap();
    let keys = topic_keys(t);
    let mut c = f.conn.clone();
    // Jobs that ran before (entries unmarked, as a retry leaves them).
    for (id, old) in [("j0", "3:5"), ("j500", "41:7"), ("j999", "1:9")] {
        let _: i64 = f
            .cmd(redis::cmd("HSET").arg(&keys[8]).arg(id).arg(old))
            .await;
    }
    let reply: Vec<redis::Value> = eval("claim", &keys, &["1000", "60000"])
        .query_async(&mut c)
        .await
        .unwrap();
    // Header (time, max, wait, the claim's token, m), two entries per job,
    // the three retried jobs' (j, attempt), the pool's next due time.
    assert_eq!(reply.len(), 5 + 2 * 1000 + 2 * 3 + 1);
    let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).unwrap();
    let (token, m) = (int(&reply[3]), int(&reply[4]));
    assert_eq!(m, 1000);
    let retried: std::collections::HashMap<i64, i64> = reply[5 + 2000..5 + 2000 + 6]
        .chunks(2)
        .map(|p| (int(&p[0]), int(&p[1])))
        .collect();
    let entries: std::collections::HashMap<String, String> =
        f.cmd(redis::cmd("HGETALL").arg(&keys[8])).await;
    let mut attempts = std::collections::BTreeSet::new();
    for (j, job) in (1..).zip(reply[5..5 + 2 * 1000].chunks(2)) {
        let id: String = redis::from_redis_value(job[0].clone()).unwrap();
        let attempt = retried.get(&j).copied().unwrap_or(1);
        attempts.insert(attempt);
        assert_eq!(entries[&id], format!("0{attempt}:{token}"), "job {id}");
    }
    assert_eq!(attempts.into_iter().collect::<Vec<_>>(), [1, 2, 4, 42]);
}

/// claim replies with an attempt only for the jobs not on their first one,
/// and the claim's token; ack with the count acked and the refused positions.
/// The client must give each delivery its own attempt (also when a job
/// before it was not handed out: an id that is not UTF-8), the claim's
/// token, and each lease its own flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_delivery_and_each_ack_flag_is_its_own_in_the_compact_replies() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "compact");
    let ids = ["a", "b", "c", "d"];
    q.enqueue_batch(t, ids.iter().map(|id| Job::new("p").id(*id)).collect())
        .await
        .unwrap();
    let mut c = f.conn.clone();
    // The id that is not UTF-8 comes first (score 0) and ran before, as did
    // b and d (entries unmarked, as a retry leaves them).
    let bad = plant_id_not_utf8(&f, t, "a").await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key(t, "attempts"))
        .arg(bad)
        .arg("4:1")
        .arg("b")
        .arg("2:5")
        .arg("d")
        .arg("6:9")
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let seen: Vec<(&str, u32)> = got.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    assert_eq!(seen, [("a", 1), ("b", 3), ("c", 1), ("d", 7)]);
    for d in &got {
        let entry: String = redis::cmd("HGET")
            .arg(key(t, "attempts"))
            .arg(&d.id)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(entry, format!("0{}:{}", d.attempt, d.token), "job {}", d.id);
    }
    // a, b with a token not its own, c, a again, d.
    let by = |id: &str| got.iter().find(|d| d.id == id).unwrap().lease();
    let wrong = Lease::new("b", got[1].token + 1000);
    let flags = raw::ack(q, &part(t), &[by("a"), wrong, by("c"), by("a"), by("d")])
        .await
        .unwrap();
    assert_eq!(flags, [true, false, true, false, true]);
    let b = q.get(t, "b").await.unwrap().expect("b is still there");
    assert_eq!((b.state, b.attempts), (State::Running, 3));
    for id in ["a", "c", "d"] {
        assert!(q.get(t, id).await.unwrap().is_none(), "{id} was not acked");
    }
    assert_eq!(raw::ack(q, &part(t), &[by("b")]).await.unwrap(), [true]);
}

/// The jobs of one claim share its token, so an ack of many jobs goes in
/// the grouped form (a token per group, one argument per job). Each flag is
/// still the job's own: a stale lease (the job re-delivered under another
/// token), a cancelled job and an id given twice are refused in their
/// places, though the ids went to the script sorted by token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_ack_refuses_each_stale_cancelled_or_repeated_job_in_its_place() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "grouped");
    let ids: Vec<String> = (0..10).map(|i| format!("j{i}")).collect();
    q.enqueue_batch(t, ids.iter().map(|id| Job::new("p").id(id)).collect())
        .await
        .unwrap();
    let first = raw::claim(q, &part(t), 5, LONG_LEASE).await.unwrap();
    let second = raw::claim(q, &part(t), 5, LONG_LEASE).await.unwrap();
    assert_eq!((first.len(), second.len()), (5, 5));
    for claim in [&first, &second] {
        assert!(
            claim.iter().all(|d| d.token == claim[0].token),
            "the jobs of one claim share its token: {claim:?}"
        );
    }
    assert!(second[0].token > first[0].token);
    // first[3] re-delivered under a later token; second[0] cancelled.
    f.cli(&[
        "HSET",
        &key(t, "attempts"),
        &first[3].id,
        &format!("02:{}", second[0].token + 1),
    ]);
    assert_eq!(
        q.cancel(t, &second[0].id).await.unwrap(),
        Some(State::Running)
    );
    // The two claims interleaved (second's first), then first[1] again.
    let mut leases: Vec<Lease> = second
        .iter()
        .zip(&first)
        .flat_map(|(s, f)| [s.lease(), f.lease()])
        .collect();
    leases.push(first[1].lease());
    let mut slow = f.conn.clone();
    f.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    take_slowlog(&mut slow).await;
    let flags = raw::ack(q, &part(t), &leases).await.unwrap();
    let refused: Vec<usize> = (0..flags.len()).filter(|&i| !flags[i]).collect();
    assert_eq!(refused, [0, 7, 10], "{leases:?}");
    // It went in the grouped form: EVALSHA, the SHA, 9, the nine keys, then
    // "" and two groups.
    let ack = redis::Script::new(&punctual::internal::script_source("ack").unwrap());
    let log = take_slowlog(&mut slow).await;
    let calls: Vec<&[String]> = log
        .iter()
        .map(|(_, args)| args.as_slice())
        .filter(|args| args.get(1).map(String::as_str) == Some(ack.get_hash()))
        .collect();
    // (Twice when the first met NOSCRIPT: the script is loaded and the
    // call sent again.)
    assert!(!calls.is_empty(), "{log:?}");
    for call in calls {
        assert_eq!(call[12..14], ["", "2"], "{call:?}");
    }
    let left = q
        .get(t, &first[3].id)
        .await
        .unwrap()
        .expect("the re-delivered job stays");
    assert_eq!(left.state, State::Running);
    for d in first.iter().chain(&second).filter(|d| d.id != first[3].id) {
        assert!(q.get(t, &d.id).await.unwrap().is_none(), "{} is left", d.id);
    }
    assert!(q.check(t).await.unwrap().is_empty());
}

/// A grouped ack whose entries all match takes the fast path; an id given
/// twice there is still acked once (its later place refused), and the
/// leases of a claim whose jobs were reclaimed and claimed again are all
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_ack_refuses_a_repeat_on_the_fast_path_and_a_reclaimed_claim() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "grouped-fast");
    let jobs = (0..12)
        .map(|i| Job::new("p").id(format!("k{i:02}")))
        .collect();
    q.enqueue_batch(t, jobs).await.unwrap();
    let a = raw::claim(q, &part(t), 6, LONG_LEASE).await.unwrap();
    let mut leases: Vec<Lease> = a.iter().map(|d| d.lease()).collect();
    leases.push(a[2].lease());
    let flags = raw::ack(q, &part(t), &leases).await.unwrap();
    assert_eq!(flags, [true, true, true, true, true, true, false]);
    // The other six: a lease of 1 ms, reclaimed by a tick (back to ready,
    // backoff 0), then claimed again under a new token.
    let b = raw::claim(q, &part(t), 6, Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(b.len(), 6);
    tokio::time::sleep(Duration::from_millis(20)).await;
    raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let c = raw::claim(q, &part(t), 6, LONG_LEASE).await.unwrap();
    assert_eq!(c.len(), 6);
    assert!(c[0].token > b[0].token);
    let stale: Vec<Lease> = b.iter().map(|d| d.lease()).collect();
    assert_eq!(raw::ack(q, &part(t), &stale).await.unwrap(), [false; 6]);
    for d in &c {
        let job = q.get(t, &d.id).await.unwrap().expect("still there");
        assert_eq!((job.state, job.attempts), (State::Running, 2), "{}", d.id);
    }
    let fresh: Vec<Lease> = c.iter().map(|d| d.lease()).collect();
    assert_eq!(raw::ack(q, &part(t), &fresh).await.unwrap(), [true; 6]);
    // A lease with an empty id is refused without being sent (a first ""
    // would read as the grouped form).
    assert_eq!(
        raw::ack(q, &part(t), &[Lease::new("", 5), Lease::new("k00", 5)])
            .await
            .unwrap(),
        [false, false]
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

/// One claim leases an id once (its jobs share one token): an id found in
/// both ready and the pool, due (which should not happen), is handed out
/// once and leaves both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_in_both_ready_and_the_pool_is_claimed_once() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "twice");
    q.enqueue(t, Job::new("p").id("a")).await.unwrap();
    assert_eq!(f.card(t, "ready").await, 1);
    f.cli(&["ZADD", &key(t, "pool"), "1", "a"]);
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["a"]);
    assert_eq!((f.card(t, "pool").await, f.card(t, "ready").await), (0, 0));
    assert!(q.check(t).await.unwrap().is_empty());
    assert_eq!(
        raw::ack(q, &part(t), &[got[0].lease()]).await.unwrap(),
        [true]
    );
}

/// The grouped form's own arguments are checked before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_grouped_ack_is_refused_and_changes_nothing() {
    let f = Fixture::new().await;
    let t = "grouped-bad";
    let token = seed(&f, t).await.to_string();
    let keys = topic_keys(t);
    let mut c = f.conn.clone();
    let tok = token.as_str();
    for argv in [
        vec!["", "0", tok, "1", "run"],
        vec!["", "x", tok, "1", "run"],
        vec!["", "1", tok, "0", "run"],
        vec!["", "1", tok, "2", "run"],
        vec!["", "1", tok, "1", "run", "run"],
        vec!["", "2", tok, "1", "run"],
        vec!["", "1", tok, "1001", "run"],
        vec!["", "1", "abc", "1", "run"],
        vec!["", "1", tok, "x", "run"],
        vec!["", "1001", tok, "1", "run"],
        vec![""],
    ] {
        let err = eval("ack", &keys, &argv)
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err(&format!("{argv:?}"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{argv:?}: {err}");
        let run = f.queue.get(t, "run").await.unwrap().unwrap();
        assert_eq!(run.state, State::Running, "{argv:?}");
    }
    // 600 + 600 ids: over 1,000 in all.
    let many: Vec<String> = (0..1200).map(|i| format!("m{i}")).collect();
    let mut argv = vec!["", "2", tok, "600", tok, "600"];
    argv.extend(many.iter().map(String::as_str));
    let err = eval("ack", &keys, &argv)
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("1,200 ids");
    assert!(err.to_string().contains("1000 ids at most"), "{err}");
    // An entry without the live mark is no proof, even when it is the one
    // stored (as a job that left running keeps it): an error, as in pairs.
    let unmarked = format!("1:{token}");
    f.cli(&["HSET", &key(t, "attempts"), "run", &unmarked]);
    let err = eval("ack", &keys, &["", "1", &unmarked, "1", "run"])
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("an unmarked entry");
    assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
    f.cli(&["HSET", &key(t, "attempts"), "run", &format!("01:{token}")]);
    // Well formed: a refusal by position, then the ack.
    let stale = (token.parse::<i64>().unwrap() - 1).to_string();
    let reply: Vec<i64> = eval("ack", &keys, &["", "1", &stale, "1", "run"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(reply, [0, 1]);
    let reply: Vec<i64> = eval("ack", &keys, &["", "1", tok, "1", "run"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(reply, [1]);
    assert!(f.queue.get(t, "run").await.unwrap().is_none());
}

/// claim and tick remove the ids they read by rank (ZREMRANGEBYRANK): a
/// claim of fewer jobs than are due takes ready's first ones, then the
/// pool's first due ones, and leaves exactly the others, in order; a tick
/// whose room under max ready is less than its batch promotes the pool's
/// first ones and leaves the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_or_a_promotion_of_some_due_jobs_leaves_exactly_the_others() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "by-rank");
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let members = |name: &'static str| {
        let k = key(t, name);
        let f = &f;
        async move {
            let m: Vec<String> = f.cmd(redis::cmd("ZRANGE").arg(k).arg(0).arg(-1)).await;
            m
        }
    };
    for id in ["r1", "r2", "r3", "r4"] {
        q.enqueue(t, Job::new("p").id(id)).await.unwrap();
    }
    for id in ["p1", "p2", "p3", "p4", "p5", "p6"] {
        let job = Job::new("p").id(id).delay(Duration::from_millis(1));
        q.enqueue(t, job).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let got = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    let got: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got, ["r1", "r2"]);
    assert_eq!(members("ready").await, ids(&["r3", "r4"]));
    let got = raw::claim(q, &part(t), 3, LONG_LEASE).await.unwrap();
    let got: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got, ["r3", "r4", "p1"]);
    assert!(members("ready").await.is_empty());
    assert_eq!(members("pool").await, ids(&["p2", "p3", "p4", "p5", "p6"]));
    // Room for 2 under a max ready of 2: p2 and p3 are promoted.
    let tick = raw::TickLimits {
        max_ready: 2,
        ..TICK_ALL
    };
    let r = raw::tick(q, &part(t), &tick).await.unwrap();
    assert_eq!(r.promoted, 2, "{r:?}");
    assert_eq!(members("ready").await, ids(&["p2", "p3"]));
    assert_eq!(members("pool").await, ids(&["p4", "p5", "p6"]));
    assert!(q.check(t).await.unwrap().is_empty());
}
