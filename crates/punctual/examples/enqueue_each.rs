//! Enqueues N jobs one `Queue::enqueue` call each (payloads `payload-<n>`,
//! no options), as a web app enqueues one job per request: the Rust side
//! of `clients/php/bench/single-enqueue.sh`, which compares Redis's cost
//! per call (`INFO commandstats`, evalsha) with the PHP client's.
//!
//! ```text
//! PUNCTUAL_REDIS_URL=redis://127.0.0.1:6379 cargo run -p punctual --example enqueue_each -- TOPIC N
//! ```

use punctual::{Job, Queue};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("PUNCTUAL_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let mut args = std::env::args().skip(1);
    let topic = args.next().unwrap_or_else(|| "enqueue-each".to_string());
    let n: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000);
    let queue = Queue::connect(url).await?;
    for i in 0..n {
        queue
            .enqueue(&topic, Job::new(format!("payload-{i:08}")))
            .await?;
    }
    Ok(())
}
