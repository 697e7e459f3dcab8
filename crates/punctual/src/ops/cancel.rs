//! `cancel` (lua/cancel.lua): removes a job in any state. Its argument,
//! its reply, and its resend rule: never resent blindly (a second run
//! would report "no such job" for the job the first one cancelled).

use redis::Value;

use crate::error::{Error, Result};
use crate::job::State;
use crate::keys::{validate_id, validate_topic};
use crate::queue::Queue;
use crate::scripts::SCRIPTS;

/// Whether a cancel call may be sent twice: never (see `conn.rs`).
pub(super) fn must_not_repeat(_argv: &[&[u8]]) -> bool {
    true
}

impl Queue {
    /// Cancels a job in any state. Returns the state it was in, or `None`
    /// when no such job was live (a job already done stays done).
    ///
    /// A running job (`Some(State::Running)`) is cancelled in flight: its
    /// lease is revoked in the same script call, so its worker's ack or
    /// retry is refused and no scheduler reclaims it, and the worker
    /// holding it, on any host, is told on the topic's cancel channel and
    /// stops its handler ([`crate::Delivery::cancelled`]; docs/PROTOCOL.md
    /// "cancel").
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// // The order was paid: its "close unpaid order" job is not needed.
    /// match queue.cancel("orders", "close:10086").await? {
    ///     Some(state) => println!("cancelled (was {state})"),
    ///     None => println!("nothing to cancel"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<Option<State>> {
        validate_topic(topic)?;
        validate_id(id)?;
        let physical = self.route(topic, id).await?;
        let v = self
            .run(&SCRIPTS.cancel, &physical, |inv| {
                inv.arg(id);
            })
            .await?;
        match v {
            Value::Nil => Ok(None),
            v => {
                let s: String = redis::from_redis_value(v)
                    .map_err(|e| Error::protocol("cancel", e.to_string()))?;
                Ok(s.parse().ok())
            }
        }
    }
}
