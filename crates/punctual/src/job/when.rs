//! When a job is due, and the longest delay.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// Ten years: a longer delay is refused as a mistake.
///
/// ```
/// use std::time::Duration;
/// use punctual::{Job, MAX_DELAY};
/// assert!(Job::new("x").delay(MAX_DELAY).validate().is_ok());
/// let err = Job::new("x").delay(MAX_DELAY + Duration::from_secs(1)).validate().unwrap_err();
/// assert_eq!(err.kind(), punctual::ErrorKind::InvalidInput);
/// ```
pub const MAX_DELAY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// When a job is due.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use punctual::{Job, When};
///
/// assert_eq!(When::default(), When::Now);
/// let in_an_hour = Job::new("x").when(When::Delay(Duration::from_secs(3600)));
/// let at_noon = Job::new("x").when(When::At(SystemTime::UNIX_EPOCH + Duration::from_secs(43_200)));
/// assert!(in_an_hour.validate().is_ok() && at_noon.validate().is_ok());
/// // Before 1970 cannot be sent.
/// let early = Job::new("x").when(When::At(SystemTime::UNIX_EPOCH - Duration::from_secs(1)));
/// assert!(early.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum When {
    /// Due as soon as it is enqueued.
    #[default]
    Now,
    /// Due this long after Redis receives it (measured by Redis `TIME`).
    Delay(Duration),
    /// Due at this wall-clock time (compared with Redis `TIME`). A time in the
    /// past means due now.
    At(SystemTime),
}

/// Whole milliseconds, rounded up: a delay of 1.5 ms waits 2 ms, never 1
/// (a job is never early, not even by a fraction of a millisecond).
pub(crate) fn ceil_ms(d: Duration) -> u128 {
    d.as_nanos().div_ceil(1_000_000)
}

impl When {
    /// The script's encoding: `d<ms>` or `a<epoch ms>`.
    pub(crate) fn encode(&self) -> Result<String> {
        match *self {
            When::Now => Ok("d0".into()),
            When::Delay(d) => {
                if d > MAX_DELAY {
                    return Err(Error::invalid(format!(
                        "invalid delay {}s: delays are at most ten years",
                        d.as_secs()
                    )));
                }
                Ok(format!("d{}", ceil_ms(d)))
            }
            When::At(t) => {
                let ms = t.duration_since(UNIX_EPOCH).map_err(|_| {
                    Error::invalid("invalid due time: before 1970; give a time after the epoch")
                })?;
                Ok(format!("a{}", ceil_ms(ms)))
            }
        }
    }
}
