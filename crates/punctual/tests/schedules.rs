//! Recurring schedules end to end, on one Redis and on a 3-master cluster:
//! each occurrence fires exactly once and never early with firers racing,
//! the fired guard, each catch-up policy, pause/resume/rm, partitioned
//! topics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::schedule::{occurrence_id, CatchUp, Schedule};
use punctual::{
    registry::Registry, Outcome, Queue, Scheduler, SchedulerConfig, State, Worker, WorkerConfig,
};
use punctual_testkit::{eventually, RedisCluster, RedisServer};
use tokio_util::sync::CancellationToken;

/// What the handler saw: occurrence ms → (claimed µs, due ms), one entry
/// per delivery.
type Seen = Arc<Mutex<BTreeMap<i64, Vec<(i64, i64)>>>>;

/// Runs `n` schedulers (each with its firer) for `topic` until `stop`.
fn spawn_schedulers(q: &Queue, topic: &str, n: usize, stop: &CancellationToken) {
    for _ in 0..n {
        let s = Scheduler::new(
            q.clone(),
            SchedulerConfig::default().registry(Registry::off()),
        )
        .topic(topic);
        let stop = stop.clone();
        tokio::spawn(async move { s.run(stop.cancelled_owned()).await.expect("scheduler") });
    }
}

/// Runs a worker for `topic` recording each delivery of `name`'s occurrences.
fn spawn_worker(q: &Queue, topic: &str, name: &str, stop: &CancellationToken) -> Seen {
    let seen: Seen = Arc::default();
    let prefix = format!("{name}@");
    let s = seen.clone();
    let w = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(16)
            .registry(Registry::off()),
    )
    .handle(topic, move |d| {
        let (s, prefix) = (s.clone(), prefix.clone());
        async move {
            let o: i64 =
                d.id.strip_prefix(&prefix)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("unexpected id {}", d.id));
            assert_eq!(d.payload, b"tick");
            s.lock()
                .unwrap()
                .entry(o)
                .or_default()
                .push((d.claimed_us, d.due_ms));
            Outcome::Done
        }
    });
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop.cancelled_owned()).await.expect("worker") });
    seen
}

/// Every occurrence in `expected` ran exactly once, none other ran, and
/// none started before its due time (nor before the occurrence).
fn assert_exactly(seen: &Seen, expected: &[i64], upto: i64) {
    let seen = seen.lock().unwrap();
    let ran: Vec<i64> = seen.keys().copied().filter(|o| *o <= upto).collect();
    assert_eq!(ran, expected, "the occurrences that ran");
    for (o, deliveries) in seen.iter() {
        assert_eq!(
            deliveries.len(),
            1,
            "occurrence {o} ran {} times",
            deliveries.len()
        );
        let (claimed_us, due_ms) = deliveries[0];
        assert!(
            due_ms >= *o,
            "occurrence {o} was due at {due_ms}, before it"
        );
        assert!(
            claimed_us >= due_ms * 1000,
            "occurrence {o} started early: {claimed_us} µs < due {due_ms} ms"
        );
    }
}

async fn wait_ran(seen: &Seen, upto: i64, expected: &[i64]) {
    let want: BTreeSet<i64> = expected.iter().copied().collect();
    eventually(Duration::from_secs(20), "the occurrences ran", async || {
        let got: BTreeSet<i64> = seen
            .lock()
            .unwrap()
            .keys()
            .copied()
            .filter(|o| *o <= upto)
            .collect();
        want.is_subset(&got)
    })
    .await;
}

/// An every-second cron, three schedulers racing: each occurrence from the
/// schedule's creation on runs exactly once, never before it is due.
async fn every_second_cron_fires_each_occurrence_once(q: Queue, topic: &str) {
    let stored = q
        .schedule_put(topic, Schedule::cron("tick", "* * * * * *").payload("tick"))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let seen = spawn_worker(&q, topic, "tick", &stop);
    spawn_schedulers(&q, topic, 3, &stop);
    let t0 = stored.created_ms;
    let first = (t0 / 1000 + 1) * 1000;
    let upto = first + 4000;
    let expected: Vec<i64> = (first..=upto).step_by(1000).collect();
    wait_ran(&seen, upto, &expected).await;
    // A little longer, so a second delivery would show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    assert_exactly(&seen, &expected, upto);
    // Fired ahead: the next minute waits in the pool, as ordinary jobs.
    let pool = q.peek(topic, State::Pool, 1000).await.unwrap();
    assert!(
        pool.len() >= 50,
        "about 60 s fired ahead, got {}",
        pool.len()
    );
    for l in &pool {
        let o: i64 = l.id.strip_prefix("tick@").unwrap().parse().unwrap();
        assert_eq!(l.at_ms, o, "due at its occurrence");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_second_cron_fires_each_occurrence_once_with_three_schedulers() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    every_second_cron_fires_each_occurrence_once(q, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_second_cron_on_a_cluster_and_a_partitioned_topic() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    assert!(q.is_cluster());
    q.set_partitions("hot", 3).await.unwrap();
    every_second_cron_fires_each_occurrence_once(q.clone(), "hot").await;
    // The occurrences went to every partition, each in its own slot.
    let mut per_part = [0usize; 3];
    for l in q.peek("hot", State::Pool, 1000).await.unwrap() {
        per_part[punctual::internal::partition_of(&l.id, 3) as usize] += 1;
    }
    assert!(per_part.iter().all(|n| *n > 0), "{per_part:?}");
    every_second_cron_fires_each_occurrence_once(q, "plain").await;
}

/// A firer whose watermark is behind (stalled, or its write lost) fires
/// again every occurrence since; those that already ran and were acked
/// are refused by the fired guard, so none runs twice.
async fn an_acked_occurrence_is_not_fired_again(
    q: Queue,
    topic: &str,
    cli: impl Fn(&[&str]) -> Result<String, String>,
) {
    let stored = q
        .schedule_put(
            topic,
            Schedule::every("tick", Duration::from_secs(1)).payload("tick"),
        )
        .await
        .unwrap();
    let t0 = stored.created_ms;
    let stop = CancellationToken::new();
    let seen = spawn_worker(&q, topic, "tick", &stop);
    let firers = CancellationToken::new();
    spawn_schedulers(&q, topic, 1, &firers);
    let upto = t0 + 3000;
    let expected: Vec<i64> = (1..=3).map(|i| t0 + i * 1000).collect();
    wait_ran(&seen, upto, &expected).await;
    firers.cancel();
    // The jobs that ran are gone (acked): their ids are free.
    for o in &expected {
        assert!(q
            .get(topic, &occurrence_id("tick", *o))
            .await
            .unwrap()
            .is_none());
    }
    // Another firer, with the watermark back at the creation time (a
    // stalled firer's late write, or a lost one): it fires every
    // occurrence since (catch-up all) and the guard refuses those that ran.
    let last = format!("punctual:{{{topic}}}:schedules:last");
    cli(&["HSET", &last, "tick", &t0.to_string()]).unwrap();
    let again = CancellationToken::new();
    spawn_schedulers(&q, topic, 1, &again);
    let upto = t0 + 5000;
    let expected: Vec<i64> = (1..=5).map(|i| t0 + i * 1000).collect();
    wait_ran(&seen, upto, &expected).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    again.cancel();
    stop.cancel();
    assert_exactly(&seen, &expected, upto);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acked_occurrence_is_not_fired_again_by_another_firer() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    an_acked_occurrence_is_not_fired_again(q, "t", |a| server.cli(a)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acked_occurrence_is_not_fired_again_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    q.set_partitions("hot", 3).await.unwrap();
    an_acked_occurrence_is_not_fired_again(q, "hot", |a| c.cli(a)).await;
}

/// The firers are down for ~3.5 s after the schedule is created (every 1
/// s), then start: the missed occurrences are handled by `policy`.
/// Returns what ran, the occurrences, and the window in which the first
/// pass ran (Redis ms).
async fn catch_up_after_a_stop(q: &Queue, topic: &str, s: Schedule) -> (Seen, Vec<i64>, i64, i64) {
    let stored = q.schedule_put(topic, s.payload("tick")).await.unwrap();
    let t0 = stored.created_ms;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let stop = CancellationToken::new();
    let seen = spawn_worker(q, topic, "tick", &stop);
    let started = q.redis_now_ms().await.unwrap();
    spawn_schedulers(q, topic, 2, &stop);
    let upto = started + 2500;
    let all: Vec<i64> = (1..)
        .map(|i| t0 + i * 1000)
        .take_while(|o| *o <= upto)
        .collect();
    // Wait for the on-time ones (after the start), which every policy runs.
    let on_time: Vec<i64> = all.iter().copied().filter(|o| *o > started).collect();
    wait_ran(&seen, upto, &on_time).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    // The first pass ran between the start and the first claim.
    let first_claim = seen
        .lock()
        .unwrap()
        .values()
        .flatten()
        .map(|(c, _)| c / 1000)
        .min()
        .unwrap();
    (seen, all, started, first_claim)
}

/// What `policy` runs of `all` when the first pass saw missed occurrences
/// up to `m` (now - the 1 s grace).
fn expected_for(policy: CatchUp, all: &[i64], m: i64) -> Vec<i64> {
    let late: Vec<i64> = all.iter().copied().filter(|o| *o > m).collect();
    let missed: Vec<i64> = all.iter().copied().filter(|o| *o <= m).collect();
    match policy {
        CatchUp::All | CatchUp::Spread => all.to_vec(),
        CatchUp::Latest => missed.last().copied().into_iter().chain(late).collect(),
        _ => late,
    }
}

/// Asserts what ran matches `policy` for some pass time in [lo, hi].
fn assert_policy(policy: CatchUp, seen: &Seen, all: &[i64], lo: i64, hi: i64) {
    let grace = punctual::schedule::LATE_GRACE.as_millis() as i64;
    let upto = *all.last().unwrap();
    let ran: Vec<i64> = seen
        .lock()
        .unwrap()
        .keys()
        .copied()
        .filter(|o| *o <= upto)
        .collect();
    let mut candidates: Vec<i64> = vec![lo - grace, hi - grace];
    candidates.extend(
        all.iter()
            .copied()
            .filter(|o| *o >= lo - grace && *o <= hi - grace),
    );
    let ok = candidates
        .iter()
        .any(|m| expected_for(policy, all, *m) == ran);
    assert!(
        ok,
        "{policy}: ran {ran:?} of {all:?}, first pass between {lo} and {hi}"
    );
    assert_exactly(seen, &ran, upto);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_all_runs_every_missed_occurrence() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let s = Schedule::every("tick", Duration::from_secs(1)).catch_up(CatchUp::All);
    let (seen, all, lo, hi) = catch_up_after_a_stop(&q, "t", s).await;
    assert!(all.len() >= 5);
    assert_policy(CatchUp::All, &seen, &all, lo, hi);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_latest_runs_only_the_most_recent_missed_occurrence() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let s = Schedule::every("tick", Duration::from_secs(1)).catch_up(CatchUp::Latest);
    let (seen, all, lo, hi) = catch_up_after_a_stop(&q, "t", s).await;
    assert_policy(CatchUp::Latest, &seen, &all, lo, hi);
    // The first occurrence was missed and not the latest: it never ran.
    assert!(!seen.lock().unwrap().contains_key(&all[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_skip_runs_no_missed_occurrence() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    q.set_partitions("t", 2).await.unwrap();
    let s = Schedule::every("tick", Duration::from_secs(1)).catch_up(CatchUp::Skip);
    let (seen, all, lo, hi) = catch_up_after_a_stop(&q, "t", s).await;
    assert_policy(CatchUp::Skip, &seen, &all, lo, hi);
    let ran = seen.lock().unwrap();
    assert!(!ran.contains_key(&all[0]) && !ran.contains_key(&all[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_spread_runs_every_missed_occurrence_spread_over_the_window() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let s = Schedule::every("tick", Duration::from_secs(1)).spread(Duration::from_millis(1500));
    let (seen, all, lo, hi) = catch_up_after_a_stop(&q, "t", s).await;
    assert_policy(CatchUp::Spread, &seen, &all, lo, hi);
    // The missed ones (before the first pass, less the grace) were due
    // one after the other over 1.5 s, not all at once.
    let grace = punctual::schedule::LATE_GRACE.as_millis() as i64;
    let seen = seen.lock().unwrap();
    let missed: Vec<(i64, i64)> = seen
        .iter()
        .filter(|(o, _)| **o <= lo - grace)
        .map(|(o, d)| (*o, d[0].1))
        .collect();
    assert!(missed.len() >= 2, "{missed:?}");
    let dues: Vec<i64> = missed.iter().map(|(_, d)| *d).collect();
    let n = seen
        .keys()
        .filter(|o| **o <= hi - grace)
        .count()
        .max(missed.len()) as i64;
    for w in dues.windows(2) {
        let step = w[1] - w[0];
        assert!(step > 0, "spread dues increase: {dues:?}");
        // (The first is due at the pass's "now", which the enqueue script
        // raises to its own clock a few ms later.)
        assert!(step >= 1500 / n - 50, "evenly over the window: {dues:?}");
    }
}

/// Pause takes back the occurrences fired ahead (not yet due) and fires
/// nothing more; resume fires again (the taken-back ids too); rm takes
/// them back and the schedule is gone.
async fn pause_resume_rm(q: Queue, topic: &str) {
    q.schedule_put(
        topic,
        Schedule::every("tick", Duration::from_secs(1))
            .payload("tick")
            .catch_up(CatchUp::Skip),
    )
    .await
    .unwrap();
    let stop = CancellationToken::new();
    spawn_schedulers(&q, topic, 2, &stop);
    let ahead = async || q.peek(topic, State::Pool, 1000).await.unwrap();
    eventually(Duration::from_secs(10), "fired ahead", async || {
        ahead().await.len() >= 55
    })
    .await;
    let before = ahead().await;
    assert!(q.schedule_pause(topic, "tick").await.unwrap());
    let now = q.redis_now_ms().await.unwrap();
    let left: Vec<_> = ahead()
        .await
        .into_iter()
        .filter(|l| l.at_ms > now)
        .collect();
    assert!(
        left.is_empty(),
        "pause took back what was not due: {left:?}"
    );
    let cancelled = &before[before.len() - 1].id;
    assert!(q.get(topic, cancelled).await.unwrap().is_none());
    // Paused: nothing new for 2 s (the firers are running).
    let stats = q.stats(topic).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = q.stats(topic).await.unwrap();
    assert_eq!(
        later.pool + later.ready,
        stats.pool + stats.ready,
        "paused fires nothing"
    );
    assert!(
        q.schedule(topic, "tick")
            .await
            .unwrap()
            .unwrap()
            .schedule
            .paused
    );

    assert!(q.schedule_resume(topic, "tick").await.unwrap());
    eventually(Duration::from_secs(10), "fired again", async || {
        q.get(topic, cancelled).await.unwrap().is_some()
    })
    .await;
    assert!(ahead().await.len() >= 55);

    assert!(q.schedule_remove(topic, "tick").await.unwrap());
    let now = q.redis_now_ms().await.unwrap();
    let left: Vec<_> = ahead()
        .await
        .into_iter()
        .filter(|l| l.at_ms > now)
        .collect();
    assert!(left.is_empty(), "rm took back what was not due: {left:?}");
    assert!(q.schedule(topic, "tick").await.unwrap().is_none());
    let stats = q.stats(topic).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = q.stats(topic).await.unwrap();
    assert_eq!(
        later.pool + later.ready,
        stats.pool + stats.ready,
        "removed fires nothing"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_rm_take_back_occurrences_fired_ahead() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    pause_resume_rm(q, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_rm_take_back_occurrences_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    q.set_partitions("hot", 3).await.unwrap();
    pause_resume_rm(q, "hot").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enqueue_script_checks_the_tenth_key() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let script = redis::Script::new(&punctual::internal::script_source("enqueue").unwrap());
    let call = |tenth: &str| {
        let mut inv = script.prepare_invoke();
        for k in punctual::internal::TopicKeys::new("punctual", "t").all() {
            inv.key(k);
        }
        inv.key(tenth);
        inv.arg(65536).arg("0").arg(1);
        inv.arg("daily@1").arg("x").arg("d0").arg("").arg("");
        inv
    };
    let err = call("punctual:{t}:other")
        .invoke_async::<redis::Value>(&mut conn)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("P:{T}:fired"), "{err}");
    let ok: Vec<redis::Value> = call("punctual:{t}:fired")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ok[1], redis::Value::Int(1));
    // Live: fired before (it is in the fired set from its creation).
    let again: Vec<redis::Value> = call("punctual:{t}:fired")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(again[1], redis::Value::Int(4));
    // Gone (cancelled here, acked in real life): still fired before.
    let q = Queue::connect(server.url()).await.unwrap();
    q.cancel("t", "daily@1").await.unwrap().unwrap();
    let again: Vec<redis::Value> = call("punctual:{t}:fired")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(again[1], redis::Value::Int(4));
    assert!(q.get("t", "daily@1").await.unwrap().is_none());
    // Without the tenth key, the same id is an ordinary new job.
    let out = q
        .enqueue("t", punctual::Job::new("x").id("daily@1"))
        .await
        .unwrap();
    assert_eq!(out.status, punctual::EnqueueStatus::Created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_occurrence_carries_the_schedules_payload_and_job_options() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let stored = q
        .schedule_put(
            "t",
            Schedule::every("opt", Duration::from_secs(30))
                .payload("tick")
                .options("2;t5000;x60000"),
        )
        .await
        .unwrap();
    let stop = CancellationToken::new();
    spawn_schedulers(&q, "t", 1, &stop);
    let id = occurrence_id("opt", stored.created_ms + 30_000);
    eventually(
        Duration::from_secs(10),
        "the first occurrence fired ahead",
        async || q.get("t", &id).await.unwrap().is_some(),
    )
    .await;
    stop.cancel();
    let job = q.get("t", &id).await.unwrap().unwrap();
    assert_eq!(job.state, State::Pool);
    assert_eq!(job.payload, b"tick");
    assert_eq!(job.due_ms, stored.created_ms + 30_000);
    assert_eq!(job.max_attempts, 2);
    assert_eq!(job.timeout_ms, Some(5000));
    assert_eq!(job.deadline_ms, Some(job.due_ms + 60_000));
}

/// The occurrences of `name` waiting in the pool, due after `after` (ms).
async fn pool_ahead(q: &Queue, topic: &str, name: &str, after: i64) -> Vec<punctual::Listed> {
    let prefix = format!("{name}@");
    q.peek(topic, State::Pool, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.id.starts_with(&prefix) && l.at_ms > after)
        .collect()
}

/// An `every 1m` schedule with catch-up spread over 1 h, 10 minutes down:
/// its missed occurrences are due over the next hour. `pause` and `rm`
/// take those back too, not only the occurrences after now (issue 29,
/// item 5).
async fn spread_taken_back(change: &str) {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let topic = "t";
    let stored = q
        .schedule_put(
            topic,
            Schedule::every("tick", Duration::from_secs(60))
                .payload("tick")
                .spread(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    // Ten minutes down: created (and last handled) 10 min 30 s ago.
    let mut old = stored.clone();
    old.created_ms -= 630_000;
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::pipe()
        .hset(
            "punctual:{t}:schedules",
            "tick",
            serde_json::to_string(&old).unwrap(),
        )
        .ignore()
        .hset("punctual:{t}:schedules:last", "tick", old.created_ms)
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    let stop = CancellationToken::new();
    spawn_schedulers(&q, topic, 1, &stop);
    eventually(
        Duration::from_secs(10),
        "the missed occurrences spread ahead",
        async || {
            pool_ahead(&q, topic, "tick", q.redis_now_ms().await.unwrap() + 60_000)
                .await
                .len()
                >= 8
        },
    )
    .await;
    stop.cancel();
    // Other marks in the window, more than a page of them, tied at one
    // score before the occurrences' marks: the take-back pages past them.
    let other_at = q.redis_now_ms().await.unwrap() - 3_000_000;
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("punctual:{t}:fired");
    for i in 0..2500 {
        zadd.arg(other_at).arg(format!("other@{i}"));
    }
    let _: i64 = zadd.query_async(&mut c).await.unwrap();
    match change {
        "rm" => assert!(q.schedule_remove(topic, "tick").await.unwrap()),
        _ => assert!(q.schedule_pause(topic, "tick").await.unwrap()),
    }
    let now = q.redis_now_ms().await.unwrap();
    let left = pool_ahead(&q, topic, "tick", now).await;
    assert!(
        left.is_empty(),
        "{change} left occurrences due ahead: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rm_takes_back_occurrences_spread_ahead() {
    spread_taken_back("rm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_takes_back_occurrences_spread_ahead() {
    spread_taken_back("pause").await;
}
