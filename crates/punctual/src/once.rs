//! The idempotency helper: [`Queue::once`] marks a step of a job as taken
//! (`SET NX` with a TTL), so a handler that runs again for the same job
//! (at least once means sometimes twice) can skip a side effect it already
//! made.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::queue::{Delivery, Queue};

/// The mark of step `step` of job `id` of `topic`: in the topic's hash slot,
/// next to its other keys. A step has no `:`, so `id:step` is unambiguous.
fn once_key(prefix: &str, topic: &str, id: &str, step: &str) -> String {
    format!("{prefix}:{{{topic}}}:once:{id}:{step}")
}

fn check_step(step: &str) -> Result<()> {
    if step.is_empty() || step.contains(':') {
        return Err(Error::invalid(format!(
            "step {step:?}: a step is a non-empty name without ':'"
        )));
    }
    Ok(())
}

impl Queue {
    /// Takes step `step` of the delivered job for this delivery, for `ttl`:
    /// `true` if this delivery holds it (it took it now, or earlier), so the
    /// handler should do the step; `false` if another delivery of the same
    /// job (same topic and id) took it within `ttl`, so the step was done
    /// (or is being done) already.
    ///
    /// The mark is `SET NX` of `PREFIX:{TOPIC}:once:ID:STEP` with the
    /// delivery's lease token as its value and `ttl` as its expiry; it is set
    /// before the side effect, so a step is done at most once within `ttl`.
    /// If the side effect fails, call [`Queue::clear_once`] so that the
    /// retry does it again. Pick a `ttl` longer than the job can take over
    /// all its attempts.
    ///
    /// ```no_run
    /// # use punctual::{Delivery, Outcome, Queue};
    /// # async fn charge_card(_: &[u8]) -> Result<(), String> { Ok(()) }
    /// use std::time::Duration;
    ///
    /// async fn handle(queue: Queue, job: Delivery) -> Outcome {
    ///     let day = Duration::from_secs(24 * 3600);
    ///     match queue.once(&job, "charge", day).await {
    ///         Ok(true) => {} // this delivery charges
    ///         Ok(false) => return Outcome::Done, // charged by an earlier one
    ///         Err(e) => return Outcome::retry(e.to_string()),
    ///     }
    ///     if let Err(e) = charge_card(&job.payload).await {
    ///         // Let the retry charge.
    ///         let _ = queue.clear_once(&job, "charge").await;
    ///         return Outcome::retry(e);
    ///     }
    ///     Outcome::Done
    /// }
    /// ```
    pub async fn once(&self, job: &Delivery, step: &str, ttl: Duration) -> Result<bool> {
        check_step(step)?;
        let key = once_key(self.prefix(), &job.topic, &job.id, step);
        let ttl_ms = ttl.as_millis().clamp(1, i64::MAX as u128) as i64;
        // SET NX and GET in one MULTI: if a lost reply makes the connection
        // send it again, the GET still finds this delivery's token.
        let (_, holder): (Option<String>, Option<String>) = self
            .pipe(
                redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(&key)
                    .arg(job.token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms)
                    .cmd("GET")
                    .arg(&key),
            )
            .await?;
        Ok(holder.as_deref() == Some(job.token.to_string().as_str()))
    }

    /// Removes the mark of step `step` of the delivered job (see
    /// [`Queue::once`]): the next delivery takes the step again.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue, job: punctual::Delivery) -> punctual::Result<()> {
    /// queue.clear_once(&job, "charge").await?;
    /// # Ok(()) }
    /// ```
    pub async fn clear_once(&self, job: &Delivery, step: &str) -> Result<()> {
        check_step(step)?;
        let key = once_key(self.prefix(), &job.topic, &job.id, step);
        self.cmd::<i64>(redis::cmd("DEL").arg(&key)).await?;
        Ok(())
    }
}
