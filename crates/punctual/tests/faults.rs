//! Redis faults on a single server, end to end: Redis killed and restarted
//! under load (AOF `always`), paused past the lease (SIGSTOP), full
//! (`maxmemory` with `noeviction`), and flooded (a crowd of jobs due at one
//! instant). Each test is bounded in time and fails when the contract
//! breaks: no acknowledged job lost, fenced leases, whole-or-nothing scripts,
//! bounded script times.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::part;
use punctual::raw::{self, FailKind, Failed, Lease, TickLimits};
use punctual::{
    Delivery, EnqueueStatus, ErrorKind, Job, Outcome, Queue, Scheduler, SchedulerConfig, State,
    Worker, WorkerConfig,
};
use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;

use crate::util::{
    conn, key, queue, redis_time_ms, take_slowlog, topic_keys, RedisServer, LONG_LEASE,
};
use punctual_testkit::eventually;

/// Jobs in pool, ready or running: not finished yet.
async fn unfinished(q: &Queue, topic: &str) -> u64 {
    let s = q.stats(topic).await.expect("stats");
    s.pool + s.ready + s.running
}

fn counter(stats: &punctual::TopicStats, name: &str) -> u64 {
    stats.counters.get(name).copied().unwrap_or(0)
}

/// The `p`-th percentile (0..=100) of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    assert!(!sorted.is_empty(), "no samples");
    let i = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[i]
}

/// Calls `op` until it succeeds (Redis may still be coming back), for up to
/// `timeout`.
async fn retry_until_ok<T, F, Fut>(timeout: Duration, what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = punctual::Result<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{what} did not recover within {timeout:?}: {e}"),
        }
    }
}

// ---- a. Redis killed (SIGKILL) and restarted, AOF `always`, under load -----

/// What the producer of the crash test saw.
#[derive(Debug, Default)]
struct Produced {
    /// Ids whose enqueue returned Ok: these must all be handled.
    acked: Vec<String>,
    /// Enqueue calls that failed (Redis down or reconnecting).
    errors: u64,
}

/// Enqueues batches of five jobs until `stop`: half due now, half with a
/// short delay (so the pool is never empty and the scheduler has work).
async fn produce(
    q: Queue,
    topic: &'static str,
    stop: CancellationToken,
    log: Arc<Mutex<Produced>>,
) {
    let mut n: u64 = 0;
    while !stop.is_cancelled() {
        let ids: Vec<String> = (n..n + 5).map(|i| format!("j{i}")).collect();
        let jobs = ids
            .iter()
            .zip(n..)
            .map(|(id, i)| {
                let job = Job::new(id.clone().into_bytes())
                    .id(id)
                    .backoff(vec![Duration::ZERO]);
                if i % 2 == 0 {
                    job
                } else {
                    job.delay(Duration::from_millis(20 + i % 280))
                }
            })
            .collect();
        n += 5;
        match q.enqueue_batch(topic, jobs).await {
            Ok(r) => {
                assert!(
                    r.iter().all(|e| e.status == EnqueueStatus::Created),
                    "fresh ids are created: {r:?}"
                );
                log.lock().unwrap().acked.extend(ids);
            }
            Err(e) => {
                assert!(e.is_retryable(), "enqueue failed for good: {e}");
                log.lock().unwrap().errors += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_and_restarted_with_aof_always_loses_no_acknowledged_job() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let t = "crash";
    // Producer, worker and scheduler each on their own connection, as if they
    // were separate processes.
    let producer_q = Queue::builder(server.url())
        .response_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let worker_q = queue(&server).await;
    let sched_q = queue(&server).await;
    let q = queue(&server).await;

    let handled: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let stop = CancellationToken::new();
    // The safety nets (idle_check, max_sleep) are a minute: after the restart
    // the consumers make progress only if they reconnect and resubscribe by
    // themselves.
    let sched = Scheduler::new(
        sched_q,
        SchedulerConfig::default().max_sleep(Duration::from_secs(60)),
    )
    .topic(t);
    let sched = tokio::spawn(sched.run(stop.clone().cancelled_owned()));
    let h = handled.clone();
    let worker = Worker::new(
        worker_q,
        WorkerConfig::default()
            .concurrency(16)
            .lease(Duration::from_secs(1))
            .idle_check(Duration::from_secs(60))
            .shutdown_timeout(Duration::from_secs(5)),
    )
    .handle(t, move |d| {
        let h = h.clone();
        async move {
            let ms = d.id.bytes().map(u64::from).sum::<u64>() % 20;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            *h.lock().unwrap().entry(d.id).or_default() += 1;
            Outcome::Done
        }
    });
    let worker = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    let produced: Arc<Mutex<Produced>> = Arc::default();
    let stop_producer = CancellationToken::new();
    let producer = tokio::spawn(produce(
        producer_q,
        t,
        stop_producer.clone(),
        produced.clone(),
    ));

    // Under load: jobs handled, some running, some waiting in the pool.
    eventually(
        Duration::from_secs(10),
        "the consumers to handle 200 jobs",
        async || handled.lock().unwrap().len() >= 200,
    )
    .await;
    eventually(
        Duration::from_secs(5),
        "jobs running and pooled at once",
        async || {
            let s = q.stats(t).await.unwrap();
            s.running > 0 && s.pool > 0
        },
    )
    .await;

    tokio::task::block_in_place(|| server.kill());
    let acked_at_kill = produced.lock().unwrap().acked.len();
    let handled_at_kill = handled.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| server.restart());
    let restarted = Instant::now();

    // The AOF had every acknowledged enqueue.
    let stats = retry_until_ok(Duration::from_secs(5), "stats after the restart", || {
        q.stats(t)
    })
    .await;
    assert!(
        counter(&stats, "enqueued") >= acked_at_kill as u64,
        "Redis restarted with {} enqueued jobs but {acked_at_kill} were acknowledged before the kill",
        counter(&stats, "enqueued")
    );

    // The producer, the worker and the scheduler carry on by themselves.
    eventually(
        Duration::from_secs(10),
        "jobs enqueued after the restart to be handled",
        async || {
            let acked = produced.lock().unwrap().acked.len();
            let done = handled.lock().unwrap();
            acked >= acked_at_kill + 300
                && produced.lock().unwrap().acked[acked_at_kill + 200..acked_at_kill + 300]
                    .iter()
                    .all(|id| done.contains_key(id))
        },
    )
    .await;
    let recovered_in = restarted.elapsed();
    stop_producer.cancel();
    producer.await.unwrap();
    let produced = std::mem::take(&mut *produced.lock().unwrap());
    assert!(
        produced.errors > 0,
        "the producer should have seen Redis down at least once"
    );

    eventually(
        Duration::from_secs(15),
        "every acknowledged job to be handled and nothing left running",
        async || {
            let all = {
                let done = handled.lock().unwrap();
                produced.acked.iter().all(|id| done.contains_key(id))
            };
            all && unfinished(&q, t).await == 0
        },
    )
    .await;
    stop.cancel();
    let stopped = worker.await.unwrap().unwrap();
    assert_eq!(stopped.abandoned, 0);
    sched.await.unwrap().unwrap();

    let stats = q.stats(t).await.unwrap();
    assert_eq!(
        (stats.pool, stats.ready, stats.running, stats.dead),
        (0, 0, 0, 0),
        "{stats:?}"
    );
    let violations = q.check(t).await.unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    let handled = handled.lock().unwrap();
    let twice = handled.values().filter(|n| **n > 1).count();
    eprintln!(
        "crash test: {} jobs acknowledged ({} before the kill, {} handled by then), {} enqueue \
         errors, {} handled ({} more than once), reclaimed {}, recovered {:?} after the restart",
        produced.acked.len(),
        acked_at_kill,
        handled_at_kill,
        produced.errors,
        handled.len(),
        twice,
        counter(&stats, "reclaimed"),
        recovered_in,
    );
}

// ---- b. Redis paused (SIGSTOP) longer than the lease ----------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_pause_longer_than_the_lease_expires_it_and_fences_the_stale_holder() {
    let server = RedisServer::start();
    let q = queue(&server).await;
    let c = conn(&server).await;
    let t = "pause";
    let zero = vec![Duration::ZERO];
    q.enqueue(t, Job::new("s").id("a-short").backoff(zero.clone()))
        .await
        .unwrap();
    q.enqueue(t, Job::new("l").id("b-long").backoff(zero))
        .await
        .unwrap();
    let short = raw::claim(&q, &part(t), 1, Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(short.len(), 1);
    let short = short.into_iter().next().unwrap();
    assert_eq!((short.id.as_str(), short.attempt), ("a-short", 1));
    let long = raw::claim(&q, &part(t), 1, LONG_LEASE).await.unwrap();
    assert_eq!(long.len(), 1);
    let long = long.into_iter().next().unwrap();
    assert_eq!(long.id, "b-long");
    let before = redis_time_ms(&c).await;

    // A scheduler sleeps until the short lease's deadline; its tick reaches
    // Redis while Redis is stopped, and runs when it resumes, by Redis's
    // clock past the deadline.
    let stop = CancellationToken::new();
    let sched = Scheduler::new(queue(&server).await, SchedulerConfig::default()).topic(t);
    let sched = tokio::spawn(sched.run(stop.clone().cancelled_owned()));
    server.pause();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.resume();

    // Redis's clock ran on while it was stopped: the short lease expired.
    let after = redis_time_ms(&c).await;
    assert!(
        after - before >= 2000,
        "Redis's clock moved {} ms",
        after - before
    );
    eventually(
        Duration::from_secs(5),
        "the expired lease to be reclaimed",
        async || q.get(t, "a-short").await.unwrap().map(|j| j.state) == Some(State::Ready),
    )
    .await;

    // Re-delivered with a new token; the stale holder is refused everywhere.
    let again = raw::claim(&q, &part(t), 1, LONG_LEASE).await.unwrap();
    assert_eq!(again.len(), 1);
    let again = again.into_iter().next().unwrap();
    assert_eq!((again.id.as_str(), again.attempt), ("a-short", 2));
    assert!(again.token > short.token);
    let stale = short.lease();
    assert_eq!(
        raw::ack(&q, &part(t), std::slice::from_ref(&stale))
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::extend(&q, &part(t), std::slice::from_ref(&stale), LONG_LEASE)
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::fail(
            &q,
            &part(t),
            &short.lease(),
            "stale",
            FailKind::Retry { after: None }
        )
        .await
        .unwrap(),
        Failed::Stale
    );
    let info = q.get(t, "a-short").await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (State::Running, 2));

    // The long lease was still valid by Redis's clock: its holder acks.
    assert_eq!(
        raw::ack(&q, &part(t), &[long.lease()]).await.unwrap(),
        vec![true]
    );
    assert_eq!(
        raw::ack(&q, &part(t), &[again.lease()]).await.unwrap(),
        vec![true]
    );
    stop.cancel();
    sched.await.unwrap().unwrap();
    let stats = q.stats(t).await.unwrap();
    assert_eq!(unfinished(&q, t).await + stats.dead, 0, "{stats:?}");
    assert_eq!(
        (counter(&stats, "reclaimed"), counter(&stats, "done")),
        (1, 2),
        "{stats:?}"
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

/// Which call reaches the stopped Redis first, and so runs first when it
/// resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstAfterPause {
    /// Whatever the worker and the scheduler send (in practice the worker's
    /// lease extension, sent every lease/3).
    Natural,
    /// A tick, sent right after the worker's last extension before the pause.
    Tick,
}

/// A worker (lease 500 ms) runs 10 jobs of 1 s each; Redis stops 200 ms into
/// them, for 2 s, so the handlers end while Redis is stopped and the leases
/// have expired by Redis's clock when it resumes. Returns the `claimed`,
/// `done` and `reclaimed` counters, after checking that every job ended done
/// exactly once with consistent deliveries; `None` when the run could not
/// set up the order asked for (with `Tick`: the worker's next extension was
/// sent before Redis stopped, so Redis read it before the tick, as happens
/// when a loaded machine delays the test for more than lease/3).
async fn ride_out_a_pause(first: FirstAfterPause) -> Option<(u64, u64, u64)> {
    let server = RedisServer::start();
    let q = queue(&server).await;
    let t = "stall";
    let n = 10;
    let jobs = (0..n)
        .map(|i| {
            Job::new(format!("{i}"))
                .id(format!("s{i}"))
                .backoff(vec![Duration::ZERO])
        })
        .collect();
    q.enqueue_batch(t, jobs).await.unwrap();

    // (id, token, attempt) of every delivery, at its start and at its end.
    let started: Arc<Mutex<Vec<(String, i64, u32)>>> = Arc::default();
    let finished: Arc<Mutex<Vec<(String, i64, u32)>>> = Arc::default();
    let stop = CancellationToken::new();
    let sched = Scheduler::new(queue(&server).await, SchedulerConfig::default()).topic(t);
    let sched = tokio::spawn(sched.run(stop.clone().cancelled_owned()));
    let (s2, f2) = (started.clone(), finished.clone());
    let worker = Worker::new(
        queue(&server).await,
        WorkerConfig::default()
            .concurrency(16)
            .lease(Duration::from_millis(500))
            .shutdown_timeout(Duration::from_secs(5)),
    )
    .handle(t, move |d: Delivery| {
        let (s, f) = (s2.clone(), f2.clone());
        async move {
            s.lock().unwrap().push((d.id.clone(), d.token, d.attempt));
            tokio::time::sleep(Duration::from_secs(1)).await;
            f.lock().unwrap().push((d.id, d.token, d.attempt));
            Outcome::Done
        }
    });
    let worker = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(5), "every job to start", async || {
        started.lock().unwrap().len() == n
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let tick = if first == FirstAfterPause::Tick {
        // Stop Redis just after a lease extension (the next is lease/3
        // away), then send a tick: it is the first call Redis reads.
        let c = conn(&server).await;
        let deadline = || {
            let mut c = c.clone();
            async move {
                let d: Option<f64> = redis::cmd("ZSCORE")
                    .arg(key(t, "running"))
                    .arg("s0")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                d
            }
        };
        let last = deadline().await;
        let mut now = last;
        while now == last {
            now = deadline().await;
        }
        server.pause();
        let q = q.clone();
        Some(tokio::spawn(async move {
            raw::tick(&q, &part(t), &TickLimits::default()).await
        }))
    } else {
        server.pause();
        None
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.resume();
    if let Some(tick) = tick {
        // This tick, or the scheduler's if Redis read that one first (the
        // scheduler wakes for each lease deadline): a tick ran first.
        let r = tick.await.unwrap().unwrap();
        let reclaimed = counter(&q.stats(t).await.unwrap(), "reclaimed");
        if reclaimed == 0 && r.next_lease.is_some_and(|d| d > Duration::ZERO) {
            // An extension reached Redis first (the tick saw every lease
            // live, the next one ending ahead): this run is the natural
            // order, not the one asked for. Its own test covers it.
            eprintln!("pause test: an extension was read before the tick ({r:?}); run again");
            stop.cancel();
            worker.await.unwrap().unwrap();
            sched.await.unwrap().unwrap();
            return None;
        }
        assert_eq!(reclaimed, n as u64, "a tick ran first: {r:?}");
    }

    eventually(
        Duration::from_secs(10),
        "every job to be done",
        async || {
            let s = q.stats(t).await.unwrap();
            s.pool + s.ready + s.running + s.dead == 0
        },
    )
    .await;
    stop.cancel();
    assert_eq!(worker.await.unwrap().unwrap().abandoned, 0);
    sched.await.unwrap().unwrap();

    let started = started.lock().unwrap().clone();
    let finished = finished.lock().unwrap().clone();
    let stats = q.stats(t).await.unwrap();
    let (claimed, done, reclaimed) = (
        counter(&stats, "claimed"),
        counter(&stats, "done"),
        counter(&stats, "reclaimed"),
    );
    // Every job ended done exactly once; each delivery was either acked by
    // its holder or its lease was reclaimed (and that holder's ack refused).
    assert_eq!(done, n as u64, "{stats:?}");
    assert_eq!(claimed, done + reclaimed, "{stats:?}");
    assert_eq!(started.len() as u64, claimed, "one handler run per claim");
    assert_eq!(counter(&stats, "dead"), 0);
    for i in 0..n {
        let id = format!("s{i}");
        let mut runs: Vec<(i64, u32)> = started
            .iter()
            .filter(|(j, _, _)| *j == id)
            .map(|(_, t, a)| (*t, *a))
            .collect();
        runs.sort();
        // A re-delivery has a higher token and the next attempt number.
        for (k, (_, attempt)) in runs.iter().enumerate() {
            assert_eq!(*attempt as usize, k + 1, "job {id}: deliveries {runs:?}");
        }
        let last = runs.last().expect("every job ran");
        assert!(
            finished.iter().any(|(j, t, _)| *j == id && *t == last.0),
            "job {id}: its last delivery {last:?} ran to the end"
        );
    }
    assert!(q.check(t).await.unwrap().is_empty());
    eprintln!(
        "pause test ({first:?} first): {n} jobs, {claimed} deliveries, {reclaimed} leases \
         reclaimed after the pause, {} acked by the holder that ran through the pause",
        n as u64 - reclaimed
    );
    Some((claimed, done, reclaimed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_scheduler_ride_out_a_redis_pause_longer_than_the_lease() {
    // Either outcome is correct: the holder's extension reaches Redis first
    // and keeps the job (nobody else holds it), or a tick reclaims it first.
    ride_out_a_pause(FirstAfterPause::Natural)
        .await
        .expect("the natural order asks for no set-up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_reclaimed_during_a_redis_pause_refuse_the_holders_acks_and_rerun_the_jobs() {
    // The set-up (Redis stopped between two extensions) can miss on a loaded
    // machine; a missed run is detected and the run made again.
    let mut runs = 0;
    let (claimed, done, reclaimed) = loop {
        runs += 1;
        if let Some(r) = ride_out_a_pause(FirstAfterPause::Tick).await {
            break r;
        }
        assert!(
            runs < 5,
            "in {runs} runs, an extension always reached Redis before the tick"
        );
    };
    // Every first delivery ran to its end during the pause, but its lease was
    // reclaimed before its ack arrived: the ack was refused, the job ran again.
    assert_eq!((claimed, done, reclaimed), (20, 10, 10));
}

// ---- c. Redis at maxmemory with noeviction --------------------------------

/// Sizes and counters that an enqueue changes.
async fn footprint(c: &MultiplexedConnection, topic: &str) -> (i64, i64, i64, i64, Option<i64>) {
    let mut c = c.clone();
    let (jobs, pool, ready, running, enqueued): (i64, i64, i64, i64, Option<i64>) = redis::pipe()
        .cmd("HLEN")
        .arg(key(topic, "jobs"))
        .cmd("ZCARD")
        .arg(key(topic, "pool"))
        .cmd("ZCARD")
        .arg(key(topic, "ready"))
        .cmd("ZCARD")
        .arg(key(topic, "running"))
        .cmd("HGET")
        .arg(key(topic, "stats"))
        .arg("enqueued")
        .query_async(&mut c)
        .await
        .expect("footprint");
    (jobs, pool, ready, running, enqueued)
}

/// The serialized value of each of the topic's keys: equal snapshots mean
/// nothing was written.
async fn topic_snapshot(
    c: &MultiplexedConnection,
    topic: &str,
) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut c = c.clone();
    let mut out = BTreeMap::new();
    for k in topic_keys(topic) {
        let dump: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        out.insert(k, dump);
    }
    out
}

fn assert_oom(e: &punctual::Error, what: &str) {
    assert_eq!(e.kind(), ErrorKind::Redis, "{what}: {e}");
    assert!(e.is_retryable(), "{what}: {e}");
    assert!(
        e.to_string().contains("OOM"),
        "{what}: expected an OOM error, got: {e}"
    );
}

async fn used_memory(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "memory"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_refuses_whole_scripts_loudly_and_recovers_when_memory_is_freed() {
    let server =
        RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
    let q = queue(&server).await;
    let c = conn(&server).await;
    let t = "full";
    let zero = || vec![Duration::ZERO];

    // 1 MB of unrelated data in db 1, to free later.
    let mut db1 = redis::Client::open(format!("{}/1", server.url()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for i in 0..4 {
        let _: () = redis::cmd("SET")
            .arg(format!("ballast:{i}"))
            .arg(vec![b'x'; 256 * 1024])
            .query_async(&mut db1)
            .await
            .unwrap();
    }

    // Jobs in every state before Redis fills up: 10 ready, 3 leased for
    // 300 ms (to be reclaimed), 2 leased for long (to be acked, extended and
    // failed), 10 due in 300 ms (to be promoted).
    let mut acknowledged: Vec<String> = Vec::new();
    let ready: Vec<Job> = (0..10)
        .map(|i| Job::new("r").id(format!("r{i}")).backoff(zero()))
        .collect();
    acknowledged.extend(
        q.enqueue_batch(t, ready)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.id),
    );
    let expiring = raw::claim(&q, &part(t), 3, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(expiring.len(), 3);
    let held = raw::claim(&q, &part(t), 2, LONG_LEASE).await.unwrap();
    assert_eq!(held.len(), 2);
    let pooled: Vec<Job> = (0..10)
        .map(|i| {
            Job::new("p")
                .id(format!("p{i}"))
                .delay(Duration::from_millis(300))
                .backoff(zero())
        })
        .collect();
    acknowledged.extend(
        q.enqueue_batch(t, pooled)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.id),
    );
    let before_fill = redis_time_ms(&c).await;

    // Fill: batches of 50 jobs of 2 KiB until Redis refuses one.
    let payload = vec![b'f'; 2048];
    let mut batch = 0;
    let (err, refused_ids) = loop {
        assert!(
            batch < 1000,
            "4 MB should be full long before 100 MB of jobs"
        );
        let ids: Vec<String> = (0..50).map(|j| format!("fill{batch}-{j}")).collect();
        let jobs = ids
            .iter()
            .map(|id| Job::new(payload.clone()).id(id).backoff(zero()))
            .collect();
        let before = footprint(&c, t).await;
        match q.enqueue_batch(t, jobs).await {
            Ok(r) => {
                assert_eq!(r.len(), 50);
                acknowledged.extend(ids);
            }
            Err(e) => {
                assert_oom(&e, "the enqueue that found Redis full");
                assert_eq!(
                    footprint(&c, t).await,
                    before,
                    "the refused batch wrote nothing"
                );
                break (e, ids);
            }
        }
        batch += 1;
    };
    assert!(batch > 0, "some batches fit before Redis was full");
    for id in &refused_ids {
        let exists: bool = redis::cmd("HEXISTS")
            .arg(key(t, "jobs"))
            .arg(id)
            .query_async(&mut c.clone())
            .await
            .unwrap();
        assert!(!exists, "job {id} of the refused batch was written");
    }
    let full_at = used_memory(&server).await;

    // A refused call's own query buffer counted against the limit, and
    // client buffers come and go, so a smaller write may still fit. Hold
    // Redis firmly over its limit from here on: lower maxmemory to 1 MB,
    // well below what the data alone uses.
    server.cli(&["CONFIG", "SET", "maxmemory", "1mb"]).unwrap();
    let before = footprint(&c, t).await;
    let e = q.enqueue(t, Job::new("one").id("one")).await.unwrap_err();
    assert_oom(&e, "a single enqueue");
    assert_eq!(
        footprint(&c, t).await,
        before,
        "the refused job wrote nothing"
    );

    // The runtime's writes under OOM: each runs whole or is refused whole.
    // Wait until the pooled jobs are due and the short leases expired.
    eventually(
        Duration::from_secs(5),
        "the pooled jobs to be due",
        async || redis_time_ms(&c).await > before_fill + 300,
    )
    .await;
    let mut outcomes: Vec<(&str, String)> = Vec::new();
    let mut more_held: Vec<Delivery> = Vec::new();
    let mut acked_under_oom: HashSet<String> = HashSet::new();
    let mut failed_under_oom: Option<String> = None;
    for op in ["tick", "claim", "ack", "extend", "fail"] {
        let snap = topic_snapshot(&c, t).await;
        let result: punctual::Result<String> = match op {
            "tick" => raw::tick(&q, &part(t), &TickLimits::default())
                .await
                .map(|r| format!("{r:?}")),
            "claim" => raw::claim(&q, &part(t), 5, LONG_LEASE).await.map(|d| {
                let s = format!("claimed {}", d.len());
                more_held.extend(d);
                s
            }),
            "ack" => {
                let pair = [held[0].lease()];
                raw::ack(&q, &part(t), &pair).await.map(|f| {
                    assert_eq!(
                        f,
                        vec![true],
                        "a held lease is acked or the ack refused by Redis"
                    );
                    acked_under_oom.insert(held[0].id.clone());
                    format!("{f:?}")
                })
            }
            "extend" => {
                let pair = [held[1].lease()];
                raw::extend(&q, &part(t), &pair, LONG_LEASE)
                    .await
                    .map(|f| format!("{f:?}"))
            }
            _ => raw::fail(
                &q,
                &part(t),
                &held[1].lease(),
                "under oom",
                FailKind::Retry { after: None },
            )
            .await
            .map(|f| {
                assert_eq!(f, Failed::Retry, "a held lease fails into a retry");
                failed_under_oom = Some(held[1].id.clone());
                format!("{f:?}")
            }),
        };
        match result {
            Ok(v) => outcomes.push((op, format!("ran: {v}"))),
            Err(e) => {
                assert_oom(&e, op);
                assert_eq!(
                    topic_snapshot(&c, t).await,
                    snap,
                    "{op} was refused but wrote something"
                );
                outcomes.push((op, "refused (OOM), nothing written".into()));
            }
        }
    }
    // Acks and lease extensions only delete or update in place: they run
    // even over maxmemory (flags=allow-oom), so a full Redis can drain.
    let ran = |op: &str| {
        outcomes
            .iter()
            .any(|(o, v)| *o == op && v.starts_with("ran"))
    };
    assert!(ran("ack"), "acks run under OOM: {outcomes:?}");
    assert!(ran("extend"), "extends run under OOM: {outcomes:?}");
    // Reads still work, and the topic is consistent.
    assert!(q.stats(t).await.is_ok());
    assert!(q.get(t, "p0").await.unwrap().is_some());
    let v = q.check(t).await.unwrap();
    assert!(v.is_empty(), "under OOM: {v:?}");

    // Free the unrelated data: everything works again.
    server.cli(&["CONFIG", "SET", "maxmemory", "4mb"]).unwrap();
    let _: () = redis::cmd("FLUSHDB").query_async(&mut db1).await.unwrap();
    let freed_to = used_memory(&server).await;
    let r = q.enqueue(t, Job::new("after").id("after")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    acknowledged.push("after".into());

    // Drain: promote, reclaim, claim and ack everything that is live.
    let mut handled: HashSet<String> = acked_under_oom.clone();
    let mut to_ack: Vec<Lease> = held
        .iter()
        .chain(more_held.iter())
        .filter(|d| !acked_under_oom.contains(&d.id) && failed_under_oom.as_ref() != Some(&d.id))
        .map(|d| d.lease())
        .collect();
    eventually(
        Duration::from_secs(10),
        "every job to be claimed",
        async || {
            let tick = raw::tick(&q, &part(t), &TickLimits::default())
                .await
                .unwrap();
            let got = raw::claim(&q, &part(t), 100, LONG_LEASE).await.unwrap();
            to_ack.extend(got.iter().map(|d| d.lease()));
            !tick.more && got.is_empty() && {
                let s = q.stats(t).await.unwrap();
                s.pool + s.ready == 0 && s.running as usize == to_ack.len()
            }
        },
    )
    .await;
    let flags = raw::ack(&q, &part(t), &to_ack).await.unwrap();
    assert!(flags.iter().all(|f| *f), "{flags:?}");
    handled.extend(to_ack.into_iter().map(|l| l.id));
    // A job failed under OOM (if Redis let it run) went back to ready and was
    // claimed again above; nothing is dead.
    let stats = q.stats(t).await.unwrap();
    assert_eq!(
        (stats.pool, stats.ready, stats.running, stats.dead),
        (0, 0, 0, 0),
        "{stats:?}"
    );
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|id| !handled.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged but never delivered: {lost:?}"
    );
    assert!(q.check(t).await.unwrap().is_empty());
    eprintln!(
        "oom test: {} jobs fit ({batch} batches), used_memory {full_at} when full, {freed_to} \
         after freeing the ballast; under OOM: {outcomes:?}; first error: {err}",
        acknowledged.len() - 1
    );
}

// ---- d. many jobs due at the same instant ---------------------------------

/// The sorted run times of one script in a slow log.
fn script_times(log: &[(Duration, Vec<String>)], script: &str) -> Vec<Duration> {
    let sha = redis::Script::new(&punctual::internal::script_source(script).unwrap())
        .get_hash()
        .to_string();
    let mut v: Vec<Duration> = log
        .iter()
        .filter(|(_, a)| a.len() > 1 && a[0].eq_ignore_ascii_case("evalsha") && a[1] == sha)
        .map(|(d, _)| *d)
        .collect();
    v.sort();
    v
}

/// p50 / p99 / max of sorted samples, for the report.
fn spread(sorted: &[Duration]) -> String {
    if sorted.is_empty() {
        return "no samples".into();
    }
    format!(
        "n {} p50 {:?} p99 {:?} max {:?}",
        sorted.len(),
        percentile(sorted, 50.0),
        percentile(sorted, 99.0),
        sorted[sorted.len() - 1]
    )
}

/// The slowest command of a log, but for the test's own SLOWLOG calls.
fn slowest(log: &[(Duration, Vec<String>)]) -> (Duration, String) {
    log.iter()
        .filter(|(_, a)| !a.first().is_some_and(|c| c.eq_ignore_ascii_case("slowlog")))
        .max_by_key(|(d, _)| *d)
        .map(|(d, a)| (*d, a.iter().take(2).cloned().collect::<Vec<_>>().join(" ")))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_due_at_one_instant_is_promoted_in_short_ticks_while_redis_stays_responsive() {
    // 200,000 keeps CI fast; PUNCTUAL_FLOOD_JOBS=1000000 measures the brief's figure.
    let n: usize = std::env::var("PUNCTUAL_FLOOD_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let server = RedisServer::start();
    let q = queue(&server).await;
    let c = conn(&server).await;
    let t = "flood";

    // All jobs are due at one absolute instant, which must come after the
    // last of them is enqueued. The flood goes in as a producer in another
    // language would send it (PROTOCOL.md): EVALSHA of the enqueue script,
    // 1000 jobs a call, here piped through `redis-cli --pipe`, which is
    // faster than this unoptimized test build.
    let mut cc = c.clone();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(punctual::internal::script_source("enqueue").unwrap())
        .query_async(&mut cc)
        .await
        .unwrap();
    let enqueue_calls = |due_ms: i64, range: std::ops::Range<usize>| {
        let mut out = Vec::new();
        let bulk = |out: &mut Vec<u8>, s: &[u8]| {
            out.extend_from_slice(format!("${}\r\n", s.len()).as_bytes());
            out.extend_from_slice(s);
            out.extend_from_slice(b"\r\n");
        };
        let ids: Vec<usize> = range.collect();
        for chunk in ids.chunks(1000) {
            let keys = topic_keys(t);
            let head = 3 + keys.len() + 3;
            out.extend_from_slice(format!("*{}\r\n", head + 5 * chunk.len()).as_bytes());
            bulk(&mut out, b"EVALSHA");
            bulk(&mut out, sha.as_bytes());
            bulk(&mut out, keys.len().to_string().as_bytes());
            for k in &keys {
                bulk(&mut out, k.as_bytes());
            }
            bulk(&mut out, b"65536");
            bulk(&mut out, b"0");
            bulk(&mut out, chunk.len().to_string().as_bytes());
            let when = format!("a{due_ms}");
            for i in chunk {
                bulk(&mut out, format!("f{i}").as_bytes());
                bulk(&mut out, i.to_string().as_bytes());
                bulk(&mut out, when.as_bytes());
                bulk(&mut out, b"");
                bulk(&mut out, b"");
            }
        }
        out
    };
    let pipe = |calls: Vec<u8>| {
        use std::io::Write;
        let mut child = std::process::Command::new("redis-cli")
            .arg("-p")
            .arg(server.port().to_string())
            .arg("--pipe")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("redis-cli --pipe");
        child.stdin.take().unwrap().write_all(&calls).unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && text.contains("errors: 0"),
            "redis-cli --pipe: {text}"
        );
    };
    // Time a sample first (then delete it) to place the instant.
    let timer = Instant::now();
    let sample = (n / 40).max(1000);
    let in_an_hour = redis_time_ms(&c).await + 3_600_000;
    tokio::task::block_in_place(|| pipe(enqueue_calls(in_an_hour, 0..sample)));
    let per_job = timer.elapsed() / sample as u32;
    let _: () = redis::cmd("DEL")
        .arg(topic_keys(t))
        .query_async(&mut cc)
        .await
        .unwrap();
    let margin = per_job * n as u32 * 3 / 2 + Duration::from_millis(500);
    let due_ms = redis_time_ms(&c).await + margin.as_millis() as i64;
    let timer = Instant::now();
    tokio::task::block_in_place(|| pipe(enqueue_calls(due_ms, 0..n)));
    let enqueue_took = timer.elapsed();
    let ids: HashSet<String> = (0..n).map(|i| format!("f{i}")).collect();
    let s = q.stats(t).await.unwrap();
    assert_eq!(
        (s.pool, s.ready),
        (n as u64, 0),
        "every job waits for the same instant (enqueue took {enqueue_took:?}, margin {margin:?})"
    );

    // Log every command with its run time from here on. The log of a whole
    // catch-up is a long reply: allow it time.
    let mut slow = conn(&server).await;
    slow.set_response_timeout(Duration::from_secs(30));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .arg("slowlog-max-len")
        .arg(1_000_000)
        .query_async(&mut slow)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut slow)
        .await
        .unwrap();

    // Every command Redis runs during the promotion, those its scripts run
    // included ("[0 lua]"): each tick's `HINCRBY stats promoted <k>` says
    // how many jobs that one call moved.
    let monitor_log = server.dir().join("monitor.log");
    let mut monitor = std::process::Command::new("redis-cli")
        .arg("-p")
        .arg(server.port().to_string())
        .arg("monitor")
        .stdout(std::fs::File::create(&monitor_log).unwrap())
        .spawn()
        .expect("redis-cli monitor");
    eventually(Duration::from_secs(10), "MONITOR to start", async || {
        std::fs::read_to_string(&monitor_log).is_ok_and(|s| s.starts_with("OK"))
    })
    .await;

    // A scheduler with the default batches (200 per tick), started before
    // the instant. Ready may hold the whole flood, so that the promotion
    // alone is measured first; consumers come after.
    let stop = CancellationToken::new();
    let config = SchedulerConfig::default().max_ready(n);
    let batch = config.promote_batch;
    let sched = Scheduler::new(queue(&server).await, config).topic(t);
    let sched = tokio::spawn(sched.run(stop.clone().cancelled_owned()));

    // Another client pings all along.
    let pinger = {
        let mut c = conn(&server).await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while !stop.is_cancelled() {
                let t0 = Instant::now();
                let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
                samples.push((t0, t0.elapsed()));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            samples
        })
    };
    // The due instant on this process's clock.
    let due_at = {
        let (local, redis_now) = (Instant::now(), redis_time_ms(&c).await);
        local + Duration::from_millis((due_ms - redis_now).max(0) as u64)
    };

    // Phase 1: the scheduler promotes the flood.
    eventually(
        margin + Duration::from_secs(30),
        "the scheduler to promote every job",
        async || {
            let s = q.stats(t).await.unwrap();
            s.pool == 0 && s.ready == n as u64
        },
    )
    .await;
    let promoted_at = Instant::now();
    let promote_log = take_slowlog(&mut slow).await;
    // The jobs each tick moved, once the log holds all n.
    let stats_key = key(t, "stats");
    let mut per_tick = Vec::new();
    let every = Duration::from_millis(200);
    punctual_testkit::eventually_every(
        every,
        Duration::from_secs(60),
        "MONITOR to log every tick",
        async || {
            let log = std::fs::read_to_string(&monitor_log).unwrap_or_default();
            per_tick = promoted_per_call(&log, &stats_key);
            per_tick.iter().sum::<usize>() >= n
        },
    )
    .await;
    monitor.kill().unwrap();
    monitor.wait().unwrap();

    // Phase 2: a consumer claims (1000 at a time, the most one call takes)
    // and acks everything.
    let mut claimed: HashSet<String> = HashSet::with_capacity(n);
    let mut early = 0;
    let deadline = Instant::now() + Duration::from_secs(60 * (n as u64 / 200_000).max(1));
    loop {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} jobs claimed",
            claimed.len()
        );
        let got = raw::claim(&q, &part(t), 1000, LONG_LEASE).await.unwrap();
        if got.is_empty() {
            break;
        }
        assert!(got.len() <= 1000, "a claim of 1000 took {}", got.len());
        let pairs: Vec<Lease> = got
            .iter()
            .map(|d| {
                if d.claimed_us < d.due_ms * 1000 {
                    early += 1;
                }
                d.lease()
            })
            .collect();
        let flags = raw::ack(&q, &part(t), &pairs).await.unwrap();
        assert!(flags.iter().all(|f| *f), "a fresh lease is acked");
        for Lease { id, .. } in pairs {
            assert!(claimed.insert(id.clone()), "job {id} claimed twice");
        }
    }
    let drained_at = Instant::now();
    let drain_log = take_slowlog(&mut slow).await;
    stop.cancel();
    sched.await.unwrap().unwrap();
    let pings = pinger.await.unwrap();

    assert_eq!(early, 0, "jobs claimed before their due time");
    assert_eq!(claimed, ids, "every job promoted and claimed once");
    let stats = q.stats(t).await.unwrap();
    assert_eq!(counter(&stats, "promoted"), n as u64, "{stats:?}");
    assert_eq!(unfinished(&q, t).await, 0);
    assert!(q.check(t).await.unwrap().is_empty());

    let pings_between = |from: Instant, to: Instant| {
        let mut v: Vec<Duration> = pings
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(_, d)| *d)
            .collect();
        v.sort();
        v
    };
    let ping_promote = pings_between(due_at, promoted_at);
    let ping_drain = pings_between(promoted_at, drained_at);
    let ticks = script_times(&promote_log, "tick");
    let claims = script_times(&drain_log, "claim");
    let acks = script_times(&drain_log, "ack");
    let (slow_promote, slow_drain) = (slowest(&promote_log), slowest(&drain_log));
    eprintln!(
        "flood test: {n} jobs due at one instant, enqueued in {enqueue_took:?}.\n  \
         promotion: all promoted {:?} after the due time; ticks {}; slowest command {:?} ({}); \
         PING from another client {}\n  \
         drain: claimed and acked in {:?}; claims of 1000 {}; acks of 1000 {}; slowest command \
         {:?} ({}); PING {}",
        promoted_at.saturating_duration_since(due_at),
        spread(&ticks),
        slow_promote.0,
        slow_promote.1,
        spread(&ping_promote),
        drained_at - promoted_at,
        spread(&claims),
        spread(&acks),
        slow_drain.0,
        slow_drain.1,
        spread(&ping_drain),
    );

    // Promotion is bounded: every tick moved at most its batch, so no call
    // holds Redis (and its other clients) for longer than moving 200 jobs
    // takes, however large the flood. Counted, not timed: a slow machine
    // makes each call slower, never larger. (The times above are for the
    // report only.)
    assert_eq!(
        per_tick.iter().sum::<usize>(),
        n,
        "the ticks' HINCRBY promoted add up to the flood"
    );
    let largest = per_tick.iter().copied().max().unwrap_or(0);
    assert!(
        largest <= batch,
        "a tick promoted {largest} jobs in one call (batch {batch}); per call: {:?}",
        &per_tick[..per_tick.len().min(20)]
    );
    assert!(
        ticks.len() >= n / batch,
        "{} ticks logged for {n} jobs promoted {batch} at a time",
        ticks.len()
    );
}

/// The jobs each `tick` call of a MONITOR log promoted: the increments of
/// the `promoted` counter of `stats_key` that scripts made, one per call.
fn promoted_per_call(log: &str, stats_key: &str) -> Vec<usize> {
    let pattern = format!("[0 lua] \"HINCRBY\" \"{stats_key}\" \"promoted\" \"");
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find(&pattern)? + pattern.len()..];
            rest.strip_suffix('"')?.parse().ok()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_part_way_says_exactly_which_jobs_were_written() {
    let server =
        RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
    let q = crate::util::queue(&server).await;
    // 3,000 jobs of ~1 KiB: twelve calls of 250; memory runs out on the way.
    let payload = "x".repeat(1000);
    let jobs: Vec<Job> = (0..3000)
        .map(|i| Job::new(payload.clone()).id(format!("b{i}")))
        .collect();
    let err = q.enqueue_batch("t", jobs).await.unwrap_err();
    let punctual::Error::PartialBatch {
        total,
        written,
        failed,
        ..
    } = &err
    else {
        panic!("expected a partial batch, got {err}");
    };
    assert_eq!(*total, 3000);
    assert_eq!(written.len() + failed.len(), 3000);
    assert!(
        !written.is_empty() && written.len() % punctual::DEFAULT_ENQUEUE_CHUNK == 0,
        "whole calls: {}",
        written.len()
    );
    assert!(err.is_retryable());
    assert!(err.to_string().contains("written"), "{err}");
    let stats = q.stats("t").await.unwrap();
    assert_eq!(
        stats.ready as usize,
        written.len(),
        "exactly the reported jobs were written"
    );
    for (i, e) in written {
        assert_eq!(e.id, format!("b{i}"));
        assert!(q.get("t", &e.id).await.unwrap().is_some());
    }
    for i in failed.iter().take(50) {
        assert!(q.get("t", &format!("b{i}")).await.unwrap().is_none());
    }
}
