//! A schedule as stored: its timing (cron in a time zone, or a fixed
//! interval), what each occurrence enqueues, its catch-up policy, and the
//! checks of each field.

use std::str::FromStr;
use std::time::Duration;

use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};

use super::MAX_NAME_LEN;
use crate::error::{Error, Result};

/// What a firer does with occurrences that were missed (the firers were
/// down, or the schedule was paused).
///
/// ```
/// use punctual::schedule::CatchUp;
/// assert_eq!("latest".parse::<CatchUp>()?, CatchUp::Latest);
/// assert_eq!(CatchUp::default(), CatchUp::All);
/// assert_eq!(CatchUp::Spread.as_str(), "spread");
/// # Ok::<(), punctual::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum CatchUp {
    /// Enqueue every missed occurrence, due now, oldest first (at most
    /// [`MAX_CATCH_UP`](super::MAX_CATCH_UP) per pass).
    #[default]
    All,
    /// Enqueue only the most recent missed occurrence.
    Latest,
    /// Enqueue none of them.
    Skip,
    /// Enqueue every one, due times spread evenly over the schedule's
    /// `spread_ms` from now, oldest first.
    Spread,
}

impl CatchUp {
    /// The lowercase name, as JSON, the CLI and the config file write it.
    ///
    /// ```
    /// assert_eq!(punctual::schedule::CatchUp::Skip.as_str(), "skip");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            CatchUp::All => "all",
            CatchUp::Latest => "latest",
            CatchUp::Skip => "skip",
            CatchUp::Spread => "spread",
        }
    }
}

impl FromStr for CatchUp {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "all" => Ok(CatchUp::All),
            "latest" => Ok(CatchUp::Latest),
            "skip" => Ok(CatchUp::Skip),
            "spread" => Ok(CatchUp::Spread),
            _ => Err(Error::invalid(format!(
                "invalid catch-up policy {s:?}: use all, latest, skip or spread"
            ))),
        }
    }
}

impl std::fmt::Display for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn utc() -> String {
    "UTC".into()
}

/// A recurring schedule of one topic, as stored in `P:{T}:schedules` (the
/// JSON is the wire format: see docs/PROTOCOL.md "Schedules").
///
/// ```
/// use std::time::Duration;
/// use punctual::schedule::{CatchUp, Schedule};
/// let s = Schedule::cron("close-unpaid", "0 */5 * * * *")
///     .tz("Europe/Berlin")
///     .payload(r#"{"kind":"sweep"}"#)
///     .options("3")
///     .spread(Duration::from_secs(600));
/// s.validate()?;
/// assert_eq!(s.catch_up, CatchUp::Spread);
/// let json = serde_json::to_string(&s).unwrap();
/// assert!(json.contains(r#""cron":"0 */5 * * * *""#));
/// # Ok::<(), punctual::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Schedule {
    /// 1 to 100 bytes of `[A-Za-z0-9_.-]`; unique within the topic.
    pub name: String,
    /// A cron expression: 5 fields, or 6 with seconds first (the `croner`
    /// syntax). Exactly one of `cron` and `every_ms` is set.
    #[serde(default)]
    pub cron: Option<String>,
    /// A fixed interval in ms (at least 1,000): occurrences at
    /// `created_ms + i * every_ms`.
    #[serde(default)]
    pub every_ms: Option<u64>,
    /// The IANA time zone of `cron` (default `UTC`).
    #[serde(default = "utc")]
    pub tz: String,
    /// Each occurrence's job payload.
    #[serde(default)]
    pub payload: String,
    /// The job's M field text passed to enqueue: max attempts and options
    /// (docs/PROTOCOL.md "Per-job options"); empty for the topic's defaults.
    #[serde(default)]
    pub options: String,
    /// What to do with missed occurrences.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// The window of [`CatchUp::Spread`], in ms.
    #[serde(default)]
    pub spread_ms: Option<u64>,
    /// A paused schedule fires nothing.
    #[serde(default)]
    pub paused: bool,
    /// When it was first stored (Redis's clock, epoch ms); set by
    /// [`Queue::schedule_put`](crate::Queue::schedule_put).
    #[serde(default)]
    pub created_ms: i64,
}

impl Schedule {
    /// A schedule that fires on a cron expression (in UTC unless
    /// [`Schedule::tz`] says otherwise).
    ///
    /// ```
    /// let s = punctual::schedule::Schedule::cron("nightly", "0 3 * * *");
    /// assert_eq!((s.cron.as_deref(), s.tz.as_str()), (Some("0 3 * * *"), "UTC"));
    /// ```
    pub fn cron(name: impl Into<String>, expr: impl Into<String>) -> Self {
        Schedule {
            name: name.into(),
            cron: Some(expr.into()),
            every_ms: None,
            tz: utc(),
            payload: String::new(),
            options: String::new(),
            catch_up: CatchUp::All,
            spread_ms: None,
            paused: false,
            created_ms: 0,
        }
    }

    /// A schedule that fires every `interval` (at least 1 s), counted from
    /// its creation.
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = punctual::schedule::Schedule::every("heartbeat", Duration::from_secs(30));
    /// assert_eq!(s.every_ms, Some(30_000));
    /// ```
    pub fn every(name: impl Into<String>, interval: Duration) -> Self {
        let mut s = Schedule::cron(name, "");
        s.cron = None;
        s.every_ms = Some(interval.as_millis().min(u64::MAX as u128) as u64);
        s
    }

    /// The cron expression's time zone (an IANA name).
    ///
    /// ```
    /// let s = punctual::schedule::Schedule::cron("n", "0 3 * * *").tz("America/New_York");
    /// assert!(s.validate().is_ok());
    /// ```
    pub fn tz(mut self, tz: impl Into<String>) -> Self {
        self.tz = tz.into();
        self
    }

    /// Each occurrence's payload.
    ///
    /// ```
    /// let s = punctual::schedule::Schedule::cron("n", "0 3 * * *").payload("{}");
    /// assert_eq!(s.payload, "{}");
    /// ```
    pub fn payload(mut self, payload: impl Into<String>) -> Self {
        self.payload = payload.into();
        self
    }

    /// The job options text (the enqueue script's M field, e.g. `3` for 3
    /// attempts).
    ///
    /// ```
    /// let s = punctual::schedule::Schedule::cron("n", "0 3 * * *").options("3");
    /// assert_eq!(s.options, "3");
    /// ```
    pub fn options(mut self, options: impl Into<String>) -> Self {
        self.options = options.into();
        self
    }

    /// The catch-up policy (for [`CatchUp::Spread`], use
    /// [`Schedule::spread`], which also sets the window).
    ///
    /// ```
    /// use punctual::schedule::{CatchUp, Schedule};
    /// let s = Schedule::cron("n", "0 3 * * *").catch_up(CatchUp::Skip);
    /// assert_eq!(s.catch_up, CatchUp::Skip);
    /// ```
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.catch_up = policy;
        self
    }

    /// Catch up with [`CatchUp::Spread`] over `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = punctual::schedule::Schedule::cron("n", "* * * * *").spread(Duration::from_secs(600));
    /// assert_eq!(s.spread_ms, Some(600_000));
    /// ```
    pub fn spread(mut self, window: Duration) -> Self {
        self.catch_up = CatchUp::Spread;
        self.spread_ms = Some(window.as_millis().min(u64::MAX as u128) as u64);
        self
    }

    /// Checks every field; a message says what is wrong.
    ///
    /// ```
    /// use punctual::schedule::Schedule;
    /// assert!(Schedule::cron("ok", "*/5 * * * * *").validate().is_ok());
    /// let err = Schedule::cron("bad", "61 * * * *").validate().unwrap_err();
    /// assert!(err.to_string().contains("cron"), "{err}");
    /// let err = Schedule::cron("n", "0 3 * * *").tz("Mars/Olympus").validate().unwrap_err();
    /// assert!(err.to_string().contains("time zone"), "{err}");
    /// ```
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        let bad = |why: String| Err(Error::invalid(format!("schedule {:?}: {why}", self.name)));
        match (&self.cron, self.every_ms) {
            (Some(_), Some(_)) => return bad("give either cron or every, not both".into()),
            (None, None) => return bad("give a cron expression or an interval (every)".into()),
            (Some(expr), None) => {
                parse_cron(expr)
                    .map_err(|e| Error::invalid(format!("schedule {:?}: {e}", self.name)))?;
            }
            (None, Some(ms)) => {
                if ms < 1000 {
                    return bad(format!("the interval is {ms} ms; it must be at least 1 s"));
                }
                if ms > 315_360_000_000 {
                    return bad("the interval may be at most ten years".into());
                }
            }
        }
        if self.every_ms.is_some() && self.tz != "UTC" {
            return bad("a time zone applies to cron schedules only".into());
        }
        parse_tz(&self.tz).map_err(|e| Error::invalid(format!("schedule {:?}: {e}", self.name)))?;
        match (self.catch_up, self.spread_ms) {
            (CatchUp::Spread, None) | (CatchUp::Spread, Some(0)) => {
                return bad("catch-up spread needs a window (spread, e.g. 10m)".into())
            }
            (CatchUp::Spread, Some(ms)) if ms > 315_360_000_000 => {
                return bad("the spread window may be at most ten years".into())
            }
            (CatchUp::Spread, _) => {}
            (_, Some(_)) => return bad("a spread window needs catch-up spread".into()),
            _ => {}
        }
        if !options_ok(&self.options) {
            return bad(format!(
                "invalid options {:?}: the enqueue M field, max attempts (digits) then ;<letter><value> pairs",
                self.options
            ));
        }
        Ok(())
    }

    /// Whether `other` fires the same occurrences (the timing fields
    /// only).
    pub(super) fn same_timing(&self, other: &Schedule) -> bool {
        self.cron == other.cron && self.every_ms == other.every_ms && self.tz == other.tz
    }
}

/// A schedule with what its firers did and will do, as
/// [`Queue::schedules`](crate::Queue::schedules) lists it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// use std::time::Duration;
/// use punctual::schedule::Schedule;
/// queue.schedule_put("mails", Schedule::every("digest", Duration::from_secs(3600))).await?;
/// let info = queue.schedule("mails", "digest").await?.unwrap();
/// assert_eq!(info.next_ms, Some(info.schedule.created_ms + 3_600_000));
/// // Nothing before its creation is missed: the watermark starts there.
/// assert_eq!(info.last_ms, Some(info.schedule.created_ms));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The schedule.
    #[serde(flatten)]
    pub schedule: Schedule,
    /// The watermark: every occurrence up to it was handled (fired, or
    /// passed over by the catch-up policy). It starts at the creation
    /// time; `None` only for a schedule written into Redis by hand (its
    /// creation time serves then).
    pub last_ms: Option<i64>,
    /// The next occurrence after now (`None` when paused or when there is
    /// none).
    pub next_ms: Option<i64>,
}

/// Checks a schedule name: 1 to 100 bytes of `[A-Za-z0-9_.-]`.
///
/// ```
/// assert!(punctual::schedule::validate_name("close-unpaid.v2").is_ok());
/// assert!(punctual::schedule::validate_name("a b").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "invalid schedule name {name:?}: names are 1 to {MAX_NAME_LEN} bytes"
        )));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(Error::invalid(format!(
            "invalid schedule name {name:?}: use letters, digits, '_', '.' and '-'"
        )));
    }
    Ok(())
}

/// The M field text: max attempts (digits, or empty) and `;`-separated
/// options, without the characters a record header cannot hold. The
/// enqueue script checks the values.
fn options_ok(s: &str) -> bool {
    if s.len() > 200 || s.contains([':', '\n', '\r']) || s.chars().any(char::is_control) {
        return false;
    }
    let mut parts = s.split(';');
    let head = parts.next().unwrap_or_default();
    head.bytes().all(|b| b.is_ascii_digit())
        && parts.all(|p| p.len() > 1 && p.as_bytes()[0].is_ascii_lowercase())
}

pub(super) fn parse_cron(expr: &str) -> Result<Cron> {
    let fields = expr.split_whitespace().count();
    if fields != 5 && fields != 6 {
        return Err(Error::invalid(format!(
            "invalid cron expression {expr:?}: use 5 fields (minute hour day month weekday) or 6 with seconds first"
        )));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| Error::invalid(format!("invalid cron expression {expr:?}: {e}")))
}

pub(super) fn parse_tz(tz: &str) -> Result<Tz> {
    tz.parse::<Tz>().map_err(|_| {
        Error::invalid(format!(
            "unknown time zone {tz:?}: use an IANA name such as UTC or Europe/Berlin"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_what_is_wrong() {
        let err = |s: Schedule| s.validate().unwrap_err().to_string();
        assert!(err(Schedule::every("n", Duration::from_millis(500))).contains("at least 1 s"));
        assert!(err(Schedule::cron("a b", "* * * * *")).contains("invalid schedule name"));
        assert!(err(Schedule::cron("n", "* * * *")).contains("5 fields"));
        assert!(err(Schedule::cron("n", "* * * * *").catch_up(CatchUp::Spread)).contains("window"));
        assert!(err(Schedule::cron("n", "* * * * *").options("3:4")).contains("options"));
        assert!(Schedule::cron("n", "* * * * *")
            .options("3;t5000")
            .validate()
            .is_ok());
        assert!(
            err(Schedule::every("n", Duration::from_secs(5)).tz("Europe/Berlin"))
                .contains("cron schedules only")
        );
    }
}
