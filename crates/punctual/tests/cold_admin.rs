//! The cold pool (PROTOCOL.md "The cold pool") seen by the administrative
//! scripts and the scheduler's tick: a cold job is a job like any other for
//! `layout` and `topic_delete`, the tick's reply wakes the scheduler for
//! the move of the first bucket, and a topic gets cold jobs only once a
//! tick has run on it.

use std::time::Duration;

use punctual::{Job, State, TopicDeleted};

use crate::util::{key, part, Fixture, TICK_ALL};

/// The wall-clock time of an epoch ms.
fn at_ms(ms: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(ms)
}

/// The bucket (start, epoch ms) of a job due at `due_ms`.
fn bucket(due_ms: i64) -> i64 {
    due_ms - due_ms % 60_000
}

async fn cold_keys(f: &Fixture, topic: &str) -> Vec<String> {
    let mut keys: Vec<String> = f
        .cmd(redis::cmd("KEYS").arg(format!("punctual:{{{topic}}}:c*")))
        .await;
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_job_counts_as_held_for_partitioning_and_deletion() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "held");
    // A topic gets cold jobs once a scheduler has ticked on it.
    punctual::raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let r = q
        .enqueue(
            t,
            Job::new("far").id("far").delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let due = q.get(t, &r.id).await.unwrap().unwrap().due_ms;
    // The job is cold: in no set, in its bucket's list.
    assert_eq!(f.card(t, "pool").await, 0);
    let list: Vec<String> = f
        .cmd(
            redis::cmd("LRANGE")
                .arg(key(t, &format!("c:{}", bucket(due))))
                .arg(0)
                .arg(-1),
        )
        .await;
    assert_eq!(list, ["far"]);

    // Neither a partition change nor a deletion may lose it.
    assert!(q.set_partitions(t, 2).await.is_err());
    assert_eq!(q.delete_topic(t).await.unwrap(), TopicDeleted::HoldsJobs(1));
    assert_eq!(q.get(t, "far").await.unwrap().unwrap().state, State::Pool);

    // Cancelled, its entry is stale, and the deletion takes the lists too.
    assert_eq!(q.cancel(t, "far").await.unwrap(), Some(State::Pool));
    assert_eq!(
        cold_keys(&f, t).await.len(),
        2,
        "the index and the list stay until then"
    );
    assert_eq!(q.delete_topic(t).await.unwrap(), TopicDeleted::Deleted);
    assert_eq!(cold_keys(&f, t).await, Vec::<String>::new());
    let left: Vec<String> = f
        .cmd(redis::cmd("KEYS").arg(format!("punctual:{{{t}}}:*")))
        .await;
    assert_eq!(left, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tick_wakes_for_the_move_of_the_first_cold_bucket_and_moves_it_then() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "wake");
    // Jobs 2 minutes or more ahead are cold; this one is 5 minutes ahead.
    f.cli(&["HSET", &key(t, "meta"), "cold_after", "120000"]);
    punctual::raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    q.enqueue(t, Job::new("x").id("x").delay(Duration::from_secs(300)))
        .await
        .unwrap();
    let due = q.get(t, "x").await.unwrap().unwrap().due_ms;
    assert_eq!(f.card(t, "pool").await, 0, "placed cold");
    let before = f.now_ms().await;
    let tick = punctual::raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let after = f.now_ms().await;
    // Nothing is in pool, so the next promotion is the bucket's move, at its
    // start minus cold_after.
    let move_at = bucket(due) - 120_000;
    // (Whole ms of a wait counted in µs from the tick's clock: 1 ms of slack.)
    let wait = tick.next_due.expect("a wake-up for the move").as_millis() as i64;
    assert!(
        move_at - after - 1 <= wait && wait <= move_at - before,
        "woken in {wait} ms for a move at {move_at} (ticked between {before} and {after})"
    );
    assert!(!tick.more);
    assert_eq!(f.card(t, "pool").await, 0, "not moved before its time");

    // Once cold_after covers the bucket, the next tick moves it.
    f.cli(&["HSET", &key(t, "meta"), "cold_after", "600000"]);
    let tick = punctual::raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    assert_eq!(tick.promoted, 0);
    let score: Option<f64> = f
        .cmd(redis::cmd("ZSCORE").arg(key(t, "pool")).arg("x"))
        .await;
    assert_eq!(score, Some(due as f64), "moved into pool with its due time");
    let meta: Vec<Option<String>> = f
        .cmd(
            redis::cmd("HMGET")
                .arg(key(t, "meta"))
                .arg("cold_n")
                .arg("cold_at"),
        )
        .await;
    assert_eq!(meta[0].as_deref(), Some("0"));
    let cold_at: i64 = meta[1].as_deref().unwrap().parse().unwrap();
    assert!(
        cold_at > bucket(due),
        "cold_at {cold_at} passed the moved bucket"
    );
    assert_eq!(
        cold_keys(&f, t).await,
        Vec::<String>::new(),
        "index and list gone"
    );
    assert_eq!(q.stats(t).await.unwrap().pool, 1);
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_bucket_past_due_shows_as_overdue_in_stats() {
    // No scheduler moved this bucket (it would have, ten minutes before its
    // start): its jobs are late, and stats must say so, or a topic whose
    // waiting jobs are all cold would look healthy with its scheduler dead.
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "late");
    q.enqueue(
        t,
        Job::new("near").id("near").delay(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let s = q.stats(t).await.unwrap();
    assert_eq!((s.overdue, s.overdue_ms), (0, None), "{s:?}");
    let now = f.now_ms().await;
    let start = bucket(now) - 180_000;
    let list = key(t, &format!("c:{start}"));
    f.cli(&["RPUSH", &list, "a", "b"]);
    f.cli(&[
        "ZADD",
        &key(t, "cold"),
        &start.to_string(),
        &start.to_string(),
    ]);
    let s = q.stats(t).await.unwrap();
    assert_eq!(s.overdue, 2, "{s:?}");
    let age = s.overdue_ms.expect("an overdue age");
    assert!(
        age >= now - start - 60_000 && age <= f.now_ms().await - start - 60_000,
        "past due by {age} ms, for a bucket that ended at {}",
        start + 60_000
    );
    // A bucket still within its minute is not counted.
    f.cli(&[
        "ZADD",
        &key(t, "cold"),
        &bucket(now).to_string(),
        &bucket(now).to_string(),
    ]);
    f.cli(&["RPUSH", &key(t, &format!("c:{}", bucket(now))), "c"]);
    assert_eq!(q.stats(t).await.unwrap().overdue, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_goes_cold_before_a_scheduler_ticked_on_the_topic() {
    // A scheduler of a version before the cold pool would never move a cold
    // job: the cold pool begins only when a tick of this version wrote
    // cold_at.
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "fresh");
    let hour = Duration::from_secs(3600);
    q.enqueue(t, Job::new("a").id("a").delay(hour))
        .await
        .unwrap();
    assert_eq!(f.card(t, "pool").await, 1, "no tick yet: in pool");
    let at: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("cold_at"))
        .await;
    assert_eq!(at, None);
    punctual::raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    q.enqueue(t, Job::new("b").id("b").delay(hour))
        .await
        .unwrap();
    assert_eq!(f.card(t, "pool").await, 1, "b went cold");
    assert_eq!(q.stats(t).await.unwrap().pool, 2);
    assert_eq!(q.get(t, "b").await.unwrap().unwrap().state, State::Pool);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescheduling_a_cold_job_within_its_minute_adds_no_entry() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "same");
    punctual::raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let now = f.now_ms().await;
    // Due at 10 s into a minute two hours ahead; rescheduled within it.
    let start = bucket(now) + 7_200_000;
    q.enqueue(t, Job::new("x").id("x").at(at_ms((start + 10_000) as u64)))
        .await
        .unwrap();
    for s in [20_000, 30_000, 40_000] {
        q.reschedule(t, "x", punctual::When::At(at_ms((start + s) as u64)))
            .await
            .unwrap();
    }
    let list: Vec<String> = f
        .cmd(
            redis::cmd("LRANGE")
                .arg(key(t, &format!("c:{start}")))
                .arg(0)
                .arg(-1),
        )
        .await;
    assert_eq!(
        list,
        ["x"],
        "one entry, however often it moves within its minute"
    );
    assert_eq!(q.get(t, "x").await.unwrap().unwrap().due_ms, start + 40_000);
    // Into another minute: a new entry, the old one stale.
    q.reschedule(t, "x", punctual::When::At(at_ms((start + 70_000) as u64)))
        .await
        .unwrap();
    let next: Vec<String> = f
        .cmd(
            redis::cmd("LRANGE")
                .arg(key(t, &format!("c:{}", start + 60_000)))
                .arg(0)
                .arg(-1),
        )
        .await;
    assert_eq!(next, ["x"]);
    let n: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("cold_n"))
        .await;
    assert_eq!(n.as_deref(), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_given_twice_to_a_paced_replay_or_to_unfire_counts_once() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "twice");
    punctual::raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    // Replay: the first time is now, the second two hours ahead (cold). The
    // job must get one state, not ready and a cold entry too.
    q.enqueue(t, Job::new("d").id("d")).await.unwrap();
    let p = part(t);
    let got = punctual::raw::claim(q, &p, 1, crate::util::LONG_LEASE)
        .await
        .unwrap();
    punctual::raw::fail(
        q,
        &p,
        &got[0].lease(),
        "no",
        punctual::raw::FailKind::Permanent,
    )
    .await
    .unwrap();
    let pace = punctual::ReplayPace::Rate {
        jobs: 1,
        per: Duration::from_secs(7200),
    };
    let ids = vec!["d".to_string(), "d".to_string()];
    let replayed = q
        .dead_replay_paced(t, punctual::DeadSelector::Ids(ids), pace, |_| {})
        .await
        .unwrap();
    assert_eq!(replayed, ["d"]);
    assert_eq!(q.get(t, "d").await.unwrap().unwrap().state, State::Ready);
    assert_eq!(
        cold_keys(&f, t).await,
        Vec::<String>::new(),
        "no cold entry"
    );
    assert!(q.check(t).await.unwrap().is_empty());

    // unfire: two cold occurrences, one given twice; the other still counts.
    let hour = Duration::from_secs(3600);
    for id in ["s@1", "s@2"] {
        q.enqueue(t, Job::new("o").id(id).delay(hour))
            .await
            .unwrap();
    }
    assert_eq!(q.stats(t).await.unwrap().pool, 2);
    let mut keys = crate::util::topic_keys(t);
    keys.push(key(t, "fired"));
    let gone: i64 = f
        .cmd(
            redis::cmd("EVAL")
                .arg(punctual::internal::script_source("unfire").unwrap())
                .arg(keys.len())
                .arg(&keys)
                .arg("s@1")
                .arg("s@1"),
        )
        .await;
    assert_eq!(gone, 1);
    assert_eq!(q.stats(t).await.unwrap().pool, 1, "s@2 still counted");
    assert_eq!(q.get(t, "s@2").await.unwrap().unwrap().state, State::Pool);
}
