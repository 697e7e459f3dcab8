//! What producers send: a [`Job`] built with chained calls, and the
//! options of one enqueue call.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::when::{ceil_ms, When, MAX_DELAY};
use crate::error::{Error, Result};
use crate::keys::validate_id;

/// Most deliveries a job may be given ([`Job::max_attempts`], and a topic's
/// default): a larger number is refused as a mistake.
///
/// ```
/// use punctual::{Job, MAX_ATTEMPTS};
/// assert!(Job::new("x").max_attempts(MAX_ATTEMPTS).validate().is_ok());
/// assert!(Job::new("x").max_attempts(MAX_ATTEMPTS + 1).validate().is_err());
/// ```
pub const MAX_ATTEMPTS: u32 = 10_000;

/// A job to enqueue: a payload and options, built with chained calls.
///
/// ```
/// use std::time::Duration;
/// let job = punctual::Job::new(r#"{"order": 10086}"#)
///     .id("order:10086")
///     .delay(Duration::from_secs(30 * 60))
///     .max_attempts(3);
/// assert!(job.validate().is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    pub(crate) payload: Vec<u8>,
    pub(crate) when: When,
    pub(crate) id: Option<String>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<Vec<Duration>>,
    pub(crate) expire: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) group: Option<String>,
    pub(crate) traceparent: Option<String>,
    pub(crate) tracestate: Option<String>,
}

impl Job {
    /// A job with this payload, due now, with a generated id.
    ///
    /// ```
    /// let job = punctual::Job::new("close order 10086");
    /// assert_eq!(job.payload(), b"close order 10086");
    /// let bytes = punctual::Job::new(vec![0u8, 159, 146, 150]); // any bytes
    /// assert_eq!(bytes.payload().len(), 4);
    /// ```
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Job {
            payload: payload.into(),
            when: When::Now,
            id: None,
            max_attempts: None,
            backoff: None,
            expire: None,
            timeout: None,
            group: None,
            traceparent: None,
            tracestate: None,
        }
    }

    /// A job whose payload is `value` as JSON.
    ///
    /// ```
    /// let job = punctual::Job::json(&serde_json::json!({"order": 1})).unwrap();
    /// assert_eq!(job.payload(), br#"{"order":1}"#);
    /// ```
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        serde_json::to_vec(value)
            .map(Job::new)
            .map_err(|e| Error::invalid(format!("payload is not serializable as JSON: {e}")))
    }

    /// Due `delay` from now (Redis's now).
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = punctual::Job::new("x").delay(Duration::from_secs(30 * 60));
    /// assert!(job.validate().is_ok());
    /// ```
    pub fn delay(mut self, delay: Duration) -> Self {
        self.when = When::Delay(delay);
        self
    }

    /// Due at `at`, compared with Redis's clock.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// let tomorrow = SystemTime::now() + Duration::from_secs(24 * 3600);
    /// let job = punctual::Job::new("x").at(tomorrow);
    /// assert!(job.validate().is_ok());
    /// ```
    pub fn at(mut self, at: SystemTime) -> Self {
        self.when = When::At(at);
        self
    }

    /// Due as `when` says.
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::{Job, When};
    /// let delay: Option<Duration> = None; // e.g. from a request
    /// let when = delay.map_or(When::Now, When::Delay);
    /// assert!(Job::new("x").when(when).validate().is_ok());
    /// ```
    pub fn when(mut self, when: When) -> Self {
        self.when = when;
        self
    }

    /// Use this id instead of a generated one. While a job with this id is
    /// live in the topic, enqueueing it again is a duplicate (or replaces it,
    /// with [`crate::EnqueueOptions::replace`]).
    ///
    /// ```
    /// let job = punctual::Job::new("x").id("order:10086");
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").id("bad\nid").validate().is_err());
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How many deliveries before the job goes to dead (default: the topic's
    /// setting, else 6): 1 to [`MAX_ATTEMPTS`].
    ///
    /// ```
    /// assert!(punctual::Job::new("x").max_attempts(3).validate().is_ok());
    /// assert!(punctual::Job::new("x").max_attempts(0).validate().is_err());
    /// ```
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Delays before retries: the n-th failure waits `ladder[n-1]` (the last
    /// step repeats). Default: the topic's ladder, else 0s, 5s, 30s, 2m, 10m, 30m.
    ///
    /// ```
    /// use std::time::Duration;
    /// // Retry after 10 s, then 1 min, then every 5 min.
    /// let job = punctual::Job::new("x").backoff(vec![
    ///     Duration::from_secs(10),
    ///     Duration::from_secs(60),
    ///     Duration::from_secs(300),
    /// ]);
    /// assert!(job.validate().is_ok());
    /// ```
    pub fn backoff(mut self, ladder: Vec<Duration>) -> Self {
        self.backoff = Some(ladder);
        self
    }

    /// Expiry: the job may start only within `window` after its due time
    /// (1 ms to ten years; fractions of a ms round up). Past that, a claim
    /// moves it to dead with the last error `expired: ...` instead of
    /// handing it out. The deadline is fixed at enqueue (due time +
    /// window): retries do not extend it; a reschedule moves it with the due
    /// time.
    ///
    /// ```
    /// use std::time::Duration;
    /// // A reminder that is pointless an hour after it was due.
    /// let job = punctual::Job::new("remind").delay(Duration::from_secs(600)).expire(Duration::from_secs(3600));
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").expire(Duration::ZERO).validate().is_err());
    /// ```
    pub fn expire(mut self, window: Duration) -> Self {
        self.expire = Some(window);
        self
    }

    /// The handler timeout for this job (1 ms to ten years; fractions of a
    /// ms round up), used by the worker instead of its configured one.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = punctual::Job::new("resize").timeout(Duration::from_secs(30));
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").timeout(Duration::ZERO).validate().is_err());
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The job's group (a tenant, customer or shop): 1 to
    /// [`crate::MAX_GROUP_LEN`] bytes of ASCII letters, digits, `_`, `.`,
    /// `@` and `-` ([`crate::validate_group`]).
    ///
    /// ```
    /// assert!(punctual::Job::new("x").group("shop-17").validate().is_ok());
    /// assert!(punctual::Job::new("x").group("shop 17").validate().is_err());
    /// ```
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The producer's W3C trace context (`traceparent`, checked by
    /// [`crate::validate_traceparent`]): stored with the job, kept through
    /// retries, reclaims and replays, handed to every attempt
    /// ([`crate::Delivery::traceparent`]), and the parent of the spans
    /// `punctual serve` exports. With the `opentelemetry` feature, a job
    /// without one takes the current tracing span's OpenTelemetry context
    /// when it is valid.
    ///
    /// ```
    /// let job = punctual::Job::new("x")
    ///     .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    ///     .tracestate("rojo=00f067aa0ba902b7");
    /// assert!(job.validate().is_ok());
    /// assert!(punctual::Job::new("x").traceparent("00-0-0-01").validate().is_err());
    /// ```
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// The producer's W3C `tracestate`, which goes with
    /// [`Job::traceparent`] (refused without one): at most
    /// [`crate::MAX_TRACESTATE_LEN`] bytes of printable ASCII.
    ///
    /// ```
    /// assert!(punctual::Job::new("x").tracestate("rojo=1").validate().is_err());
    /// ```
    pub fn tracestate(mut self, tracestate: impl Into<String>) -> Self {
        self.tracestate = Some(tracestate.into());
        self
    }

    /// The payload.
    ///
    /// ```
    /// assert_eq!(punctual::Job::new("hello").payload(), b"hello");
    /// ```
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Checks everything that can be checked without Redis (the payload
    /// limit is checked by [`crate::Queue`], which knows it).
    ///
    /// ```
    /// let err = punctual::Job::new("x").id("").validate().unwrap_err();
    /// assert!(err.to_string().starts_with("invalid id"), "{err}");
    /// assert!(punctual::Job::new("x").validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<()> {
        if let Some(id) = &self.id {
            validate_id(id)?;
        }
        if let Some(m) = self.max_attempts {
            check_max_attempts(m)?;
        }
        if let Some(ladder) = &self.backoff {
            if let Some(step) = ladder.iter().find(|d| **d > MAX_DELAY) {
                return Err(Error::invalid(format!(
                    "invalid backoff step {}s: steps are at most ten years",
                    step.as_secs()
                )));
            }
        }
        for (what, letter, d) in [("expiry", 'x', self.expire), ("timeout", 't', self.timeout)] {
            if let Some(d) = d {
                if d.is_zero() || d > MAX_DELAY {
                    return Err(Error::invalid(format!(
                        "invalid {what} ({letter}) of {d:?}: give 1 ms to ten years"
                    )));
                }
            }
        }
        if let Some(g) = &self.group {
            crate::options::validate_group(g)?;
        }
        if let Some(tp) = &self.traceparent {
            crate::options::validate_traceparent(tp)?;
        }
        if let Some(ts) = &self.tracestate {
            if self.traceparent.is_none() {
                return Err(Error::invalid(
                    "a tracestate needs a traceparent: give both, or neither",
                ));
            }
            crate::options::validate_tracestate(ts)?;
        }
        self.when.encode().map(drop)
    }

    /// The enqueue script's "max attempts" argument: the max attempts (empty
    /// for the topic's default), then the options,
    /// `;x<ms>;t<ms>;g<group>;p<traceparent>;s<tracestate, escaped>`.
    pub(crate) fn max_arg(&self) -> String {
        let mut s = self.max_attempts.map(|m| m.to_string()).unwrap_or_default();
        if let Some(d) = self.expire {
            s.push_str(&format!(";x{}", ceil_ms(d)));
        }
        if let Some(d) = self.timeout {
            s.push_str(&format!(";t{}", ceil_ms(d)));
        }
        if let Some(g) = &self.group {
            s.push_str(";g");
            s.push_str(g);
        }
        if let Some(tp) = &self.traceparent {
            s.push_str(";p");
            s.push_str(tp);
            if let Some(ts) = self.tracestate.as_deref().filter(|t| !t.is_empty()) {
                s.push_str(";s");
                s.push_str(&crate::options::escape_tracestate(ts));
            }
        } else {
            #[cfg(feature = "opentelemetry")]
            if let Some((tp, ts)) = crate::otel::current_context() {
                s.push_str(";p");
                s.push_str(&tp);
                if !ts.is_empty() {
                    s.push_str(";s");
                    s.push_str(&crate::options::escape_tracestate(&ts));
                }
            }
        }
        s
    }

    pub(crate) fn backoff_arg(&self) -> String {
        self.backoff
            .as_ref()
            .map(|l| {
                l.iter()
                    .map(|d| ceil_ms(*d).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    }
}

/// Refuses a max attempts outside 1..=[`MAX_ATTEMPTS`].
pub(crate) fn check_max_attempts(m: u32) -> Result<()> {
    if m == 0 || m > MAX_ATTEMPTS {
        return Err(Error::invalid(format!(
            "invalid max attempts {m}: max attempts must be at least 1 and at most {MAX_ATTEMPTS}"
        )));
    }
    Ok(())
}

/// Options of one enqueue call ([`crate::Queue::enqueue_with`]).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::{EnqueueOptions, EnqueueStatus, Job};
/// let opts = EnqueueOptions::default().replace(true);
/// let out = queue.enqueue_with("orders", vec![Job::new("v2").id("order:1")], &opts).await?;
/// assert_ne!(out[0].status, EnqueueStatus::Duplicate);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EnqueueOptions {
    /// Replace a live job with the same id instead of reporting a duplicate.
    pub replace: bool,
    /// Mark each job created in `P:{T}:fired` (kept 7 days), in the same script
    /// as its enqueue, and create none whose id is marked there
    /// ([`EnqueueStatus::FiredBefore`](crate::EnqueueStatus::FiredBefore)):
    /// what makes an import rerun after an interruption enqueue nothing twice,
    /// even for jobs that ran meanwhile.
    pub mark: bool,
}

impl EnqueueOptions {
    /// Replace live jobs with the same id.
    ///
    /// ```
    /// assert!(punctual::EnqueueOptions::default().replace(true).replace);
    /// ```
    pub fn replace(mut self, yes: bool) -> Self {
        self.replace = yes;
        self
    }

    /// Mark the jobs created in `P:{T}:fired` (7 days), and create none
    /// whose id is marked there (see [`EnqueueOptions::mark`] the field,
    /// and [`crate::Queue::unmark`]).
    ///
    /// ```
    /// assert!(punctual::EnqueueOptions::default().mark(true).mark);
    /// ```
    pub fn mark(mut self, yes: bool) -> Self {
        self.mark = yes;
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn fractions_of_a_millisecond_round_up_never_down() {
        let d = |ns| When::Delay(Duration::from_nanos(ns)).encode().unwrap();
        assert_eq!(d(1_500_000), "d2");
        assert_eq!(d(1), "d1");
        assert_eq!(d(2_000_000), "d2");
        assert_eq!(d(0), "d0");
        let at = When::At(UNIX_EPOCH + Duration::from_nanos(1_000_000_001));
        assert_eq!(at.encode().unwrap(), "a1001");
        let job = Job::new("x").backoff(vec![Duration::from_micros(1500), Duration::from_secs(1)]);
        assert_eq!(job.backoff_arg(), "2,1000");
    }
}
