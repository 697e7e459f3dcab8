//! Worker and scheduler semantics, end to end: real redis-server, real
//! processes for the crash tests (this test binary re-executes itself as a
//! consumer child, see `child_consumer`).

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::{
    Capacity, Job, Outcome, Queue, Scheduler, SchedulerConfig, State, Worker, WorkerConfig,
};
use punctual_testkit::{eventually, RedisServer};
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

fn fast_scheduler() -> SchedulerConfig {
    SchedulerConfig::default().max_sleep(Duration::from_millis(500))
}

/// Runs a scheduler for `topics` until the token is cancelled.
pub(crate) fn spawn_scheduler(
    queue: &Queue,
    topics: &[&str],
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let mut s = Scheduler::new(queue.clone(), fast_scheduler());
    for t in topics {
        s = s.topic(*t);
    }
    let stop = stop.clone();
    tokio::spawn(async move { s.run(stop.cancelled_owned()).await.expect("scheduler") })
}

pub(crate) async fn total_live(q: &Queue, topic: &str) -> u64 {
    let s = q.stats(topic).await.unwrap();
    s.pool + s.ready + s.running + s.dead
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_early_and_each_job_once_over_random_delays() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let n = 3000;
    let jobs: Vec<Job> = (0..n)
        .map(|i| Job::new(format!("{i}")).delay(Duration::from_millis(rng.random_range(0..2000))))
        .collect();
    let ids: Vec<String> = q
        .enqueue_batch("t", jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();

    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let early: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let (seen2, early2) = (seen.clone(), early.clone());
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(32)
            .lease(Duration::from_secs(10)),
    )
    .handle("t", move |d| {
        let (seen, early) = (seen2.clone(), early2.clone());
        async move {
            // The claim's Redis time is before this handler started.
            if d.claimed_us < d.due_ms * 1000 {
                early.lock().unwrap().push(format!(
                    "{} claimed {}us due {}ms",
                    d.id, d.claimed_us, d.due_ms
                ));
            }
            *seen.lock().unwrap().entry(d.id.clone()).or_default() += 1;
            Outcome::Done
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(30), "all jobs handled", || async {
        seen.lock().unwrap().len() == n
    })
    .await;
    eventually(Duration::from_secs(10), "all acked", || async {
        total_live(&q, "t").await == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();

    assert!(
        early.lock().unwrap().is_empty(),
        "early starts: {:?}",
        early.lock().unwrap()
    );
    let seen = seen.lock().unwrap().clone();
    for id in &ids {
        assert_eq!(
            seen.get(id),
            Some(&1),
            "job {id} handled {:?} times",
            seen.get(id)
        );
    }
    assert!(q.check("t").await.unwrap().is_empty());
}

/// A hand-back costs no attempt, so a handler answering it while the worker
/// runs would put its job back for ever: it is taken as a retry then, and
/// the job reaches dead after its attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_back_while_running_counts_as_a_retry() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    q.enqueue(
        "t",
        Job::new("x")
            .id("back")
            .max_attempts(3)
            .backoff(vec![Duration::ZERO]),
    )
    .await
    .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let c2 = calls.clone();
    let worker = Worker::new(q.clone(), WorkerConfig::default()).handle("t", move |_| {
        c2.fetch_add(1, Ordering::SeqCst);
        async { Outcome::HandBack }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(
        Duration::from_secs(10),
        "the job to reach dead",
        async || q.stats("t").await.unwrap().dead == 1,
    )
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3, "one run per attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_outcomes_timeout_panic_permanent_and_retry_after() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let zero = vec![Duration::ZERO];
    q.enqueue(
        "t",
        Job::new("panic")
            .id("panic")
            .max_attempts(2)
            .backoff(zero.clone()),
    )
    .await
    .unwrap();
    q.enqueue(
        "t",
        Job::new("hang")
            .id("hang")
            .max_attempts(2)
            .backoff(zero.clone()),
    )
    .await
    .unwrap();
    q.enqueue("t", Job::new("perm").id("perm").max_attempts(5))
        .await
        .unwrap();
    q.enqueue("t", Job::new("flaky").id("flaky").max_attempts(5))
        .await
        .unwrap();

    let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let calls2 = calls.clone();
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(4)
            .lease(Duration::from_secs(5)),
    )
    .handle_with_timeout("t", Duration::from_millis(300), move |d| {
        let calls = calls2.clone();
        async move {
            let n = {
                let mut c = calls.lock().unwrap();
                let e = c.entry(d.id.clone()).or_default();
                *e += 1;
                *e
            };
            match d.id.as_str() {
                "panic" => panic!("boom {n}"),
                "hang" => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Outcome::Done
                }
                "perm" => Outcome::permanent("bad payload"),
                // Fails once, asking for a 200 ms wait, then succeeds.
                _ if n == 1 => Outcome::retry_after("busy", Duration::from_millis(200)),
                _ => Outcome::Done,
            }
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(20), "outcomes recorded", || async {
        let s = q.stats("t").await.unwrap();
        s.dead == 3 && s.pool + s.ready + s.running == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();

    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls["panic"], 2,
        "a panicking handler is retried up to max attempts"
    );
    assert_eq!(
        calls["hang"], 2,
        "a hanging handler is timed out and retried"
    );
    assert_eq!(calls["perm"], 1, "a permanent failure is not retried");
    assert_eq!(calls["flaky"], 2);
    let p = q.get("t", "panic").await.unwrap().unwrap();
    assert_eq!(p.state, State::Dead);
    assert!(p.last_error.unwrap().contains("handler panicked: boom 2"));
    let h = q.get("t", "hang").await.unwrap().unwrap();
    assert!(
        h.last_error.unwrap().contains("timed out"),
        "timeout is the last error"
    );
    let perm = q.get("t", "perm").await.unwrap().unwrap();
    assert_eq!((perm.state, perm.attempts), (State::Dead, 1));
    assert!(
        q.get("t", "flaky").await.unwrap().is_none(),
        "flaky is done and deleted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_extended_while_a_long_handler_runs() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("long").backoff(vec![Duration::ZERO]))
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let c2 = calls.clone();
    // The handler runs for five leases; without extension it would be
    // reclaimed and delivered again.
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default().lease(Duration::from_millis(300)),
    )
    .handle_with_timeout("t", Duration::from_secs(10), move |_| {
        let c = c2.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Outcome::Done
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "long job done", || async {
        total_live(&q, "t").await == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "delivered exactly once");
    assert_eq!(q.stats("t").await.unwrap().counters.get("reclaimed"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_job_stops_its_handler() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("c")).await.unwrap();
    struct Flag(Arc<AtomicUsize>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let d2 = dropped.clone();
    let stop = CancellationToken::new();
    // A lease of a minute: the keeper's backstop (a refused extension,
    // every 20 s) cannot be what stops the handler in time; the cancel
    // message must. The handler ignores every token: it is dropped after
    // the grace.
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .lease(Duration::from_secs(60))
            .cancelled_grace(Duration::from_millis(100)),
    )
    .handle_with_timeout("t", Duration::from_secs(60), move |_| {
        let flag = Flag(d2.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(flag);
            Outcome::Done
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(5), "job running", || async {
        q.stats("t").await.unwrap().running == 1
    })
    .await;
    assert_eq!(q.cancel("t", "c").await.unwrap(), Some(State::Running));
    eventually(Duration::from_secs(5), "handler stopped", || async {
        dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    assert_eq!(total_live(&q, "t").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_connection_fires_the_delivery_token_and_records_nothing() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    // The operator's side: another connection (another process or host
    // would do the same: the message goes through Redis).
    let operator = Queue::connect(server.url()).await.unwrap();
    q.enqueue("t", Job::new("x").id("c")).await.unwrap();
    // What the handler saw: the delivery's token, then its own.
    let seen: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let log = seen.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default().lease(Duration::from_secs(60)),
    )
    .handler_with_timeout(
        "t",
        Duration::from_secs(60),
        punctual::cancellable(move |job: punctual::Delivery, token: CancellationToken| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push("started");
                job.cancelled.cancelled().await;
                log.lock().unwrap().push("cancelled");
                token.cancelled().await;
                log.lock().unwrap().push("token");
                // Not recorded: the cancel ended the job.
                Outcome::Done
            }
        }),
    );
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "job running", || async {
        seen.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(
        operator.cancel("t", "c").await.unwrap(),
        Some(State::Running)
    );
    eventually(
        Duration::from_secs(10),
        "the handler heard the cancel",
        || async { seen.lock().unwrap().len() == 3 },
    )
    .await;
    assert_eq!(*seen.lock().unwrap(), ["started", "cancelled", "token"]);
    stop.cancel();
    let stopped = w.await.unwrap().unwrap();
    assert_eq!(stopped.abandoned, 0);
    let s = q.stats("t").await.unwrap();
    assert_eq!(s.pool + s.ready + s.running + s.dead, 0);
    let c = |n: &str| s.counters.get(n).copied().unwrap_or(0);
    assert_eq!(
        (c("cancelled"), c("done"), c("retried"), c("dead")),
        (1, 0, 0, 0)
    );
    // Not reclaimed later either: nothing is left to reclaim.
    assert!(q.get("t", "c").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_the_end_of_a_job_leaves_it_done_or_cancelled_never_both() {
    use punctual::raw::{self, FailKind, Failed, Partition};
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let part: Partition = "t".parse().unwrap();
    q.enqueue("t", Job::new("x").id("a")).await.unwrap();
    q.enqueue("t", Job::new("x").id("b")).await.unwrap();
    let jobs = raw::claim(&q, &part, 2, Duration::from_secs(60))
        .await
        .unwrap();
    let lease = |id: &str| jobs.iter().find(|j| j.id == id).unwrap().lease();
    // The ack first: the job stays done, the cancel finds nothing.
    assert_eq!(raw::ack(&q, &part, &[lease("a")]).await.unwrap(), [true]);
    assert_eq!(q.cancel("t", "a").await.unwrap(), None);
    // The cancel first: no ack, fail or extension of the lease lands.
    assert_eq!(q.cancel("t", "b").await.unwrap(), Some(State::Running));
    assert_eq!(raw::ack(&q, &part, &[lease("b")]).await.unwrap(), [false]);
    let b = lease("b");
    let failed = raw::fail(&q, &part, &b, "late", FailKind::Retry { after: None });
    assert_eq!(failed.await.unwrap(), Failed::Stale);
    let held = [b];
    let extended = raw::extend(&q, &part, &held, Duration::from_secs(60));
    assert_eq!(extended.await.unwrap(), [false]);
    let s = q.stats("t").await.unwrap();
    assert_eq!(s.pool + s.ready + s.running + s.dead, 0);
    let c = |s: &punctual::TopicStats, n: &str| s.counters.get(n).copied().unwrap_or(0);
    assert_eq!(
        (c(&s, "done"), c(&s, "cancelled"), c(&s, "retried")),
        (1, 1, 0)
    );

    // At once: a worker ending jobs as fast as it can, an operator
    // cancelling every one of them meanwhile.
    let n = 300;
    let ids: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
    let jobs: Vec<Job> = ids.iter().map(|id| Job::new("x").id(id.clone())).collect();
    q.enqueue_batch("r", jobs).await.unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(8)
            .lease(Duration::from_secs(60)),
    )
    .handle("r", |job| async move {
        if job.id.ends_with('7') {
            tokio::task::yield_now().await;
        }
        Outcome::Done
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    let operator = Queue::connect(server.url()).await.unwrap();
    let mut replies: HashMap<&'static str, u64> = HashMap::new();
    for id in &ids {
        let r = operator.cancel("r", id).await.unwrap();
        let kind = match r {
            None => "gone",
            Some(State::Running) => "running",
            Some(_) => "waiting",
        };
        *replies.entry(kind).or_default() += 1;
    }
    eventually(Duration::from_secs(20), "every job ended", || async {
        total_live(&q, "r").await == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    let s = q.stats("r").await.unwrap();
    let cancelled =
        replies.get("running").copied().unwrap_or(0) + replies.get("waiting").copied().unwrap_or(0);
    // Each job ended once: done (the cancel then found nothing) or
    // cancelled (its ack then refused), never both, never retried.
    assert_eq!(c(&s, "cancelled"), cancelled, "{replies:?} {s:?}");
    assert_eq!(
        c(&s, "done"),
        replies.get("gone").copied().unwrap_or(0),
        "{replies:?} {s:?}"
    );
    assert_eq!(c(&s, "done") + c(&s, "cancelled"), n as u64);
    for name in ["retried", "dead", "reclaimed"] {
        assert_eq!(c(&s, name), 0, "{name}: {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_running_jobs() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let jobs = (0..8).map(|i| Job::new(format!("{i}"))).collect();
    q.enqueue_batch("t", jobs).await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let (s2, f2) = (started.clone(), finished.clone());
    let stop = CancellationToken::new();
    let worker =
        Worker::new(q.clone(), WorkerConfig::default().concurrency(8)).handle("t", move |_| {
            let (s, f) = (s2.clone(), f2.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(500)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Outcome::Done
            }
        });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(5), "all started", || async {
        started.load(Ordering::SeqCst) == 8
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    assert_eq!(
        finished.load(Ordering::SeqCst),
        8,
        "run returned only after the handlers finished"
    );
    assert_eq!(total_live(&q, "t").await, 0, "and their acks were recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_worker_and_scheduler_do_not_poll() {
    idle_consumers_do_not_poll(None).await;
}

/// A topic whose handler has a capacity of its own (serve's resident
/// programs): a claim that comes back short gives the unused capacity back
/// without waking the fetcher again, or it would claim in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_worker_with_a_capacity_does_not_poll() {
    let cap = Capacity::new();
    cap.open(4);
    idle_consumers_do_not_poll(Some(cap)).await;
}

async fn idle_consumers_do_not_poll(capacity: Option<Arc<Capacity>>) {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let stop = CancellationToken::new();
    let sched = tokio::spawn({
        let s = Scheduler::new(q.clone(), SchedulerConfig::default()).topic("t");
        let stop = stop.clone();
        async move { s.run(stop.cancelled_owned()).await }
    });
    let handled = Arc::new(AtomicUsize::new(0));
    let h2 = handled.clone();
    let worker =
        Worker::new(q.clone(), WorkerConfig::default().concurrency(64)).handle("t", move |_| {
            let h = h2.clone();
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                Outcome::Done
            }
        });
    let worker = match capacity {
        Some(cap) => worker.capacity("t", cap),
        None => worker,
    };
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    // Let both settle, then count the commands Redis runs in 2 s of idleness.
    q.enqueue("t", Job::new("warm-up").delay(Duration::from_millis(100)))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "warm-up job handled", || async {
        handled.load(Ordering::SeqCst) == 1
    })
    .await;
    // The worker adds the warm-up's lateness to the history within one
    // flush period (5 s): let that pass too.
    tokio::time::sleep(Duration::from_millis(5_300)).await;
    let count = || {
        let info = server.cli(&["INFO", "stats"]).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap()
    };
    let before = count();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = count();
    // Two INFO calls are counted, and the process registry's heartbeats:
    // at most one beat each of the worker and the scheduler in 2 s (5 s
    // period), one command, or three for the full beat that comes every
    // 12th. A 50 ms poller would add about 40 per topic.
    assert!(
        after - before <= 8,
        "idle consumers ran {} commands in 2 s",
        after - before
    );
    // And they still wake at once for new work.
    q.enqueue("t", Job::new("late").delay(Duration::from_millis(200)))
        .await
        .unwrap();
    eventually(Duration::from_secs(3), "woken for a new job", || async {
        handled.load(Ordering::SeqCst) == 2
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap().unwrap();
}

// ---- crash tests: real processes ------------------------------------------

const CHILD_ENV: &str = "PUNCTUAL_TEST_CHILD";

/// Not a test on its own: when `PUNCTUAL_TEST_CHILD` is set, this process is
/// a consumer for the crash tests. Mode "slow": each job sleeps 300 ms, then
/// records its id in the set `test:done`. Mode "crash": the process aborts as
/// soon as it gets a job.
#[test]
fn child_consumer() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let url = std::env::var("PUNCTUAL_TEST_REDIS").expect("redis url");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let q = Queue::connect(url.clone()).await.unwrap();
        // Where handlers record done ids: one node, or a cluster (seed URLs).
        #[derive(Clone)]
        enum Conn {
            One(redis::aio::MultiplexedConnection),
            Cluster(redis::cluster_async::ClusterConnection),
        }
        let conn = if url.contains(',') {
            let seeds: Vec<&str> = url.split(',').collect();
            let client = redis::cluster::ClusterClient::new(seeds).unwrap();
            Conn::Cluster(client.get_async_connection().await.unwrap())
        } else {
            let client = redis::Client::open(url).unwrap();
            Conn::One(client.get_multiplexed_async_connection().await.unwrap())
        };
        let worker = Worker::new(
            q,
            WorkerConfig::default()
                .concurrency(8)
                .lease(Duration::from_millis(500)),
        )
        .handle("t", move |d| {
            let conn = conn.clone();
            let crash = mode == "crash";
            async move {
                if crash {
                    std::process::abort();
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                let sadd = redis::cmd("SADD").arg("test:done").arg(&d.id).clone();
                let _: i64 = match conn {
                    Conn::One(mut c) => sadd.query_async(&mut c).await.unwrap(),
                    Conn::Cluster(mut c) => sadd.query_async(&mut c).await.unwrap(),
                };
                Outcome::Done
            }
        });
        worker.run(futures::future::pending()).await.unwrap();
    });
}

pub(crate) fn spawn_child(mode: &str, url: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "worker::child_consumer",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .env("PUNCTUAL_TEST_REDIS", url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child consumer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_killed_mid_job_loses_nothing() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    let n = 60;
    let jobs = (0..n)
        .map(|i| Job::new(format!("{i}")).backoff(vec![Duration::ZERO]))
        .collect();
    let ids: Vec<String> = q
        .enqueue_batch("t", jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);

    let mut child = spawn_child("slow", &server.url());
    eventually(Duration::from_secs(20), "child holds leases", || async {
        q.stats("t").await.unwrap().running > 0
    })
    .await;
    child.kill().unwrap(); // SIGKILL, mid-job
    child.wait().unwrap();
    let stranded = q.stats("t").await.unwrap().running;
    assert!(stranded > 0, "the killed child held leases");

    let mut second = spawn_child("slow", &server.url());
    let done_count = || {
        let out = server.cli(&["SCARD", "test:done"]).unwrap();
        out.trim().parse::<usize>().unwrap()
    };
    eventually(Duration::from_secs(60), "every job done", || async {
        total_live(&q, "t").await == 0
    })
    .await;
    second.kill().unwrap();
    second.wait().unwrap();
    stop.cancel();
    sched.await.unwrap();

    assert_eq!(done_count(), n, "every job ran to completion at least once");
    for id in &ids {
        assert_eq!(
            server.cli(&["SISMEMBER", "test:done", id]).unwrap().trim(),
            "1",
            "job {id} lost"
        );
    }
    let stats = q.stats("t").await.unwrap();
    assert!(stats.counters.get("reclaimed").copied().unwrap_or(0) >= stranded);
    assert!(q.check("t").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_kills_its_worker_every_time_ends_dead() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    q.enqueue(
        "t",
        Job::new("poison")
            .id("poison")
            .max_attempts(3)
            .backoff(vec![Duration::ZERO]),
    )
    .await
    .unwrap();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let mut crashes = 0;
    while q.get("t", "poison").await.unwrap().map(|j| j.state) != Some(State::Dead) {
        assert!(
            crashes < 6,
            "the poison job should be dead after 3 attempts, crashed {crashes} workers"
        );
        let mut child = spawn_child("crash", &server.url());
        let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap();
        assert!(!status.success(), "the child crashed on the job");
        crashes += 1;
        // Wait for the lease to expire and the scheduler to reclaim it.
        eventually(Duration::from_secs(5), "lease reclaimed", || async {
            q.stats("t").await.unwrap().running == 0
        })
        .await;
    }
    stop.cancel();
    sched.await.unwrap();
    assert_eq!(
        crashes, 3,
        "attempts count at claim: exactly max_attempts deliveries"
    );
    let job = q.get("t", "poison").await.unwrap().unwrap();
    assert_eq!(job.attempts, 3);
    assert!(job.last_error.unwrap().contains("lease expired"));
}

/// A worker claims at most DEFAULT_CLAIM_BATCH (250) jobs per call by
/// default, however many slots it has, and claim_batch sets another size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_claims_at_most_the_default_claim_batch_per_call() {
    let server = RedisServer::start();
    let q = Queue::connect(server.url()).await.unwrap();
    for (topic, batch, claims) in [("default", 0, 3), ("set", 1000, 1)] {
        let jobs: Vec<Job> = (0..600).map(|i| Job::new(i.to_string())).collect();
        q.enqueue_batch(topic, jobs).await.unwrap();
        // One ZADD per claim that leased jobs (to running).
        let before = server.command_calls("zadd");
        let started = Arc::new(AtomicUsize::new(0));
        let release = CancellationToken::new();
        let (s2, r2) = (started.clone(), release.clone());
        let config = WorkerConfig::default()
            .concurrency(1000)
            .claim_batch(batch)
            .lease(Duration::from_secs(60))
            .registry(punctual::registry::Registry::off());
        let worker = Worker::new(q.clone(), config).handle(topic, move |_| {
            let (s, r) = (s2.clone(), r2.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                r.cancelled().await;
                Outcome::Done
            }
        });
        let stop = CancellationToken::new();
        let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
        eventually(Duration::from_secs(10), "600 handlers running", || async {
            started.load(Ordering::SeqCst) == 600
        })
        .await;
        // Handlers hold their slots: no ack and no other claim yet.
        assert_eq!(
            server.command_calls("zadd") - before,
            claims,
            "claim_batch {batch}"
        );
        release.cancel();
        eventually(Duration::from_secs(10), "all acked", || async {
            total_live(&q, topic).await == 0
        })
        .await;
        stop.cancel();
        w.await.unwrap().unwrap();
    }
    assert_eq!(punctual::DEFAULT_CLAIM_BATCH, 250);
}
