//! A Rust program that runs punctual's consumer service with its own
//! handlers: the same supervisor, worker and scheduler processes, signals,
//! restarts, /healthz and /metrics as `punctual serve`, with handlers written
//! in Rust instead of exec or http.
//!
//! ```sh
//! cargo run -p punctual-cli --example rust_service -- serve --config crates/punctual-cli/examples/rust_service.toml
//! punctual push emails '{"to": "a@example.com"}' --delay 2s
//! ```
//!
//! Every other command works too (`... --example rust_service -- stats`).

use std::process::ExitCode;
use std::time::Duration;

use punctual::{cancellable, Outcome};

fn main() -> ExitCode {
    let handlers = punctual_cli::Handlers::new().handle("emails", |job| async move {
        let body = String::from_utf8_lossy(&job.payload).into_owned();
        if !body.contains('@') {
            return Outcome::permanent(format!("no address in {body}"));
        }
        // Pretend to send it.
        tokio::time::sleep(Duration::from_millis(10)).await;
        println!(
            "sent email {} (attempt {}, {:.1} ms after its due time): {body}",
            job.id,
            job.attempt,
            job.lateness_us() as f64 / 1000.0
        );
        Outcome::Done
    })
    // A long job that watches its cancellation token (it fires on timeout,
    // lost lease and shutdown) and stops cleanly instead of being dropped.
    .handler(
        "reports",
        cancellable(|job, cancel| async move {
            let name = String::from_utf8_lossy(&job.payload).into_owned();
            tokio::select! {
                _ = cancel.cancelled() => Outcome::retry(format!("report {name} stopped at shutdown")),
                _ = tokio::time::sleep(Duration::from_secs(600)) => Outcome::Done,
            }
        }),
    );
    punctual_cli::main_with(handlers)
}
