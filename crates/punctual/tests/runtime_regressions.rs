//! Regressions of the worker and scheduler runtime found by the review of
//! issue 9, each against a real redis-server: the concurrency limit, settle
//! calls that must not wait behind each other, and leases that must be
//! reclaimed on time with the default safety nets.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::util::part;
use punctual::raw::{self, FailKind};
use punctual::{
    DeadSelector, Job, Outcome, Queue, Scheduler, SchedulerConfig, State, Worker, WorkerConfig,
};
use punctual_testkit::RedisServer;
use tokio_util::sync::CancellationToken;

use crate::util::{key, LONG_LEASE as LONG};
use punctual_testkit::eventually;

/// Counts the handlers running at once and remembers the most seen.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
    done: AtomicUsize,
}

impl Gauge {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

// ---- 1. the concurrency limit ----------------------------------------------

/// Runs `jobs` jobs with a worker of `concurrency` slots and the given claim
/// batch; returns the most handlers seen running at once.
async fn most_at_once(q: &Queue, topic: &str, concurrency: usize, batch: usize) -> usize {
    let jobs = 12 * concurrency + 6;
    q.enqueue_batch(topic, (0..jobs).map(|i| Job::new(format!("{i}"))).collect())
        .await
        .unwrap();
    let gauge = Arc::new(Gauge::default());
    let g = gauge.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(concurrency)
            .claim_batch(batch),
    )
    .handle(topic, move |_| {
        let g = g.clone();
        async move {
            g.enter();
            // Hold the slot until the limit was reached once (so that the
            // test sees it is reachable), then a little longer, so that runs
            // overlap with the next claims.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while g.max.load(Ordering::SeqCst) < concurrency
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
            g.leave();
            Outcome::Done
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(60), "every job to run", async || {
        gauge.done.load(Ordering::SeqCst) == jobs
    })
    .await;
    stop.cancel();
    let stopped = w.await.unwrap().unwrap();
    assert_eq!(stopped.abandoned, 0);
    gauge.max.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_never_run_more_than_concurrency_at_once_for_any_claim_batch() {
    let server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    let mut seen = Vec::new();
    for concurrency in [1, 2, 3, 5] {
        for batch in [0, 1, 2, 3, 4, 5, 8] {
            let topic = format!("c{concurrency}b{batch}");
            let max = most_at_once(&q, &topic, concurrency, batch).await;
            seen.push((concurrency, batch, max));
        }
    }
    let over: Vec<_> = seen.iter().filter(|(c, _, m)| m > c).collect();
    assert!(
        over.is_empty(),
        "(concurrency, claim_batch, most at once) over the limit: {over:?}"
    );
    let under: Vec<_> = seen.iter().filter(|(c, _, m)| m < c).collect();
    assert!(
        under.is_empty(),
        "(concurrency, claim_batch, most at once) never reached the limit: {under:?}"
    );
}

// ---- 3. leases are reclaimed one lease after they were last extended -------

const CHILD_ENV: &str = "PUNCTUAL_RUNTIME_CHILD";

/// Not a test on its own: when `PUNCTUAL_RUNTIME_CHILD` is set, this process
/// is a worker for topic `t` with the default safety nets and the lease in
/// `PUNCTUAL_TEST_LEASE_MS`. Mode "hang": handlers never finish (the test
/// SIGKILLs the process). Mode "crash": the process aborts on its first job.
#[test]
fn child_worker() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let url = std::env::var("PUNCTUAL_TEST_REDIS").expect("redis url");
    let lease: u64 = std::env::var("PUNCTUAL_TEST_LEASE_MS")
        .expect("lease")
        .parse()
        .expect("lease in ms");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let q = Queue::connect(url).await.unwrap();
        let worker = Worker::new(
            q,
            WorkerConfig::default().lease(Duration::from_millis(lease)),
        )
        .handle("t", move |_| {
            let crash = mode == "crash";
            async move {
                if crash {
                    std::process::abort();
                }
                futures::future::pending::<Outcome>().await
            }
        });
        worker.run(futures::future::pending()).await.unwrap();
    });
}

/// A child worker, SIGKILLed when dropped (also when a test fails).
struct ChildWorker(Child);

impl Drop for ChildWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(mode: &str, url: &str, lease: Duration) -> ChildWorker {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "runtime_regressions::child_worker",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .env("PUNCTUAL_TEST_REDIS", url)
        .env("PUNCTUAL_TEST_LEASE_MS", lease.as_millis().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child worker");
    ChildWorker(child)
}

/// A scheduler with the DEFAULT settings (`max_sleep` 30 s), for topic `t`.
fn default_scheduler(q: &Queue, stop: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let s = Scheduler::new(q.clone(), SchedulerConfig::default()).topic("t");
    let stop = stop.clone();
    tokio::spawn(async move { s.run(stop.cancelled_owned()).await.expect("scheduler") })
}

/// Enqueues `job` due in 300 ms and waits until the scheduler promoted it:
/// that tick saw nothing else due and nothing running, so from then on an
/// idle scheduler plans to sleep its whole `max_sleep`.
async fn promoted_by_an_idle_scheduler(q: &Queue, job: Job) {
    let id = q
        .enqueue("t", job.delay(Duration::from_millis(300)))
        .await
        .unwrap()
        .id;
    eventually(
        Duration::from_secs(10),
        "the job to be promoted",
        async || q.get("t", &id).await.unwrap().map(|j| j.state) == Some(State::Ready),
    )
    .await;
}

async fn state(q: &Queue, id: &str) -> Option<State> {
    q.get("t", id).await.unwrap().map(|j| j.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_after_the_schedulers_last_tick_is_reclaimed_one_lease_after_its_worker_died()
{
    let server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    let stop = CancellationToken::new();
    let sched = default_scheduler(&q, &stop);
    let lease = Duration::from_secs(1);
    promoted_by_an_idle_scheduler(&q, Job::new("x").id("j").backoff(vec![Duration::ZERO])).await;

    let mut child = spawn_child("hang", &server.url(), lease);
    eventually(
        Duration::from_secs(20),
        "the child to hold the job",
        async || state(&q, "j").await == Some(State::Running),
    )
    .await;
    child.0.kill().unwrap(); // SIGKILL, mid-job
    child.0.wait().unwrap();
    let killed = std::time::Instant::now();

    // docs/operations/jobs.md: a killed worker's job is reclaimed at most `lease`
    // later. The margin is generous for a busy machine, and far below the
    // scheduler's 30 s safety net.
    eventually(
        lease + Duration::from_secs(7),
        "the dead worker's job to be reclaimed",
        async || state(&q, "j").await == Some(State::Ready),
    )
    .await;
    eprintln!("reclaimed {:?} after the SIGKILL", killed.elapsed());
    let job = q.get("t", "j").await.unwrap().unwrap();
    assert_eq!(job.attempts, 1);
    assert!(
        job.last_error
            .as_deref()
            .unwrap_or("")
            .contains("lease expired"),
        "{job:?}"
    );
    stop.cancel();
    sched.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_kills_every_worker_reaches_dead_within_a_few_leases() {
    let server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    let stop = CancellationToken::new();
    let sched = default_scheduler(&q, &stop);
    let lease = Duration::from_secs(1);
    promoted_by_an_idle_scheduler(
        &q,
        Job::new("poison")
            .id("poison")
            .max_attempts(3)
            .backoff(vec![Duration::ZERO]),
    )
    .await;

    // One worker at a time, each crashed by the job; a new one as soon as
    // the last died, as a supervisor would restart it.
    let started = std::time::Instant::now();
    let deadline = started + 3 * lease + Duration::from_secs(12);
    let mut crashes = 0;
    let in_time = |crashes: usize| {
        assert!(
            std::time::Instant::now() < deadline,
            "the poison job is not dead {:?} after its first delivery ({crashes} workers crashed); \
             with a lease of {lease:?} its 3 attempts take about 3 s",
            started.elapsed()
        );
    };
    while state(&q, "poison").await != Some(State::Dead) {
        let mut child = spawn_child("crash", &server.url(), lease);
        loop {
            in_time(crashes);
            if let Some(status) = child.0.try_wait().unwrap() {
                assert!(!status.success(), "the child crashed on the job");
                crashes += 1;
                break;
            }
            if state(&q, "poison").await == Some(State::Dead) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    eprintln!("dead {:?} after the first delivery", started.elapsed());
    assert_eq!(crashes, 3, "attempts count at claim: exactly 3 deliveries");
    let job = q.get("t", "poison").await.unwrap().unwrap();
    assert_eq!(job.attempts, 3);
    assert!(job.last_error.unwrap().contains("lease expired"));
    stop.cancel();
    sched.await.unwrap();
}

// ---- 2. no outcome waits behind a fail that Redis refuses -----------------

/// Handlers that wait until the test releases them, then return the outcome
/// it gave; `running` counts the handlers started.
#[derive(Default)]
struct Gate {
    running: AtomicUsize,
    release: std::sync::Mutex<std::collections::HashMap<String, Outcome>>,
}

impl Gate {
    fn open(&self, id: &str, outcome: Outcome) {
        self.release.lock().unwrap().insert(id.to_string(), outcome);
    }

    async fn pass(&self, id: &str) -> Outcome {
        self.running.fetch_add(1, Ordering::SeqCst);
        loop {
            if let Some(o) = self.release.lock().unwrap().remove(id) {
                return o;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// `INFO errorstats`: how many error replies of this kind (e.g. "OOM").
fn error_count(server: &RedisServer, kind: &str) -> u64 {
    let info = server.cli(&["INFO", "errorstats"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("errorstat_{kind}:count=")))
        .map(|v| v.split(',').next().unwrap().trim().parse().unwrap())
        .unwrap_or(0)
}

fn gated_worker(q: &Queue, topics: &[&str], gate: &Arc<Gate>, config: WorkerConfig) -> Worker {
    let mut w = Worker::new(q.clone(), config);
    for t in topics {
        let gate = gate.clone();
        w = w.handle(*t, move |d| {
            let gate = gate.clone();
            async move { gate.pass(&d.id).await }
        });
    }
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_records_a_workers_failures_and_acks_and_its_shutdown_drains() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let q = crate::util::queue(&server).await;
    for id in ["a", "b"] {
        q.enqueue("t", Job::new(id).id(id).backoff(vec![Duration::ZERO]))
            .await
            .unwrap();
    }
    let gate = Arc::new(Gate::default());
    let stop = CancellationToken::new();
    let worker = gated_worker(&q, &["t"], &gate, WorkerConfig::default().concurrency(2));
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "both jobs to run", async || {
        gate.running.load(Ordering::SeqCst) == 2
    })
    .await;

    // Redis is full: every script that may add data is refused whole.
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let oom_before = error_count(&server, "OOM");
    // Job a fails first ...
    gate.open("a", Outcome::retry_after("boom", Duration::from_secs(60)));
    eventually(
        Duration::from_secs(10),
        "a's failure to be recorded or refused",
        async || {
            error_count(&server, "OOM") > oom_before
                || q.get("t", "a").await.unwrap().map(|j| j.state) != Some(State::Running)
        },
    )
    .await;
    // ... then b is done: its ack must not wait behind a's failure.
    gate.open("b", Outcome::Done);
    eventually(
        Duration::from_secs(10),
        "b's ack while Redis is full",
        async || q.get("t", "b").await.unwrap().is_none(),
    )
    .await;
    // A failure is recorded too (fail is allow-oom: its writes are bounded).
    eventually(
        Duration::from_secs(10),
        "a's failure while Redis is full",
        async || q.get("t", "a").await.unwrap().map(|j| j.state) == Some(State::Pool),
    )
    .await;
    let a = q.get("t", "a").await.unwrap().unwrap();
    assert_eq!(a.last_error.as_deref(), Some("boom"));
    // And a shutdown drains at once instead of waiting out its timeout.
    stop.cancel();
    let stopped = w.await.unwrap().unwrap();
    assert_eq!(stopped.abandoned, 0, "nothing was left behind");
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    assert!(q.check("t").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_go_out_while_redis_keeps_refusing_a_fail_and_the_job_is_not_lost() {
    let server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    q.enqueue("a", Job::new("a").id("a")).await.unwrap();
    q.enqueue("b", Job::new("b").id("b")).await.unwrap();
    let gate = Arc::new(Gate::default());
    let stop = CancellationToken::new();
    let lease = Duration::from_secs(1);
    let worker = gated_worker(
        &q,
        &["a", "b"],
        &gate,
        WorkerConfig::default()
            .concurrency(2)
            .lease(lease)
            .shutdown_timeout(Duration::from_secs(2)),
    );
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "both jobs to run", async || {
        gate.running.load(Ordering::SeqCst) == 2
    })
    .await;

    // Redis refuses every fail of topic a: its dead set is not a sorted set
    // (a stand-in for any refusal that lasts: a shard down, an ACL, a bug).
    server
        .cli(&["SET", &key("a", "dead"), "not a zset"])
        .unwrap();
    let refused_before = error_count(&server, "WRONGTYPE");
    gate.open("a", Outcome::permanent("bad input"));
    eventually(
        Duration::from_secs(10),
        "a's fail to be refused",
        async || error_count(&server, "WRONGTYPE") > refused_before,
    )
    .await;
    gate.open("b", Outcome::Done);
    eventually(
        Duration::from_secs(10),
        "b's ack while a's fail is refused",
        async || q.get("b", "b").await.unwrap().is_none(),
    )
    .await;
    assert_eq!(
        q.get("a", "a").await.unwrap().map(|j| j.state),
        Some(State::Running),
        "a's fail was refused, the job is still leased"
    );

    // Not held for the life of the worker: it gives up on a call Redis
    // keeps refusing (not a passing outage) and stops extending the lease,
    // so a scheduler reclaims the job like one whose worker died, while the
    // worker still runs (it may then claim it again: the gate holds that
    // run). Default safety nets.
    let sched_stop = CancellationToken::new();
    let s = Scheduler::new(q.clone(), SchedulerConfig::default()).topic("a");
    let sched = tokio::spawn({
        let stop = sched_stop.clone();
        async move { s.run(stop.cancelled_owned()).await.unwrap() }
    });
    eventually(
        lease + Duration::from_secs(15),
        "a to be reclaimed while the worker runs",
        async || {
            let a = q.get("a", "a").await.unwrap().unwrap();
            a.attempts >= 2 || a.state != State::Running
        },
    )
    .await;
    let a = q.get("a", "a").await.unwrap().unwrap();
    assert!(a.last_error.unwrap().contains("lease expired"));
    assert!(!w.is_finished(), "the worker still runs");

    // The shutdown waits for the held run only up to its timeout, then
    // leaves the job to its lease.
    stop.cancel();
    let stopped = w.await.unwrap().unwrap();
    assert!(stopped.abandoned <= 1, "{stopped:?}");

    // Once Redis takes writes again, nothing is stuck.
    server.cli(&["DEL", &key("a", "dead")]).unwrap();
    eventually(
        lease + Duration::from_secs(15),
        "a to leave running",
        async || q.get("a", "a").await.unwrap().map(|j| j.state) != Some(State::Running),
    )
    .await;
    sched_stop.cancel();
    sched.await.unwrap();
    assert!(q.check("a").await.unwrap().is_empty());
    assert!(q.check("b").await.unwrap().is_empty());
}

// ---- 4. no automatic resend of a call that must not run twice -------------

/// A TCP proxy in front of one Redis. When armed, it passes the next
/// `EVALSHA` (of one script, when told) to Redis, waits for the reply,
/// swallows it and drops the client's connection: the call ran, and its
/// caller cannot know.
struct CuttingProxy {
    port: u16,
    armed: Arc<std::sync::atomic::AtomicBool>,
    needle: Arc<std::sync::Mutex<Vec<u8>>>,
    cuts: Arc<AtomicUsize>,
}

impl CuttingProxy {
    async fn start(upstream: impl Fn() -> u16 + Send + 'static) -> CuttingProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let needle = Arc::new(std::sync::Mutex::new(b"EVALSHA".to_vec()));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, c, nd) = (armed.clone(), cuts.clone(), needle.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let (armed, cuts, upstream) = (a.clone(), c.clone(), upstream());
                let needle = nd.clone();
                tokio::spawn(async move {
                    let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let (mut up, mut down) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
                    loop {
                        tokio::select! {
                            n = client.read(&mut up) => {
                                let Ok(n @ 1..) = n else { return };
                                let wanted = needle.lock().unwrap().clone();
                                let cut = up[..n].windows(7).any(|w| w == b"EVALSHA")
                                    && up[..n].windows(wanted.len()).any(|w| w == wanted)
                                    && armed.swap(false, Ordering::SeqCst);
                                if server.write_all(&up[..n]).await.is_err() {
                                    return;
                                }
                                if cut {
                                    // It ran once its reply starts; drop both sides.
                                    let _ = server.read(&mut down).await;
                                    cuts.fetch_add(1, Ordering::SeqCst);
                                    return;
                                }
                            }
                            n = server.read(&mut down) => {
                                let Ok(n @ 1..) = n else { return };
                                if client.write_all(&down[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        CuttingProxy {
            port,
            armed,
            needle,
            cuts,
        }
    }

    /// Cuts the next script call; returns the number of cuts so far.
    fn arm(&self) -> usize {
        self.arm_for(b"EVALSHA")
    }

    /// Cuts the next call of the script `name`; returns the cuts so far.
    fn arm_script(&self, name: &str) -> usize {
        let source = punctual::internal::script_source(name).expect("a script");
        self.arm_for(redis::Script::new(&source).get_hash().as_bytes())
    }

    fn arm_for(&self, needle: &[u8]) -> usize {
        *self.needle.lock().unwrap() = needle.to_vec();
        self.armed.store(true, Ordering::SeqCst);
        self.cuts.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_claim_or_an_enqueue_without_id_is_never_resent_after_it_may_have_run() {
    // A one-node Redis Cluster that tells clients to use the proxy's port.
    let redis_port = Arc::new(AtomicUsize::new(0));
    let rp = redis_port.clone();
    let proxy = CuttingProxy::start(move || rp.load(Ordering::SeqCst) as u16).await;
    let bus = punctual_testkit::free_port().to_string();
    let announce = proxy.port.to_string();
    let server = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        &bus,
        "--cluster-announce-ip",
        "127.0.0.1",
        "--cluster-announce-port",
        &announce,
    ]);
    redis_port.store(server.port() as usize, Ordering::SeqCst);
    server
        .cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the cluster to be ok",
        async || {
            server
                .cli(&["CLUSTER", "INFO"])
                .unwrap()
                .contains("cluster_state:ok")
        },
    )
    .await;
    let q = Queue::connect(format!("redis://127.0.0.1:{}", proxy.port))
        .await
        .unwrap();
    assert!(q.is_cluster());
    // Two ready jobs; every script loaded by a call that is not cut.
    for id in ["j1", "j2"] {
        q.enqueue("t", Job::new(id).id(id)).await.unwrap();
    }
    assert!(raw::claim(&q, &part("other"), 1, LONG)
        .await
        .unwrap()
        .is_empty());
    q.stats("g").await.unwrap();

    // A claim whose reply is lost is reported, not sent again: a second run
    // would lease another job to nobody.
    let cuts = proxy.arm();
    let r = raw::claim(&q, &part("t"), 1, LONG).await;
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), cuts + 1);
    let s = q.stats("t").await.unwrap();
    assert_eq!(
        (s.ready, s.running, s.counters.get("claimed").copied()),
        (1, 1, Some(1)),
        "the claim ran exactly once (the caller got {r:?})"
    );
    let e = r.expect_err("the claim's reply was lost");
    assert!(e.is_retryable(), "{e}");

    // The same for an enqueue of a job without an id: a second run would be
    // a second job.
    let cuts = proxy.arm();
    let r = q.enqueue("g", Job::new("no id")).await;
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), cuts + 1);
    let s = q.stats("g").await.unwrap();
    assert_eq!(s.ready, 1, "one job, not two (the caller got {r:?})");
    assert!(r.is_err());

    // An enqueue whose jobs all carry ids may run twice: it is resent.
    let cuts = proxy.arm();
    q.enqueue("t", Job::new("j3").id("j3")).await.unwrap();
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), cuts + 1);
    assert_eq!(q.stats("t").await.unwrap().ready, 2);
    assert!(q.check("t").await.unwrap().is_empty());

    // Purging or replaying the oldest dead jobs acts on the ids it read, so
    // a resend after a lost reply cannot take the next ones too.
    let ids: Vec<String> = (1..=5).map(|i| format!("d{i}")).collect();
    for id in &ids {
        q.enqueue("d", Job::new("x").id(id)).await.unwrap();
    }
    for d in raw::claim(&q, &part("d"), 5, LONG).await.unwrap() {
        raw::fail(&q, &part("d"), &d.lease(), "bad", FailKind::Permanent)
            .await
            .unwrap();
    }
    assert_eq!(q.stats("d").await.unwrap().dead, 5);
    // Loaded first: a cut NOSCRIPT reply would prove nothing.
    let none = || DeadSelector::Ids(vec!["none".into()]);
    assert_eq!(q.dead_purge("d", none()).await.unwrap(), 0);
    assert!(q.dead_replay("d", none()).await.unwrap().is_empty());
    assert_eq!(q.cancel("d", "none").await.unwrap(), None);
    let cuts = proxy.arm_script("dead_purge");
    let r = q.dead_purge("d", DeadSelector::Oldest(1)).await;
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), cuts + 1);
    assert_eq!(
        q.stats("d").await.unwrap().dead,
        4,
        "one job purged, not two (the caller got {r:?})"
    );
    let cuts = proxy.arm_script("dead_replay");
    let r = q.dead_replay("d", DeadSelector::Oldest(1)).await;
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), cuts + 1);
    let s = q.stats("d").await.unwrap();
    assert_eq!(
        (s.dead, s.ready),
        (3, 1),
        "one job replayed, not two (the caller got {r:?})"
    );
    assert!(q.check("d").await.unwrap().is_empty());

    // A cancel that ran is not reported as "no such job" by a second run.
    let cuts = proxy.arm_script("cancel");
    let r = q.cancel("d", "d5").await;
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), cuts + 1);
    assert!(q.get("d", "d5").await.unwrap().is_none(), "it ran");
    assert!(
        !matches!(r, Ok(None)),
        "a cancel that ran is reported as one that found nothing"
    );
    assert!(r.expect_err("its reply was lost").is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_publishes_on_the_pool_channel_exactly_when_its_lease_ends_first() {
    use futures::StreamExt;
    let server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    for i in 0..4 {
        q.enqueue("t", Job::new("x").id(format!("j{i}")))
            .await
            .unwrap();
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    let channel = key("t", "pool");
    pubsub.subscribe(&channel).await.unwrap();
    let mut messages = pubsub.into_on_message();
    let c = crate::util::conn(&server).await;
    // The messages on the pool channel since the last call: up to a marker
    // published now (messages arrive in the order Redis ran the PUBLISHes).
    let mut wake_ups = async || -> Vec<String> {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("marker")
            .query_async(&mut c.clone())
            .await
            .unwrap();
        let mut got = Vec::new();
        loop {
            let m = tokio::time::timeout(Duration::from_secs(5), messages.next())
                .await
                .expect("the marker")
                .unwrap();
            match m.get_payload::<String>().unwrap() {
                p if p == "marker" => return got,
                p => got.push(p),
            }
        }
    };

    // Nothing running: the new lease ends first.
    raw::claim(&q, &part("t"), 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        wake_ups().await.len(),
        1,
        "the first lease wakes the schedulers"
    );
    // A lease that ends after the one running: the schedulers wake in time.
    raw::claim(&q, &part("t"), 1, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(wake_ups().await, Vec::<String>::new(), "a later lease");
    // A lease that ends before every other one.
    raw::claim(&q, &part("t"), 1, Duration::from_secs(10))
        .await
        .unwrap();
    let m = wake_ups().await;
    assert_eq!(m.len(), 1, "the earlier lease wakes the schedulers");
    let deadline: i64 = m[0].parse().expect("the lease deadline in ms");
    let leased: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(key("t", "running"))
        .arg(0)
        .arg(0)
        .arg("WITHSCORES")
        .query_async(&mut c.clone())
        .await
        .unwrap();
    assert_eq!(
        leased[0].1 as i64, deadline,
        "the message is the new deadline"
    );
}

// ---- issue 29 item 10: a stalled worker does not start what it lost --------

/// A TCP proxy in front of one Redis. When armed, it passes the next call
/// of one script to Redis and holds its reply for `hold` before passing it
/// on: the call ran, and its caller reads the reply late, as a worker
/// stopped (SIGSTOP, a pause) between its claim and the reading of the
/// reply would.
struct StallingProxy {
    port: u16,
    armed: Arc<std::sync::atomic::AtomicBool>,
    /// Instead of holding the reply: drop it and the client's connection
    /// (the call ran; its caller sees the connection die).
    cut: Arc<std::sync::atomic::AtomicBool>,
    needle: Arc<std::sync::Mutex<Vec<u8>>>,
    held: Arc<AtomicUsize>,
}

impl StallingProxy {
    async fn start(upstream: u16, hold: Duration) -> StallingProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let needle = Arc::new(std::sync::Mutex::new(Vec::new()));
        let held = Arc::new(AtomicUsize::new(0));
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, h, nd, c) = (armed.clone(), held.clone(), needle.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let (armed, held, needle, cut) = (a.clone(), h.clone(), nd.clone(), c.clone());
                tokio::spawn(async move {
                    let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let (mut up, mut down) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
                    loop {
                        tokio::select! {
                            n = client.read(&mut up) => {
                                let Ok(n @ 1..) = n else { return };
                                let wanted = needle.lock().unwrap().clone();
                                let stall = !wanted.is_empty()
                                    && up[..n].windows(wanted.len()).any(|w| w == wanted)
                                    && armed.swap(false, Ordering::SeqCst);
                                if server.write_all(&up[..n]).await.is_err() {
                                    return;
                                }
                                if stall {
                                    // It ran once its reply starts; pass it on late.
                                    let Ok(n @ 1..) = server.read(&mut down).await else { return };
                                    if cut.load(Ordering::SeqCst) {
                                        held.fetch_add(1, Ordering::SeqCst);
                                        return;
                                    }
                                    tokio::time::sleep(hold).await;
                                    if client.write_all(&down[..n]).await.is_err() {
                                        return;
                                    }
                                    held.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            n = server.read(&mut down) => {
                                let Ok(n @ 1..) = n else { return };
                                if client.write_all(&down[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        StallingProxy {
            port,
            armed,
            cut,
            needle,
            held,
        }
    }

    /// Holds the reply of the next call of the script `name`.
    fn arm_script(&self, name: &str) {
        let source = punctual::internal::script_source(name).expect("a script");
        *self.needle.lock().unwrap() = redis::Script::new(&source).get_hash().as_bytes().to_vec();
        self.armed.store(true, Ordering::SeqCst);
    }
}

/// Issue 29 item 11: an ack that Redis recorded but whose reply was lost
/// (the connection died) is resent and refused; the worker says the
/// outcome is unknown, not that the lease was lost and the job re-delivered
/// (neither happened: it ran once).
#[test]
fn an_ack_whose_reply_was_lost_is_reported_as_unknown_not_as_a_lost_lease() {
    let logs = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || LogSink(sink.clone()))
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    // One thread: every task of the worker logs to this thread's subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let redis = RedisServer::start();
        let q = Queue::connect(redis.url()).await.unwrap();
        let t = "unknown";
        q.enqueue(t, Job::new("x").id("x")).await.unwrap();
        redis
            .cli(&[
                "SCRIPT",
                "LOAD",
                &punctual::internal::script_source("ack").unwrap(),
            ])
            .unwrap();
        let proxy = StallingProxy::start(redis.port(), Duration::ZERO).await;
        proxy.cut.store(true, Ordering::SeqCst);
        proxy.arm_script("ack");
        let qa = Queue::connect(format!("redis://127.0.0.1:{}", proxy.port))
            .await
            .unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let worker = Worker::new(
            qa,
            WorkerConfig::default().registry(punctual::registry::Registry::off()),
        )
        .handle(t, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
            async { Outcome::Done }
        });
        let stop = CancellationToken::new();
        let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
        eventually(Duration::from_secs(10), "x done", async || {
            q.get(t, "x").await.unwrap().is_none()
        })
        .await;
        eventually(
            Duration::from_secs(10),
            "the resent ack refused",
            async || String::from_utf8_lossy(&logs.lock().unwrap()).contains("ack refused"),
        )
        .await;
        stop.cancel();
        w.await.unwrap().unwrap();
        assert_eq!(
            proxy.held.load(Ordering::SeqCst),
            1,
            "the ack's reply was cut"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1, "x ran once");
    });
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    assert!(
        text.contains("ack refused on a resend") && text.contains("outcome is unknown"),
        "{text}"
    );
    assert!(!text.contains("re-delivered or cancelled"), "{text}");
}

/// A `tracing` writer into a shared buffer.
struct LogSink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Issue 29 item 10: a worker that reads its claim's reply after the lease
/// ran out (and the job was reclaimed) must not start that delivery: one
/// older than a third of its lease is extended first, and dropped when the
/// extension is refused. The job runs later, as its next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_read_after_its_lease_ran_out_is_not_started() {
    let redis = RedisServer::start();
    let q = Queue::connect(redis.url()).await.unwrap();
    let t = "stalled";
    q.enqueue(
        t,
        Job::new("x")
            .id("x")
            .backoff(vec![Duration::from_millis(200)]),
    )
    .await
    .unwrap();
    // The claim script is loaded: the held reply is the claim's own.
    redis
        .cli(&[
            "SCRIPT",
            "LOAD",
            &punctual::internal::script_source("claim").unwrap(),
        ])
        .unwrap();
    let proxy = StallingProxy::start(redis.port(), Duration::from_millis(1500)).await;
    proxy.arm_script("claim");
    let qa = Queue::connect(format!("redis://127.0.0.1:{}", proxy.port))
        .await
        .unwrap();
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = starts.clone();
    let worker = Worker::new(
        qa,
        WorkerConfig::default()
            .lease(Duration::from_millis(300))
            .registry(punctual::registry::Registry::off()),
    )
    .handle(t, move |job| {
        s.lock().unwrap().push(job.attempt);
        async { Outcome::Done }
    });
    let stop = CancellationToken::new();
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    // The claim ran: x is leased for 300 ms, and the worker has no reply.
    eventually(Duration::from_secs(5), "x leased", async || {
        q.stats(t).await.unwrap().running == 1
    })
    .await;
    // The lease runs out unread: a scheduler's tick reclaims x.
    eventually(Duration::from_secs(5), "x reclaimed", async || {
        raw::tick(&q, &part(t), &Default::default()).await.unwrap();
        q.stats(t).await.unwrap().running == 0
    })
    .await;
    // Then the late reply: not started; x runs as its second attempt.
    eventually(Duration::from_secs(10), "x done", async || {
        q.get(t, "x").await.unwrap().is_none()
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    assert_eq!(
        *starts.lock().unwrap(),
        [2],
        "only the second delivery started, not the one read after its lease ran out"
    );
    assert_eq!(proxy.held.load(Ordering::SeqCst), 1);
}
