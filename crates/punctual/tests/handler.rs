//! The handler side of the worker: the `Handler` trait and its boxed form,
//! the cancellation token of each delivery (timeout, lease loss, shutdown),
//! typed JSON payloads and the idempotency helper (`Queue::once`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::{
    cancellable, BoxedHandler, CancellationToken, Delivery, Handler, Job, Outcome, State, Worker,
    WorkerConfig,
};
use punctual_testkit::eventually;

use crate::util::{Fixture, LONG_LEASE};
use crate::worker::spawn_scheduler;

/// Notes why each delivery ended: "cancelled" when the token fired.
#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Waits for the token (the job never finishes by itself), notes it, and
/// returns a retry.
fn waits_for_cancel(log: Log) -> impl Handler {
    cancellable(move |job: Delivery, cancel: CancellationToken| {
        let log = log.clone();
        async move {
            log.push(format!("started {}", job.id));
            cancel.cancelled().await;
            log.push(format!("cancelled {}", job.id));
            Outcome::retry("stopped on cancel")
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_handler_sees_its_token_fire_and_stops_cleanly() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    q.enqueue("t", Job::new("x").id("slow").max_attempts(1))
        .await
        .unwrap();
    let log = Log::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let worker = Worker::new(q.clone(), WorkerConfig::default()).handler_with_timeout(
        "t",
        Duration::from_millis(300),
        waits_for_cancel(log.clone()),
    );
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "the job is dead", async || {
        q.stats("t").await.unwrap().dead == 1
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();
    assert_eq!(log.all(), ["started slow", "cancelled slow"]);
    let info = q.get("t", "slow").await.unwrap().unwrap();
    assert!(
        info.last_error.as_deref().unwrap().contains("timed out"),
        "a timeout stays a timeout whatever the handler answers: {:?}",
        info.last_error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_fires_the_token() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    q.enqueue("t", Job::new("x").id("doomed")).await.unwrap();
    let log = Log::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default().lease(Duration::from_millis(300)),
    )
    .handler_with_timeout("t", LONG_LEASE, waits_for_cancel(log.clone()));
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "the handler runs", async || {
        log.all().len() == 1
    })
    .await;
    // Cancelling the running job ends its lease: the keeper's next
    // extension is refused.
    assert_eq!(q.cancel("t", "doomed").await.unwrap(), Some(State::Running));
    eventually(Duration::from_secs(10), "the token fires", async || {
        log.all().len() == 2
    })
    .await;
    stop.cancel();
    let stopped = w.await.unwrap().unwrap();
    sched.await.unwrap();
    assert_eq!(stopped.abandoned, 0);
    assert_eq!(log.all(), ["started doomed", "cancelled doomed"]);
    assert!(q.get("t", "doomed").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_fires_the_token_and_the_handlers_answer_is_recorded() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    q.enqueue("t", Job::new("x").id("long").max_attempts(5))
        .await
        .unwrap();
    let log = Log::default();
    let stop = CancellationToken::new();
    let sched_stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &sched_stop);
    let worker = Worker::new(
        q.clone(),
        // Far longer than the test may take: the drain ends because the
        // handler stops on the token, not at this timeout.
        WorkerConfig::default().shutdown_timeout(Duration::from_secs(600)),
    )
    .handler_with_timeout("t", LONG_LEASE, waits_for_cancel(log.clone()));
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "the handler runs", async || {
        log.all().len() == 1
    })
    .await;
    stop.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(60), w)
        .await
        .expect("the worker stops once its handler did")
        .unwrap()
        .unwrap();
    sched_stop.cancel();
    sched.await.unwrap();
    assert_eq!(stopped.abandoned, 0);
    assert_eq!(log.all(), ["started long", "cancelled long"]);
    let info = q.get("t", "long").await.unwrap().unwrap();
    assert_ne!(info.state, State::Running);
    assert_eq!(info.attempts, 1);
    assert_eq!(info.last_error.as_deref(), Some("stopped on cancel"));
}

/// A handler written as a type, not a closure.
struct Counter(Arc<AtomicUsize>);

impl Handler for Counter {
    fn call(
        &self,
        _job: Delivery,
        _cancel: CancellationToken,
    ) -> impl std::future::Future<Output = Outcome> + Send + 'static {
        let n = self.0.clone();
        async move {
            n.fetch_add(1, Ordering::SeqCst);
            Outcome::Done
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_types_closures_and_boxed_handlers_all_run() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    for t in ["typed", "boxed", "closure"] {
        q.enqueue(t, Job::new("x")).await.unwrap();
    }
    let typed = Arc::new(AtomicUsize::new(0));
    let boxed = Arc::new(AtomicUsize::new(0));
    let closure = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["typed", "boxed", "closure"], &stop);
    let c = closure.clone();
    let worker = Worker::new(q.clone(), WorkerConfig::default())
        .handler("typed", Counter(typed.clone()))
        .handler("boxed", BoxedHandler::new(Counter(boxed.clone())))
        .handle("closure", move |_job| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                Outcome::Done
            }
        });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "every handler ran", async || {
        [&typed, &boxed, &closure]
            .iter()
            .all(|n| n.load(Ordering::SeqCst) == 1)
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Order {
    id: u64,
    total_cents: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handle_json_hands_typed_payloads_and_sends_unreadable_ones_to_dead() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    q.enqueue(
        "orders",
        Job::new(r#"{"id": 7, "total_cents": 1250}"#).id("good"),
    )
    .await
    .unwrap();
    q.enqueue("orders", Job::new("not json").id("bad").max_attempts(5))
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, Order)>>> = Arc::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["orders"], &stop);
    let s = seen.clone();
    let worker = Worker::new(q.clone(), WorkerConfig::default()).handle_json(
        "orders",
        move |order: Order, job: Delivery| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push((job.id.clone(), order));
                Outcome::Done
            }
        },
    );
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "both settled", async || {
        let st = q.stats("orders").await.unwrap();
        st.dead == 1 && st.pool + st.ready + st.running == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [(
            "good".to_string(),
            Order {
                id: 7,
                total_cents: 1250
            }
        )]
    );
    let bad = q.get("orders", "bad").await.unwrap().unwrap();
    assert_eq!(
        (bad.state, bad.attempts),
        (State::Dead, 1),
        "no retry can fix a payload"
    );
    assert!(
        bad.last_error
            .as_deref()
            .unwrap()
            .contains("not the expected JSON"),
        "{:?}",
        bad.last_error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_runs_a_step_until_it_succeeds_then_skips_it_for_the_ttl() {
    let f = Fixture::new().await;
    let q = f.queue.clone();
    q.enqueue("t", Job::new("x").id("j")).await.unwrap();
    // A real delivery, as a handler gets it.
    let got: Arc<Mutex<Option<Delivery>>> = Arc::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let g = got.clone();
    let worker = Worker::new(q.clone(), WorkerConfig::default()).handle("t", move |job| {
        *g.lock().unwrap() = Some(job);
        async { Outcome::Done }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(10), "the delivery", async || {
        got.lock().unwrap().is_some()
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    sched.await.unwrap();
    let job = got.lock().unwrap().take().unwrap();

    let runs = AtomicUsize::new(0);
    let step = |fail: bool| {
        let runs = &runs;
        move || async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if fail {
                Err(anyhow::anyhow!("card declined"))
            } else {
                anyhow::Ok(())
            }
        }
    };
    // A failed step leaves no marker: the retry runs it again.
    assert!(q
        .once(&job, "charge", LONG_LEASE, step(true))
        .await
        .is_err());
    assert!(q
        .once(&job, "charge", LONG_LEASE, step(false))
        .await
        .unwrap());
    // Done: skipped from now on, by any delivery of the job.
    assert!(!q
        .once(&job, "charge", LONG_LEASE, step(false))
        .await
        .unwrap());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // The same marker key as the PHP, Python and Node clients, with the TTL.
    let ttl: i64 = f
        .cmd(redis::cmd("PTTL").arg("punctual:once:t:j:charge"))
        .await;
    assert!(ttl > 0 && ttl <= LONG_LEASE.as_millis() as i64, "{ttl}");
    // Another job, or another step, is not affected.
    let mut other = job.clone();
    other.id = "k".into();
    assert!(q
        .once(&other, "charge", LONG_LEASE, step(false))
        .await
        .unwrap());
    assert!(q
        .once(&job, "email", LONG_LEASE, step(false))
        .await
        .unwrap());
    // The marker expires with its TTL.
    assert!(q
        .once(&job, "short", Duration::from_millis(50), step(false))
        .await
        .unwrap());
    eventually(Duration::from_secs(5), "the marker expires", async || {
        q.once(&job, "short", Duration::from_millis(50), step(false))
            .await
            .unwrap()
    })
    .await;
    assert!(
        q.once(&job, "a:b", LONG_LEASE, step(false)).await.is_err(),
        "a step name with ':' could collide with another job's marker"
    );
}
