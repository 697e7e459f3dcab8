//! The cold pool (docs/PROTOCOL.md "The cold pool"): a job due at least
//! `cold_after` (W) ahead waits in a list per minute of due time, not in the
//! `pool` ZSET, and the scheduler's tick moves each list into `pool` before
//! its jobs are due. These tests read the raw layout where the placement is
//! the point, and otherwise hold the cold pool to the promises of DESIGN.md:
//! at least once, never early, one state per job, and `check` clean.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use punctual::raw::{self, FailKind, Failed, TickLimits};
use punctual::{
    DeadSelector, EnqueueOptions, EnqueueStatus, Job, Outcome, Queue, ReplayPace, Scheduler,
    SchedulerConfig, State, When, Worker, WorkerConfig,
};
use punctual_testkit::eventually;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::util::{conn, key, part, queue, Fixture, RedisServer, LONG_LEASE};

/// The width of a cold bucket, fixed by the protocol.
const BUCKET_MS: i64 = 60_000;

/// The start of the bucket a job due at `due` goes in.
fn bucket_of(due: i64) -> i64 {
    due - due.rem_euclid(BUCKET_MS)
}

/// An absolute due time in epoch ms.
fn at(ms: i64) -> When {
    When::At(UNIX_EPOCH + Duration::from_millis(ms as u64))
}

async fn cmd<T: redis::FromRedisValue>(c: &MultiplexedConnection, cmd: &redis::Cmd) -> T {
    let mut c = c.clone();
    cmd.query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("redis command failed: {e}"))
}

async fn now_ms(c: &MultiplexedConnection) -> i64 {
    crate::util::redis_time_ms(c).await
}

/// Sets W for one (physical) topic, and opens its cold pool.
async fn set_cold_after(c: &MultiplexedConnection, topic: &str, ms: i64) {
    let _: i64 = cmd(
        c,
        redis::cmd("HSET")
            .arg(key(topic, "meta"))
            .arg("cold_after")
            .arg(ms),
    )
    .await;
    open_cold(c, topic).await;
}

/// One tick on a (physical) topic: a topic gets cold jobs only once a
/// scheduler ticked on it (its first tick writes cold_at), as `serve` does
/// at its start.
async fn open_cold(c: &MultiplexedConnection, topic: &str) {
    let keys = crate::util::topic_keys(topic);
    let _: redis::Value = cmd(
        c,
        redis::cmd("EVAL")
            .arg(punctual::internal::script_source("tick").unwrap())
            .arg(keys.len())
            .arg(&keys)
            .arg(1000)
            .arg(1_000_000)
            .arg(1000),
    )
    .await;
}

/// An integer field of the topic's meta hash.
async fn meta(c: &MultiplexedConnection, topic: &str, field: &str) -> Option<i64> {
    let v: Option<String> = cmd(c, redis::cmd("HGET").arg(key(topic, "meta")).arg(field)).await;
    v.map(|s| {
        s.parse()
            .unwrap_or_else(|_| panic!("meta {field} is {s:?}, not an integer"))
    })
}

/// `cold_n`, absent counted as 0.
async fn cold_n(c: &MultiplexedConnection, topic: &str) -> i64 {
    meta(c, topic, "cold_n").await.unwrap_or(0)
}

/// The buckets in `P:{T}:cold`, each checked to have its start as score.
async fn buckets(c: &MultiplexedConnection, topic: &str) -> Vec<i64> {
    let items: Vec<(String, f64)> = cmd(
        c,
        redis::cmd("ZRANGE")
            .arg(key(topic, "cold"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES"),
    )
    .await;
    items
        .into_iter()
        .map(|(m, s)| {
            let start: i64 = m.parse().expect("a bucket is named by its start");
            assert_eq!(start as f64, s, "bucket {m} has score {s}");
            assert_eq!(start % BUCKET_MS, 0, "bucket {m} is not a whole minute");
            start
        })
        .collect()
}

/// The entries of one bucket, in order.
async fn bucket(c: &MultiplexedConnection, topic: &str, start: i64) -> Vec<String> {
    cmd(
        c,
        redis::cmd("LRANGE")
            .arg(key(topic, &format!("c:{start}")))
            .arg(0)
            .arg(-1),
    )
    .await
}

/// Every bucket key of the topic that exists.
async fn bucket_keys(c: &MultiplexedConnection, topic: &str) -> Vec<String> {
    cmd(c, redis::cmd("KEYS").arg(key(topic, "c:*"))).await
}

/// The score of `id` in one of the four sets.
async fn score(c: &MultiplexedConnection, topic: &str, set: &str, id: &str) -> Option<f64> {
    cmd(c, redis::cmd("ZSCORE").arg(key(topic, set)).arg(id)).await
}

async fn zcard(c: &MultiplexedConnection, topic: &str, set: &str) -> i64 {
    cmd(c, redis::cmd("ZCARD").arg(key(topic, set))).await
}

/// The sets among pool, ready, running and dead that hold `id`, read in one
/// transaction.
async fn sets_of(c: &MultiplexedConnection, topic: &str, id: &str) -> Vec<&'static str> {
    let names = ["pool", "ready", "running", "dead"];
    let mut p = redis::pipe();
    p.atomic();
    for n in names {
        p.cmd("ZSCORE").arg(key(topic, n)).arg(id);
    }
    let mut cc = c.clone();
    let got: Vec<Option<f64>> = p.query_async(&mut cc).await.expect("ZSCORE x4");
    names
        .into_iter()
        .zip(got)
        .filter_map(|(n, s)| s.map(|_| n))
        .collect()
}

/// Asserts that `id` is a cold job due at `due`: in no set, with an entry in
/// its bucket, which is listed in `P:{T}:cold`; `get` says pool, due `due`.
async fn assert_cold(q: &Queue, c: &MultiplexedConnection, topic: &str, id: &str, due: i64) {
    assert_cold_in(q, c, topic, topic, id, due).await;
}

/// [`assert_cold`] for a job of `logical` whose keys are those of
/// `topic` (a partition).
async fn assert_cold_in(
    q: &Queue,
    c: &MultiplexedConnection,
    logical: &str,
    topic: &str,
    id: &str,
    due: i64,
) {
    assert_eq!(
        sets_of(c, topic, id).await,
        Vec::<&str>::new(),
        "{id} (due {due}) should be cold, in no set"
    );
    let start = bucket_of(due);
    assert!(
        bucket(c, topic, start).await.iter().any(|e| e == id),
        "{id} (due {due}) is not in its bucket {start}"
    );
    assert!(
        buckets(c, topic).await.contains(&start),
        "bucket {start} of {id} is not in P:{{{topic}}}:cold"
    );
    let cold_at = meta(c, topic, "cold_at")
        .await
        .expect("cold_at is set once a job is cold");
    assert!(
        cold_at <= due,
        "cold_at {cold_at} is after the due time {due} of cold job {id}"
    );
    let info = q
        .get(logical, id)
        .await
        .unwrap()
        .expect("a cold job is live");
    assert_eq!((info.state, info.due_ms), (State::Pool, due), "{id}");
}

/// Asserts that `id` waits in the `pool` ZSET with its due time as score.
async fn assert_in_pool(c: &MultiplexedConnection, topic: &str, id: &str, due: i64) {
    assert_eq!(sets_of(c, topic, id).await, ["pool"], "{id}");
    assert_eq!(score(c, topic, "pool", id).await, Some(due as f64), "{id}");
}

/// Asserts `Queue::check` finds nothing.
async fn assert_check(q: &Queue, topic: &str, when: &str) {
    let v = q.check(topic).await.unwrap();
    assert!(v.is_empty(), "check {when}: {v:?}");
}

/// The cold pool is gone: no bucket, no bucket key, `cold_n` 0.
async fn assert_no_cold(c: &MultiplexedConnection, topic: &str) {
    assert_eq!(buckets(c, topic).await, Vec::<i64>::new(), "P:{{T}}:cold");
    assert_eq!(bucket_keys(c, topic).await, Vec::<String>::new());
    assert_eq!(cold_n(c, topic).await, 0, "cold_n");
}

/// One delivery as a handler saw it: id, due time (ms), claimed at (µs,
/// Redis's clock), attempt.
type Log = Arc<Mutex<Vec<(String, i64, i64, u32)>>>;

/// A worker with the default safety nets that records and acks every
/// delivery of `topic`.
fn spawn_worker(
    q: &Queue,
    topic: &str,
    log: &Log,
    stop: &CancellationToken,
) -> JoinHandle<punctual::Result<punctual::Stopped>> {
    let log = log.clone();
    let w = Worker::new(q.clone(), WorkerConfig::default()).handle(topic, move |d| {
        let log = log.clone();
        async move {
            log.lock()
                .unwrap()
                .push((d.id.clone(), d.due_ms, d.claimed_us, d.attempt));
            Outcome::Done
        }
    });
    tokio::spawn(w.run(stop.clone().cancelled_owned()))
}

fn spawn_scheduler(
    q: &Queue,
    topic: &str,
    config: SchedulerConfig,
    stop: &CancellationToken,
) -> JoinHandle<punctual::Result<()>> {
    tokio::spawn(
        Scheduler::new(q.clone(), config)
            .topic(topic)
            .run(stop.clone().cancelled_owned()),
    )
}

/// Waits for `n` deliveries, then a little longer for any stray second one.
async fn wait_delivered(log: &Log, n: usize, within: Duration) {
    eventually(within, &format!("{n} deliveries"), async || {
        log.lock().unwrap().len() >= n
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Every delivery of `want` (id → due time) exactly once, at its due time
/// or later by Redis's clock, and nothing else.
fn assert_once_never_early(log: &Log, want: &BTreeMap<String, i64>) {
    let log = log.lock().unwrap();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (id, due, claimed_us, _) in log.iter() {
        *seen.entry(id).or_default() += 1;
        let Some(&expected) = want.get(id) else {
            panic!("{id} was delivered but is not a live job");
        };
        assert_eq!(*due, expected, "{id} was delivered with another due time");
        assert!(
            *claimed_us >= due * 1000,
            "{id} claimed at {claimed_us} us, before its due time {due} ms"
        );
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let missing: Vec<_> = want
        .keys()
        .filter(|id| !seen.contains_key(id.as_str()))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
}

/// Waits until Redis's clock is past `ms` (up to 20 s).
async fn wait_until(c: &MultiplexedConnection, ms: i64) {
    eventually(
        Duration::from_secs(20),
        "the Redis clock to pass a time",
        async || now_ms(c).await > ms,
    )
    .await;
}

/// Waits, if needed, until a window of `span` ms starting `lead` ms ahead of
/// Redis's clock lies inside one bucket, and returns its start (a due time).
async fn base_in_one_bucket(c: &MultiplexedConnection, lead: i64, span: i64) -> i64 {
    loop {
        let base = now_ms(c).await + lead;
        if base.rem_euclid(BUCKET_MS) + span < BUCKET_MS {
            return base;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Claims one job, waiting for it to be due (up to 5 s).
async fn claim_one(q: &Queue, p: &raw::Partition, lease: Duration) -> punctual::Delivery {
    for _ in 0..500 {
        if let Some(d) = raw::claim(q, p, 1, lease).await.unwrap().pop() {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing to claim on {p:?}");
}

// ---- 1. placement ----------------------------------------------------------

#[tokio::test]
async fn a_far_job_waits_in_its_minutes_bucket_and_a_near_one_in_pool() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "place");
    let before = now_ms(c).await;
    open_cold(c, t).await;
    q.enqueue(t, Job::new("x").id("far").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let far = q.get(t, "far").await.unwrap().unwrap();
    assert_eq!(far.state, State::Pool);
    let due = far.due_ms;
    let start = bucket_of(due);
    assert_eq!(score(c, t, "pool", "far").await, None, "far is in pool");
    assert_eq!(bucket(c, t, start).await, ["far"]);
    assert_eq!(buckets(c, t).await, [start]);
    assert_eq!(cold_n(c, t).await, 1);
    // The first tick set cold_at to now + W (10 min) rounded down.
    let cold_at = meta(c, t, "cold_at").await.expect("cold_at set");
    let after = now_ms(c).await;
    assert_eq!(cold_at % BUCKET_MS, 0, "cold_at {cold_at}");
    assert!(
        cold_at >= bucket_of(before + 600_000) && cold_at <= bucket_of(after + 600_001),
        "cold_at {cold_at} is not now + 10 min rounded down to a minute ({before}..{after})"
    );
    assert_cold(q, c, t, "far", due).await;
    assert_eq!(q.stats(t).await.unwrap().pool, 1);

    // A minute ahead is within W (10 min by default): in pool as before.
    q.enqueue(t, Job::new("x").id("near").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let near = q.get(t, "near").await.unwrap().unwrap();
    assert_eq!(near.state, State::Pool);
    assert_in_pool(c, t, "near", near.due_ms).await;
    assert_eq!(cold_n(c, t).await, 1);
    let s = q.stats(t).await.unwrap();
    assert_eq!((s.pool, s.ready, s.running, s.dead), (2, 0, 0, 0), "{s:?}");
    // Listings read the pool and then the buckets.
    let peeked: Vec<(String, i64)> = q
        .peek(t, State::Pool, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.id, l.at_ms))
        .collect();
    assert_eq!(
        peeked,
        [("near".to_string(), near.due_ms), ("far".to_string(), due)]
    );
    let mut listed: Vec<(String, i64)> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let page = q
            .list(t, State::Pool, "", cursor.as_deref(), 100)
            .await
            .unwrap();
        listed.extend(page.jobs.into_iter().map(|l| (l.id, l.at_ms)));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(cursor, None, "the listing did not end");
    listed.sort();
    listed.dedup();
    assert_eq!(
        listed,
        [("far".to_string(), due), ("near".to_string(), near.due_ms)]
    );
    assert_check(q, t, "with a cold job").await;

    // cold_after = 0: nothing is placed cold.
    let z = "warm";
    set_cold_after(c, z, 0).await;
    q.enqueue(z, Job::new("x").id("far").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let info = q.get(z, "far").await.unwrap().unwrap();
    assert_in_pool(c, z, "far", info.due_ms).await;
    assert_no_cold(c, z).await;

    // A small W makes a job a minute ahead cold.
    let w = "small-w";
    set_cold_after(c, w, 3000).await;
    q.enqueue(w, Job::new("x").id("min").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    q.enqueue(w, Job::new("x").id("soon").delay(Duration::from_secs(1)))
        .await
        .unwrap();
    let min = q.get(w, "min").await.unwrap().unwrap();
    assert_cold(q, c, w, "min", min.due_ms).await;
    let soon = q.get(w, "soon").await.unwrap().unwrap();
    assert_in_pool(c, w, "soon", soon.due_ms).await;
    assert_eq!(cold_n(c, w).await, 1);
    assert_check(q, w, "with a small W").await;

    // cold_after = 0 places nothing cold, but the cold pool already there is
    // still moved (with W = 10 min).
    set_cold_after(c, w, 0).await;
    let got = raw::tick(q, &part(w), &TickLimits::default())
        .await
        .unwrap();
    assert_eq!(got.promoted, 0, "{got:?}");
    assert_in_pool(c, w, "min", min.due_ms).await;
    assert_no_cold(c, w).await;
    assert_eq!(q.stats(w).await.unwrap().pool, 2);
    assert_check(q, w, "after the move with cold_after 0").await;

    // An unreadable cold_after counts as the default (10 min), for every job
    // of a batch: an hour ahead cold, a minute ahead in pool.
    let u = "unreadable";
    let _: i64 = cmd(
        c,
        redis::cmd("HSET")
            .arg(key(u, "meta"))
            .arg("cold_after")
            .arg("soon"),
    )
    .await;
    open_cold(c, u).await;
    q.enqueue_batch(
        u,
        vec![
            Job::new("x").id("hour").delay(Duration::from_secs(3600)),
            Job::new("x").id("minute").delay(Duration::from_secs(60)),
            Job::new("x").id("hour2").delay(Duration::from_secs(3660)),
        ],
    )
    .await
    .unwrap();
    for id in ["hour", "hour2"] {
        let info = q.get(u, id).await.unwrap().unwrap();
        assert_cold(q, c, u, id, info.due_ms).await;
    }
    let minute = q.get(u, "minute").await.unwrap().unwrap();
    assert_in_pool(c, u, "minute", minute.due_ms).await;
    assert_eq!(cold_n(c, u).await, 2);
    assert_check(q, u, "with an unreadable cold_after").await;
}

/// No job is placed cold below `cold_at`: a job in no set due before it
/// would be an orphan, not a cold job.
#[tokio::test]
async fn a_job_due_before_cold_at_waits_in_pool() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "raised");
    set_cold_after(c, t, 3000).await;
    // As after ticks that emptied the buckets up to three hours from now.
    let cold_at = bucket_of(now_ms(c).await + 3 * 3_600_000);
    let _: i64 = cmd(
        c,
        redis::cmd("HSET")
            .arg(key(t, "meta"))
            .arg("cold_at")
            .arg(cold_at),
    )
    .await;
    q.enqueue(
        t,
        Job::new("x").id("below").delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    q.enqueue(t, Job::new("x").id("above").when(at(cold_at + 1000)))
        .await
        .unwrap();
    let below = q.get(t, "below").await.unwrap().unwrap();
    assert_eq!(below.state, State::Pool);
    assert_in_pool(c, t, "below", below.due_ms).await;
    assert_cold(q, c, t, "above", cold_at + 1000).await;
    assert_eq!(cold_n(c, t).await, 1);
    assert_check(q, t, "with jobs on both sides of cold_at").await;
    // Rescheduled across it, both ways.
    q.reschedule(t, "below", at(cold_at + 5000)).await.unwrap();
    q.reschedule(t, "above", When::Delay(Duration::from_secs(7200)))
        .await
        .unwrap();
    assert_cold(q, c, t, "below", cold_at + 5000).await;
    let above = q.get(t, "above").await.unwrap().unwrap();
    assert_in_pool(c, t, "above", above.due_ms).await;
    assert_eq!(cold_n(c, t).await, 1);
    assert_eq!(meta(c, t, "cold_at").await, Some(cold_at));
    assert_eq!(q.stats(t).await.unwrap().pool, 2);
    assert_check(q, t, "after rescheduling across cold_at").await;
}

/// A scheduler asleep on an empty topic (until its 30 s safety net) hears
/// of a new first bucket, learns when to move it, and moves it before its
/// jobs are due, though that is sooner than the safety net.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_scheduler_moves_a_new_bucket_before_its_jobs_are_due() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "wake");
    // The next minute at least 4 s ahead, and (waiting for it if need be)
    // at most 25 s ahead, well within the scheduler's 30 s sleep.
    let start = loop {
        let now = now_ms(c).await;
        let start = bucket_of(now + 4000) + BUCKET_MS;
        if start - now <= 25_000 {
            break start;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The scheduler ticks once on the empty topic and sleeps.
    let stop = CancellationToken::new();
    let s = spawn_scheduler(q, t, SchedulerConfig::default(), &stop);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = now_ms(c).await;
    // W such that the move is due 2 s from now: the jobs are cold.
    let w = start - now - 2000;
    set_cold_after(c, t, w).await;
    let jobs: Vec<Job> = (0..20)
        .map(|i| {
            Job::new("x")
                .id(format!("w{i:02}"))
                .when(at(start + 50 * i))
        })
        .collect();
    q.enqueue_batch(t, jobs).await.unwrap();
    assert_eq!(buckets(c, t).await, [start]);
    assert_eq!(bucket(c, t, start).await.len(), 20);
    assert_eq!(zcard(c, t, "pool").await, 0);
    assert_eq!(cold_n(c, t).await, 20);
    eventually(Duration::from_secs(30), "the bucket's move", async || {
        zcard(c, t, "pool").await == 20 || now_ms(c).await >= start
    })
    .await;
    let moved_at = now_ms(c).await;
    assert_eq!(zcard(c, t, "pool").await, 20, "not moved by {moved_at}");
    assert!(
        moved_at < start,
        "moved at {moved_at}, after the first job was due at {start}"
    );
    assert!(
        moved_at >= start - w,
        "moved at {moved_at}, before the bucket's start {start} minus W {w}"
    );
    assert_no_cold(c, t).await;
    for i in 0..20 {
        let id = format!("w{i:02}");
        assert_in_pool(c, t, &id, start + 50 * i).await;
    }
    assert_check(q, t, "after the move").await;
    stop.cancel();
    s.await.unwrap().unwrap();
    for i in 0..20 {
        let id = format!("w{i:02}");
        assert_eq!(q.cancel(t, &id).await.unwrap(), Some(State::Pool));
    }
    assert_check(q, t, "at the end").await;
}

// ---- 2. cancel, reschedule, replace ----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reschedule_and_replace_of_cold_jobs() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "change");
    open_cold(c, t).await;
    let hour = Duration::from_secs(3600);

    // Cancel: the job is gone, whatever its stale entry.
    q.enqueue(t, Job::new("x").id("a").delay(hour))
        .await
        .unwrap();
    let a = q.get(t, "a").await.unwrap().unwrap();
    assert_cold(q, c, t, "a", a.due_ms).await;
    assert_eq!(q.cancel(t, "a").await.unwrap(), Some(State::Pool));
    assert!(q.get(t, "a").await.unwrap().is_none());
    assert_eq!(q.cancel(t, "a").await.unwrap(), None, "cancelled twice");
    assert_eq!(q.reschedule(t, "a", When::Now).await.unwrap(), None);
    assert_eq!(cold_n(c, t).await, 0);
    assert_eq!(q.stats(t).await.unwrap().pool, 0);
    assert_check(q, t, "after cancelling a cold job").await;

    // Reschedule cold -> 2 s ahead: in pool now, runs once, never early.
    q.enqueue(t, Job::new("x").id("b").delay(hour))
        .await
        .unwrap();
    let b_far = q.get(t, "b").await.unwrap().unwrap().due_ms;
    assert_cold(q, c, t, "b", b_far).await;
    assert_eq!(cold_n(c, t).await, 1);
    assert_eq!(
        q.reschedule(t, "b", When::Delay(Duration::from_secs(2)))
            .await
            .unwrap(),
        Some(State::Pool)
    );
    let b = q.get(t, "b").await.unwrap().unwrap();
    assert_eq!(b.state, State::Pool);
    assert!(b.due_ms < b_far, "{} !< {b_far}", b.due_ms);
    assert_in_pool(c, t, "b", b.due_ms).await;
    assert_eq!(cold_n(c, t).await, 0);
    assert_eq!(q.stats(t).await.unwrap().pool, 1);
    assert_check(q, t, "after rescheduling a cold job near").await;

    // Reschedule near -> far: cold.
    q.enqueue(t, Job::new("x").id("c").delay(Duration::from_secs(30)))
        .await
        .unwrap();
    let c_near = q.get(t, "c").await.unwrap().unwrap().due_ms;
    assert_in_pool(c, t, "c", c_near).await;
    assert_eq!(
        q.reschedule(t, "c", When::Delay(2 * hour)).await.unwrap(),
        Some(State::Pool)
    );
    let c_far = q.get(t, "c").await.unwrap().unwrap().due_ms;
    assert!(c_far > c_near + 3_600_000);
    assert_cold(q, c, t, "c", c_far).await;
    assert_eq!(cold_n(c, t).await, 1);
    assert_eq!(q.stats(t).await.unwrap().pool, 2);
    assert_check(q, t, "after rescheduling a job far").await;

    // Reschedule cold -> cold in another bucket: counted once.
    assert_eq!(
        q.reschedule(t, "c", When::Delay(3 * hour)).await.unwrap(),
        Some(State::Pool)
    );
    let c_farther = q.get(t, "c").await.unwrap().unwrap().due_ms;
    assert!(c_farther >= c_far + 3_600_000 - 1000);
    assert_cold(q, c, t, "c", c_farther).await;
    assert_eq!(cold_n(c, t).await, 1);
    assert_eq!(q.stats(t).await.unwrap().pool, 2);
    assert_check(q, t, "after rescheduling a cold job farther").await;

    // Replace by enqueue: cold -> cold (new payload, new due), then -> now.
    let replace = EnqueueOptions::default().replace(true);
    q.enqueue(t, Job::new("old").id("d").delay(hour))
        .await
        .unwrap();
    assert_eq!(cold_n(c, t).await, 2);
    let out = q
        .enqueue_with(t, vec![Job::new("new").id("d").delay(2 * hour)], &replace)
        .await
        .unwrap();
    assert_eq!(out[0].status, EnqueueStatus::Replaced);
    let d = q.get(t, "d").await.unwrap().unwrap();
    assert_eq!(d.payload, b"new");
    assert_cold(q, c, t, "d", d.due_ms).await;
    assert_eq!(cold_n(c, t).await, 2, "a replaced cold job counted twice");
    assert_eq!(q.stats(t).await.unwrap().pool, 3);
    assert_check(q, t, "after replacing a cold job with a cold one").await;
    let out = q
        .enqueue_with(t, vec![Job::new("now").id("d")], &replace)
        .await
        .unwrap();
    assert_eq!(out[0].status, EnqueueStatus::Replaced);
    let d_now = q.get(t, "d").await.unwrap().unwrap();
    assert_eq!(d_now.state, State::Ready);
    assert_eq!(sets_of(c, t, "d").await, ["ready"]);
    assert_eq!(cold_n(c, t).await, 1);
    let s = q.stats(t).await.unwrap();
    assert_eq!((s.pool, s.ready), (2, 1), "{s:?}");
    assert_check(q, t, "after replacing a cold job with a ready one").await;

    // Run: b (at its new due time) and d (now) once each; c stays cold.
    let log: Log = Arc::default();
    let stop = CancellationToken::new();
    let w = spawn_worker(q, t, &log, &stop);
    let s = spawn_scheduler(q, t, SchedulerConfig::default(), &stop);
    wait_delivered(&log, 2, Duration::from_secs(10)).await;
    let want: BTreeMap<String, i64> =
        [("b".to_string(), b.due_ms), ("d".to_string(), d_now.due_ms)]
            .into_iter()
            .collect();
    assert_once_never_early(&log, &want);
    stop.cancel();
    w.await.unwrap().unwrap();
    s.await.unwrap().unwrap();
    assert_cold(q, c, t, "c", c_farther).await;
    assert_eq!(cold_n(c, t).await, 1);
    let s = q.stats(t).await.unwrap();
    assert_eq!((s.pool, s.ready, s.running), (1, 0, 0), "{s:?}");
    assert_check(q, t, "after the run").await;
}

// ---- 3. the move, end to end -----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_jobs_are_moved_and_each_runs_once_never_early() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "move");
    set_cold_after(c, t, 3000).await;
    let n = 200;
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            Job::new(format!("p{i}"))
                .id(format!("m{i:03}"))
                .delay(Duration::from_millis(4000 + 20 * i as u64))
        })
        .collect();
    let out = q.enqueue_batch(t, jobs).await.unwrap();
    assert!(out.iter().all(|e| e.status == EnqueueStatus::Created));
    let mut want = BTreeMap::new();
    for i in 0..n {
        let id = format!("m{i:03}");
        let due = q.get(t, &id).await.unwrap().unwrap().due_ms;
        want.insert(id, due);
    }
    // All cold: none in pool, each in the bucket of its due time.
    assert_eq!(zcard(c, t, "pool").await, 0);
    assert_eq!(cold_n(c, t).await, n as i64);
    let mut entries = 0;
    for start in buckets(c, t).await {
        let ids = bucket(c, t, start).await;
        for id in &ids {
            assert_eq!(bucket_of(want[id]), start, "{id} in the wrong bucket");
        }
        entries += ids.len();
    }
    assert_eq!(entries, n);
    for (id, due) in want.iter().step_by(40) {
        assert_cold(q, c, t, id, *due).await;
    }
    assert_eq!(q.stats(t).await.unwrap().pool, n as u64);
    assert_check(q, t, "with 200 cold jobs").await;

    let log: Log = Arc::default();
    let stop = CancellationToken::new();
    let w = spawn_worker(q, t, &log, &stop);
    let s = spawn_scheduler(q, t, SchedulerConfig::default(), &stop);
    wait_delivered(&log, n, Duration::from_secs(30)).await;
    assert_once_never_early(&log, &want);
    eventually(Duration::from_secs(5), "every ack", async || {
        let s = q.stats(t).await.unwrap();
        s.pool + s.ready + s.running == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    s.await.unwrap().unwrap();
    assert_check(q, t, "after the run").await;
    assert_no_cold(c, t).await;
    assert_eq!(q.stats(t).await.unwrap().counters.get("done"), Some(&200));
}

// ---- 4. stale and duplicate entries ------------------------------------------

/// One tick at a time with a promote batch of 1, and a claim between ticks:
/// entries of a job already running, already moved, or cancelled are
/// dropped, and `cold_n` counts jobs, not entries.
#[tokio::test]
async fn stale_and_duplicate_entries_move_each_job_once() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "dups");
    let p = part(t);
    set_cold_after(c, t, 3000).await;
    let base = base_in_one_bucket(c, 5000, 2000).await;
    let start = bucket_of(base);
    // Entries, in order: r, gone, r, x, x, r.
    q.enqueue(t, Job::new("r").id("r").when(at(base)))
        .await
        .unwrap();
    q.enqueue(t, Job::new("gone").id("gone").when(at(base + 100)))
        .await
        .unwrap();
    assert_eq!(q.cancel(t, "gone").await.unwrap(), Some(State::Pool));
    // A replace writes an entry more (a reschedule within the bucket would
    // not: cold_admin.rs).
    let replace = EnqueueOptions::default().replace(true);
    let replace_r = async |due: i64| {
        q.enqueue_with(t, vec![Job::new("r").id("r").when(at(due))], &replace)
            .await
            .unwrap();
    };
    replace_r(base + 300).await;
    q.enqueue(t, Job::new("x").id("x").when(at(base + 200)))
        .await
        .unwrap();
    assert_eq!(q.cancel(t, "x").await.unwrap(), Some(State::Pool));
    q.enqueue(t, Job::new("x2").id("x").when(at(base + 900)))
        .await
        .unwrap();
    replace_r(base + 600).await;
    assert_eq!(
        bucket(c, t, start).await,
        ["r", "gone", "r", "x", "x", "r"],
        "one entry per placement"
    );
    assert_eq!(cold_n(c, t).await, 2, "r and x");
    assert_eq!(q.stats(t).await.unwrap().pool, 2);
    assert_cold(q, c, t, "r", base + 600).await;
    assert_cold(q, c, t, "x", base + 900).await;
    assert!(q.get(t, "gone").await.unwrap().is_none());
    assert_check(q, t, "with stale entries").await;

    // The bucket is due for the move (its start is below now + W).
    let limits = TickLimits {
        promote_batch: 1,
        ..TickLimits::default()
    };
    let tick = async |left: usize| {
        let got = raw::tick(q, &p, &limits).await.unwrap();
        assert_eq!(
            bucket(c, t, start).await.len(),
            left,
            "a tick with a batch of 1 takes one entry"
        );
        assert_check(q, t, &format!("with {left} entries left")).await;
        got
    };
    wait_until(c, start - 3000).await;
    let got = tick(5).await;
    assert!(got.more, "a due bucket is left: {got:?}");
    assert_in_pool(c, t, "r", base + 600).await;
    assert_eq!(cold_n(c, t).await, 1, "r moved");
    // r runs before its other entries are read.
    wait_until(c, base + 600).await;
    let claimed = raw::claim(q, &p, 10, LONG_LEASE).await.unwrap();
    assert_eq!(
        claimed.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["r"]
    );
    let r = &claimed[0];
    assert!(r.claimed_us >= (base + 600) * 1000, "r claimed early");
    // The move pops from the tail: x, x, r, gone, r.
    tick(4).await; // x: moved
    assert_in_pool(c, t, "x", base + 900).await;
    assert_eq!(cold_n(c, t).await, 0);
    tick(3).await; // x again: already in pool, adds none
    assert_eq!(cold_n(c, t).await, 0, "a duplicate entry counted twice");
    assert_in_pool(c, t, "x", base + 900).await;
    tick(2).await; // r: running
    assert_eq!(sets_of(c, t, "r").await, ["running"]);
    assert_eq!(cold_n(c, t).await, 0);
    tick(1).await; // gone: no record
    tick(0).await; // r again: running
    assert_eq!(sets_of(c, t, "r").await, ["running"]);
    for _ in 0..3 {
        raw::tick(q, &p, &limits).await.unwrap();
    }
    assert_no_cold(c, t).await;
    // With no bucket left, cold_at is now + W rounded down to a minute.
    let before = now_ms(c).await;
    raw::tick(q, &p, &limits).await.unwrap();
    let cold_at = meta(c, t, "cold_at").await.unwrap();
    let after = now_ms(c).await;
    assert!(
        bucket_of(before + 3000) <= cold_at && cold_at <= bucket_of(after + 3000),
        "cold_at {cold_at}, ticked between {before} and {after}"
    );
    assert!(q.get(t, "gone").await.unwrap().is_none());
    assert_eq!(raw::ack(q, &p, &[r.lease()]).await.unwrap(), [true]);
    // x runs once, at its due time.
    wait_until(c, base + 900).await;
    let mut got = Vec::new();
    for _ in 0..50 {
        got.extend(raw::claim(q, &p, 10, LONG_LEASE).await.unwrap());
        raw::tick(q, &p, &limits).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(got.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["x"]);
    assert_eq!(got[0].due_ms, base + 900);
    assert!(got[0].claimed_us >= (base + 900) * 1000, "x claimed early");
    assert_eq!(raw::ack(q, &p, &[got[0].lease()]).await.unwrap(), [true]);
    let s = q.stats(t).await.unwrap();
    assert_eq!((s.pool, s.ready, s.running, s.dead), (0, 0, 0, 0), "{s:?}");
    assert_check(q, t, "at the end").await;
}

/// The same with a scheduler (promote batch 1) started after every job is
/// due, and a worker claiming while the entries move: each live job runs
/// once, never early, the cancelled ones never, and no job is ever in two
/// sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_scheduler_moves_stale_and_duplicate_entries_while_a_worker_claims() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "dups-run");
    set_cold_after(c, t, 3000).await;
    let replace = EnqueueOptions::default().replace(true);
    let base = base_in_one_bucket(c, 5000, 2000).await;
    let mut want = BTreeMap::new();
    let mut gone = Vec::new();
    for i in 0..60 {
        let id = format!("j{i:02}");
        let first = base + 10 * i;
        q.enqueue(t, Job::new("x").id(id.as_str()).when(at(first)))
            .await
            .unwrap();
        match i {
            // Replaced twice within the bucket: three entries.
            0..20 => {
                for due in [first + 500, first + 1000] {
                    let again = vec![Job::new("x").id(id.as_str()).when(at(due))];
                    q.enqueue_with(t, again, &replace).await.unwrap();
                }
                want.insert(id, first + 1000);
            }
            // Cancelled, then enqueued again with the same id.
            20..30 => {
                q.cancel(t, &id).await.unwrap();
                q.enqueue(t, Job::new("again").id(id.as_str()).when(at(first + 700)))
                    .await
                    .unwrap();
                want.insert(id, first + 700);
            }
            // Cancelled for good.
            30..40 => {
                q.cancel(t, &id).await.unwrap();
                gone.push(id);
            }
            _ => {
                want.insert(id, first);
            }
        }
    }
    let start = bucket_of(base);
    assert_eq!(buckets(c, t).await, [start]);
    assert_eq!(bucket(c, t, start).await.len(), 20 * 3 + 10 * 2 + 10 + 20);
    assert_eq!(cold_n(c, t).await, want.len() as i64);
    assert_eq!(zcard(c, t, "pool").await, 0);
    assert_eq!(q.stats(t).await.unwrap().pool, want.len() as u64);
    assert_check(q, t, "before the run").await;

    let log: Log = Arc::default();
    let stop = CancellationToken::new();
    let w = spawn_worker(q, t, &log, &stop);
    // Every job is due before the scheduler starts.
    wait_until(c, base + 2000).await;
    // Watch the one-state rule while the move runs.
    let watching = CancellationToken::new();
    let watcher = {
        let (q, c, watching) = (q.clone(), c.clone(), watching.clone());
        let ids: Vec<String> = want.keys().chain(&gone).cloned().collect();
        tokio::spawn(async move {
            let mut rounds = 0;
            while !watching.is_cancelled() {
                for id in &ids {
                    let sets = sets_of(&c, t, id).await;
                    assert!(sets.len() <= 1, "{id} is in {sets:?}");
                }
                let v = q.check(t).await.unwrap();
                assert!(v.is_empty(), "check during the move: {v:?}");
                rounds += 1;
            }
            rounds
        })
    };
    let s = spawn_scheduler(q, t, SchedulerConfig::default().promote_batch(1), &stop);
    wait_delivered(&log, want.len(), Duration::from_secs(20)).await;
    watching.cancel();
    let rounds = watcher.await.unwrap();
    assert!(rounds > 0);
    assert_once_never_early(&log, &want);
    let delivered: HashSet<String> = log.lock().unwrap().iter().map(|d| d.0.clone()).collect();
    for id in &gone {
        assert!(!delivered.contains(id), "cancelled {id} ran");
    }
    eventually(Duration::from_secs(5), "every ack", async || {
        let s = q.stats(t).await.unwrap();
        s.pool + s.ready + s.running == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    s.await.unwrap().unwrap();
    assert_check(q, t, "at the end").await;
    assert_no_cold(c, t).await;
}

// ---- 5. retries and replays placed cold ------------------------------------

#[tokio::test]
async fn retries_reclaims_and_paced_replays_due_far_ahead_go_cold() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "retry");
    open_cold(c, t).await;
    let p = part(t);
    let hour = Duration::from_secs(3600);
    q.enqueue(
        t,
        Job::new("x")
            .id("f")
            .max_attempts(5)
            .backoff(vec![Duration::ZERO, hour]),
    )
    .await
    .unwrap();
    // First failure: step 0, due now, not cold.
    let d = claim_one(q, &p, LONG_LEASE).await;
    let kind = FailKind::Retry { after: None };
    assert_eq!(
        raw::fail(q, &p, &d.lease(), "e1", kind).await.unwrap(),
        Failed::Retry
    );
    assert_eq!(cold_n(c, t).await, 0);
    assert!(buckets(c, t).await.is_empty());
    // Second failure: an hour: cold.
    let d = claim_one(q, &p, LONG_LEASE).await;
    assert_eq!(d.attempt, 2);
    let before = now_ms(c).await;
    assert_eq!(
        raw::fail(q, &p, &d.lease(), "e2", kind).await.unwrap(),
        Failed::Retry
    );
    let info = q.get(t, "f").await.unwrap().unwrap();
    assert!(
        info.due_ms >= before + 3_600_000,
        "due {} is not an hour after {before}",
        info.due_ms
    );
    assert_eq!(info.attempts, 2);
    assert_eq!(info.last_error.as_deref(), Some("e2"));
    assert_cold(q, c, t, "f", info.due_ms).await;
    assert_eq!(cold_n(c, t).await, 1);
    assert_eq!(q.stats(t).await.unwrap().pool, 1);
    assert_check(q, t, "after a retry went cold").await;

    // A retry after a given delay, and a lease reclaimed with the ladder.
    q.enqueue(t, Job::new("x").id("g")).await.unwrap();
    let d = claim_one(q, &p, LONG_LEASE).await;
    assert_eq!(d.id, "g");
    let kind = FailKind::Retry {
        after: Some(2 * hour),
    };
    assert_eq!(
        raw::fail(q, &p, &d.lease(), "later", kind).await.unwrap(),
        Failed::Retry
    );
    let g = q.get(t, "g").await.unwrap().unwrap();
    assert_cold(q, c, t, "g", g.due_ms).await;
    q.enqueue(t, Job::new("x").id("h").backoff(vec![hour]).max_attempts(3))
        .await
        .unwrap();
    let d = claim_one(q, &p, Duration::from_millis(50)).await;
    assert_eq!(d.id, "h");
    // Past the lease's deadline (50 ms after the claim) by Redis's clock.
    wait_until(c, d.claimed_us / 1000 + 60).await;
    let got = raw::tick(q, &p, &TickLimits::default()).await.unwrap();
    assert_eq!(got.reclaimed, 1, "{got:?}");
    let h = q.get(t, "h").await.unwrap().unwrap();
    assert_cold(q, c, t, "h", h.due_ms).await;
    assert_eq!(cold_n(c, t).await, 3);
    assert_check(q, t, "after a reclaim went cold").await;

    // A paced dead replay: the second job is due an hour after the first.
    let r = "replay";
    let rp = part(r);
    open_cold(c, r).await;
    for id in ["d1", "d2"] {
        q.enqueue(r, Job::new("x").id(id).max_attempts(1))
            .await
            .unwrap();
        let d = claim_one(q, &rp, LONG_LEASE).await;
        assert_eq!(
            raw::fail(q, &rp, &d.lease(), "x", FailKind::Permanent)
                .await
                .unwrap(),
            Failed::Dead
        );
    }
    let pace = ReplayPace::Rate { jobs: 1, per: hour };
    let mut replayed = q
        .dead_replay_paced(r, DeadSelector::All, pace, |_| {})
        .await
        .unwrap();
    replayed.sort();
    assert_eq!(replayed, ["d1", "d2"]);
    let mut states = Vec::new();
    for id in ["d1", "d2"] {
        let info = q.get(r, id).await.unwrap().unwrap();
        if info.state == State::Pool {
            assert_cold(q, c, r, id, info.due_ms).await;
        }
        states.push(info.state);
    }
    states.sort_by_key(|s| s.as_str());
    assert_eq!(states, [State::Pool, State::Ready]);
    assert_eq!(cold_n(c, r).await, 1);
    let s = q.stats(r).await.unwrap();
    assert_eq!((s.pool, s.ready, s.dead), (1, 1, 0), "{s:?}");
    assert_check(q, r, "after a paced replay").await;
}

// ---- 6. faults ---------------------------------------------------------------

/// Cold jobs survive a Redis restart (AOF), and a scheduler that starts only
/// after their due time still runs each once: late, never early, never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_jobs_survive_a_restart_and_a_late_scheduler() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let t = "crash";
    let (q, c) = (queue(&server).await, conn(&server).await);
    set_cold_after(&c, t, 3000).await;
    let n = 50;
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            Job::new("x")
                .id(format!("k{i:02}"))
                .delay(Duration::from_millis(3500 + 20 * i as u64))
        })
        .collect();
    q.enqueue_batch(t, jobs).await.unwrap();
    let mut want = BTreeMap::new();
    for i in 0..n {
        let id = format!("k{i:02}");
        let due = q.get(t, &id).await.unwrap().unwrap().due_ms;
        assert_cold(&q, &c, t, &id, due).await;
        want.insert(id, due);
    }
    let layout = async |c: &MultiplexedConnection| {
        let mut b = BTreeMap::new();
        for start in buckets(c, t).await {
            b.insert(start, bucket(c, t, start).await);
        }
        (
            b,
            cold_n(c, t).await,
            meta(c, t, "cold_at").await,
            zcard(c, t, "pool").await,
        )
    };
    let before = layout(&c).await;
    assert_eq!(before.1, n as i64);
    drop((q, c));

    tokio::task::block_in_place(|| server.kill());
    tokio::task::block_in_place(|| server.restart());
    let (q, c) = (queue(&server).await, conn(&server).await);
    assert_eq!(layout(&c).await, before, "the cold pool after the restart");
    for (id, due) in want.iter().step_by(10) {
        assert_cold(&q, &c, t, id, *due).await;
    }
    assert_eq!(q.stats(t).await.unwrap().pool, n as u64);

    // A worker runs; no scheduler until every job is due.
    let log: Log = Arc::default();
    let stop = CancellationToken::new();
    let w = spawn_worker(&q, t, &log, &stop);
    let last = *want.values().max().unwrap();
    eventually(Duration::from_secs(10), "the last due time", async || {
        now_ms(&c).await > last + 500
    })
    .await;
    let s = spawn_scheduler(&q, t, SchedulerConfig::default(), &stop);
    wait_delivered(&log, n, Duration::from_secs(20)).await;
    assert_once_never_early(&log, &want);
    eventually(Duration::from_secs(5), "every ack", async || {
        let s = q.stats(t).await.unwrap();
        s.pool + s.ready + s.running == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    s.await.unwrap().unwrap();
    assert_check(&q, t, "at the end").await;
    assert_no_cold(&c, t).await;
}

// ---- 7. a partitioned topic ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_jobs_of_a_partitioned_topic_are_counted_and_run() {
    let f = Fixture::new().await;
    let (q, c, t) = (&f.queue, &f.conn, "parts");
    q.set_partitions(t, 4).await.unwrap();
    let names = q.partition_names(t).await.unwrap();
    assert_eq!(names.len(), 4);
    for name in &names {
        set_cold_after(c, name, 3000).await;
    }
    let n = 80;
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            Job::new("x")
                .id(format!("u{i:02}"))
                .delay(Duration::from_millis(3500 + 25 * i as u64))
        })
        .collect();
    q.enqueue_batch(t, jobs).await.unwrap();
    // A far job too, left cold at the end.
    q.enqueue(t, Job::new("x").id("far").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let mut want = BTreeMap::new();
    for i in 0..n {
        let id = format!("u{i:02}");
        let due = q.get(t, &id).await.unwrap().unwrap().due_ms;
        let home =
            punctual::internal::partition_name(t, punctual::internal::partition_of(&id, 4), 4);
        assert_cold_in(q, c, t, &home, &id, due).await;
        want.insert(id, due);
    }
    let mut per = Vec::new();
    for name in &names {
        assert_eq!(zcard(c, name, "pool").await, 0, "{name}");
        per.push(cold_n(c, name).await);
    }
    assert_eq!(per.iter().sum::<i64>(), n as i64 + 1, "{per:?}");
    assert!(per.iter().all(|k| *k > 0), "{per:?}");
    let s = q.stats(t).await.unwrap();
    assert_eq!((s.partitions, s.pool), (4, n as u64 + 1), "{s:?}");
    assert_check(q, t, "with cold jobs in 4 partitions").await;

    let log: Log = Arc::default();
    let stop = CancellationToken::new();
    let w = spawn_worker(q, t, &log, &stop);
    let s = spawn_scheduler(q, t, SchedulerConfig::default(), &stop);
    wait_delivered(&log, n, Duration::from_secs(20)).await;
    assert_once_never_early(&log, &want);
    eventually(Duration::from_secs(5), "every ack", async || {
        let s = q.stats(t).await.unwrap();
        s.ready + s.running == 0 && s.pool == 1
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    s.await.unwrap().unwrap();
    assert_check(q, t, "at the end").await;
    let far = q.get(t, "far").await.unwrap().unwrap();
    let home = punctual::internal::partition_name(t, punctual::internal::partition_of("far", 4), 4);
    assert_cold_in(q, c, t, &home, "far", far.due_ms).await;
    let left: i64 = {
        let mut sum = 0;
        for name in &names {
            sum += cold_n(c, name).await;
        }
        sum
    };
    assert_eq!(left, 1);
}
