//! Close unpaid orders: enqueue five "close order" jobs due 1 to 5 seconds
//! from now, run a scheduler and a worker in this process, and exit once all
//! five have run (or on Ctrl-C).
//!
//! Needs Redis 7.0 or later, at `PUNCTUAL_REDIS_URL` or redis://127.0.0.1:6379:
//!
//! ```text
//! cargo run -p punctual --example orders
//! ```
//!
//! It writes under the topic `example-orders` (default prefix `punctual`);
//! afterwards only the topic's counters and sequence remain. To remove them:
//!
//! ```text
//! redis-cli --scan --pattern 'punctual:{example-orders}:*' | xargs redis-cli del
//! redis-cli srem punctual:topics example-orders
//! ```

use std::time::Duration;

use punctual::{
    EnqueueOptions, Job, Outcome, Queue, Scheduler, SchedulerConfig, Worker, WorkerConfig,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "example-orders";
const ORDERS: u64 = 5;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("PUNCTUAL_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let queue = Queue::connect(url).await?;

    // Producer: one job per order, due when the order should be closed. The
    // id makes enqueueing idempotent; `replace` lets a rerun start afresh
    // when an earlier run was interrupted and left jobs behind.
    let mut jobs = Vec::new();
    for n in 1..=ORDERS {
        let job = Job::json(&serde_json::json!({ "order": n }))?
            .id(format!("order:{n}"))
            .delay(Duration::from_secs(n));
        jobs.push(job);
    }
    let replace = EnqueueOptions::default().replace(true);
    for e in queue.enqueue_with(TOPIC, jobs, &replace).await? {
        println!("enqueued {} ({:?})", e.id, e.status);
    }

    let stop = CancellationToken::new();

    // Scheduler: moves each job from pool to ready at its due time.
    let scheduler = Scheduler::new(queue.clone(), SchedulerConfig::default())
        .topic(TOPIC)
        .run(stop.clone().cancelled_owned());
    let scheduler = tokio::spawn(scheduler);

    // Worker: claims ready jobs and runs the handler. A real handler would
    // check that the order is still unpaid before closing it: a job may be
    // delivered more than once (after a crash or an expired lease).
    let (ran_tx, mut ran_rx) = mpsc::unbounded_channel();
    let worker = Worker::new(queue.clone(), WorkerConfig::default().concurrency(4))
        .handle(TOPIC, move |job| {
            let ran = ran_tx.clone();
            async move {
                println!(
                    "closing {} (payload {}, due {} ms after it was enqueued, attempt {}, {:?} late)",
                    job.id,
                    String::from_utf8_lossy(&job.payload),
                    job.due_ms - job.created_ms,
                    job.attempt,
                    job.lateness(),
                );
                let _ = ran.send(job.id);
                Outcome::Done
            }
        })
        .run(stop.clone().cancelled_owned());
    let worker = tokio::spawn(worker);

    let mut ran = 0;
    while ran < ORDERS {
        tokio::select! {
            id = ran_rx.recv() => match id {
                Some(_) => ran += 1,
                None => break,
            },
            _ = tokio::signal::ctrl_c() => {
                println!("interrupted");
                break;
            }
        }
    }

    // Shut down: the worker stops claiming, records the outcomes of the jobs
    // it ran (acks), and returns.
    stop.cancel();
    worker.await??;
    scheduler.await??;

    let stats = queue.stats(TOPIC).await?;
    println!(
        "{ran} of {ORDERS} orders closed; topic {TOPIC}: pool {}, ready {}, running {}, dead {}, counters {:?}",
        stats.pool, stats.ready, stats.running, stats.dead, stats.counters
    );
    Ok(())
}
