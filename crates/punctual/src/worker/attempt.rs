//! [`AttemptEnd`], what an attempt observer is told.

use std::sync::Arc;

/// Told of every attempt's end ([`Worker::on_attempt`](crate::Worker::on_attempt)).
pub(super) type AttemptObserver = Arc<dyn Fn(AttemptEnd) + Send + Sync>;

/// One attempt of a job, as it ended ([`Worker::on_attempt`](crate::Worker::on_attempt)): what
/// `punctual serve` exports as an OpenTelemetry span.
///
/// ```
/// let end: Option<punctual::AttemptEnd> = None; // given to the observer
/// # let _ = end;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AttemptEnd {
    /// The topic (a partitioned topic's logical name).
    pub topic: String,
    /// The job id.
    pub id: String,
    /// Which delivery this was: 1 on the first.
    pub attempt: u32,
    /// The claim's lease token ([`Delivery::token`](crate::Delivery::token)).
    pub token: i64,
    /// The producer's trace context ([`Delivery::traceparent`](crate::Delivery::traceparent)).
    pub traceparent: Option<String>,
    /// Its tracestate.
    pub tracestate: Option<String>,
    /// When the handler was started (or the expired job turned down).
    pub started: std::time::SystemTime,
    /// When the handler's answer was in.
    pub ended: std::time::SystemTime,
    /// How late the job started, in microseconds ([`Delivery::lateness_us`](crate::Delivery::lateness_us)).
    pub lateness_us: i64,
    /// `done`, `retry`, `dead`, `expired`, `handed back`, `cancelled` (an
    /// operator cancelled the job while it ran: [`Delivery::cancelled`](crate::Delivery::cancelled)),
    /// or `lost` (the lease was lost while the handler ran: the job was
    /// reclaimed, or cancelled and the message missed; the handler's answer
    /// no longer counts).
    pub outcome: &'static str,
    /// The error of a failed attempt.
    pub error: Option<String>,
}
