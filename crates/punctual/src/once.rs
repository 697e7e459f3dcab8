//! The idempotency helper: [`Queue::once`] runs a side effect of a job
//! unless an earlier delivery of the job already did it, with the same
//! marker key as the PHP, Python and Node clients' `once`.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::raw::Delivery;

/// The marker of step `step` of job `id` of `topic`, as every client
/// spells it: `P:once:T:ID:STEP`.
fn once_key(prefix: &str, topic: &str, id: &str, step: &str) -> String {
    format!("{prefix}:once:{topic}:{id}:{step}")
}

/// A step has no `:`, so `ID:STEP` is unambiguous.
fn check_step(step: &str) -> Result<()> {
    if step.is_empty() || step.contains(':') {
        return Err(Error::invalid(format!(
            "step {step:?}: a step is a non-empty name without ':'"
        )));
    }
    Ok(())
}

impl Queue {
    /// Runs `step_fn`, step `step` of the delivered job, unless that step
    /// already succeeded for this job (same topic and id) within `ttl`.
    /// `Ok(true)`: it ran and succeeded; `Ok(false)`: skipped, done before;
    /// `Err`: it failed (or Redis did), and a retry runs it again.
    ///
    /// The marker is `SET P:once:TOPIC:ID:STEP 1 NX PX ttl`, written after
    /// `step_fn` succeeds, the key the PHP, Python and Node clients use. This
    /// is at least once, not exactly once: if the process dies between the
    /// side effect and the marker, or two deliveries of the job run at the
    /// same time (after a lost lease), the step runs again. Where the other
    /// side supports it, also pass it an idempotency key (`"{id}:{step}"`).
    /// Pick a `ttl` longer than the job's attempts can take.
    ///
    /// ```no_run
    /// # async fn charge_card(_: &[u8]) -> anyhow::Result<()> { Ok(()) }
    /// # async fn send_receipt(_: &[u8]) -> anyhow::Result<()> { Ok(()) }
    /// use std::time::Duration;
    /// use punctual::{Delivery, Queue};
    ///
    /// // A retry after a failed receipt does not charge the card again.
    /// async fn handle(queue: &Queue, job: &Delivery) -> anyhow::Result<()> {
    ///     let day = Duration::from_secs(24 * 3600);
    ///     queue.once(job, "charge", day, || charge_card(&job.payload)).await?;
    ///     queue.once(job, "receipt", day, || send_receipt(&job.payload)).await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn once<E, F, Fut>(
        &self,
        job: &Delivery,
        step: &str,
        ttl: Duration,
        step_fn: F,
    ) -> std::result::Result<bool, E>
    where
        E: From<Error>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
    {
        check_step(step)?;
        let key = once_key(self.prefix(), &job.topic, &job.id, step);
        if self.cmd::<bool>(redis::cmd("EXISTS").arg(&key)).await? {
            return Ok(false);
        }
        step_fn().await?;
        let ttl_ms = ttl.as_millis().clamp(1, i64::MAX as u128) as i64;
        self.cmd::<Option<String>>(
            redis::cmd("SET")
                .arg(&key)
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms),
        )
        .await?;
        Ok(true)
    }
}
