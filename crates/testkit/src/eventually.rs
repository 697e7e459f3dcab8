//! Waiting in an async test until a condition holds.

use std::time::{Duration, Instant};

/// Polls `cond` every 20 ms until it holds; panics with `what` after
/// `timeout`. For async tests (it sleeps with tokio).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let mut tries = 0;
/// punctual_testkit::eventually(Duration::from_secs(5), "the third try", async || {
///     tries += 1;
///     tries == 3
/// })
/// .await;
/// assert_eq!(tries, 3);
/// # }
/// ```
pub async fn eventually(timeout: Duration, what: &str, cond: impl AsyncFnMut() -> bool) {
    eventually_every(Duration::from_millis(20), timeout, what, cond).await
}

/// [`eventually`], polling every `every`: for a condition that costs more
/// to check (one that runs a program, say).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let start = std::time::Instant::now();
/// punctual_testkit::eventually_every(
///     Duration::from_millis(50),
///     Duration::from_secs(5),
///     "100 ms to pass",
///     async || start.elapsed() >= Duration::from_millis(100),
/// )
/// .await;
/// # }
/// ```
pub async fn eventually_every(
    every: Duration,
    timeout: Duration,
    what: &str,
    mut cond: impl AsyncFnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(every).await;
    }
}
