//! Recurring schedules: a cron expression in a time zone, or a fixed
//! interval, that enqueues an ordinary job at each occurrence.
//!
//! A [`Schedule`] is stored in Redis (`P:{T}:schedules`, name → JSON; see
//! docs/PROTOCOL.md "Schedules"), so any host can fire it. Every
//! [`crate::Scheduler`] of the topic runs a *firer*: under a short lock it
//! enqueues each occurrence up to [`AHEAD`] in advance as a job with id
//! `<name>@<occurrence ms>`, due at the occurrence (so never early), and
//! raises the schedule's watermark. The enqueue script's fired guard
//! (`P:{T}:fired`, 7 days) makes each occurrence fire at most once even when
//! firers race, stall or lose the watermark.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> punctual::Result<()> {
//! # let redis = punctual_testkit::RedisServer::start();
//! # let queue = punctual::Queue::connect(redis.url()).await?;
//! use punctual::schedule::{CatchUp, Schedule};
//! let nightly = Schedule::cron("nightly", "0 3 * * *")
//!     .tz("Europe/Berlin")
//!     .payload(r#"{"kind":"report"}"#)
//!     .catch_up(CatchUp::Latest);
//! queue.schedule_put("orders", nightly).await?;
//! let listed = queue.schedules("orders").await?;
//! assert_eq!(listed[0].schedule.name, "nightly");
//! assert!(listed[0].next_ms.is_some());
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::partition::{partition_name, partition_of};
use crate::queue::{Queue, MAX_BATCH, MAX_SAFE};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// How far ahead of an occurrence the firer enqueues it (60 s): the job then
/// waits in the pool like any delayed job, so it starts as precisely as one.
///
/// ```
/// assert_eq!(punctual::schedule::AHEAD.as_secs(), 60);
/// ```
pub const AHEAD: Duration = Duration::from_secs(60);

/// Most missed occurrences one firer pass enqueues for catch-up `all` or
/// `spread` (the next pass continues).
///
/// ```
/// assert_eq!(punctual::schedule::MAX_CATCH_UP, 1_000);
/// ```
pub const MAX_CATCH_UP: usize = 1000;

/// An occurrence less than this far in the past when the firer looks at it
/// (1 s) is not *missed*: it is enqueued (due at once) whatever the catch-up
/// policy, so a firer that wakes a little late, or a schedule created a
/// moment before its first occurrence, loses nothing.
///
/// ```
/// assert_eq!(punctual::schedule::LATE_GRACE.as_millis(), 1_000);
/// ```
pub const LATE_GRACE: Duration = Duration::from_secs(1);

/// How long the enqueue script keeps an occurrence's id in `P:{T}:fired`
/// (7 days): within it, an occurrence never fires twice.
///
/// ```
/// assert_eq!(punctual::schedule::FIRED_KEEP.as_secs(), 7 * 24 * 3600);
/// ```
pub const FIRED_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

/// Longest schedule name, in bytes.
///
/// ```
/// use punctual::schedule::{Schedule, MAX_NAME_LEN};
/// assert!(Schedule::every("n".repeat(MAX_NAME_LEN), std::time::Duration::from_secs(5)).validate().is_ok());
/// ```
pub const MAX_NAME_LEN: usize = 100;

/// The lock's lifetime; a firer's pass takes far less.
const LOCK_MS: u64 = 10_000;
/// Idle sleep of a firer (a topic without schedules costs one `HGETALL`
/// per such period, unless a change wakes it).
const IDLE: Duration = Duration::from_secs(60);

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
    /// [`MAX_CATCH_UP`] per pass).
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
    /// [`Queue::schedule_put`].
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
    fn same_timing(&self, other: &Schedule) -> bool {
        self.cron == other.cron && self.every_ms == other.every_ms && self.tz == other.tz
    }

    /// The first occurrence strictly after `after_ms` (epoch ms), if any.
    ///
    /// ```
    /// use punctual::schedule::Schedule;
    /// // 2026-03-01T00:00:00Z
    /// let t = 1_772_323_200_000;
    /// let s = Schedule::cron("n", "0 3 * * *");
    /// assert_eq!(s.next_after(t)?, Some(t + 3 * 3_600_000));
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn next_after(&self, after_ms: i64) -> Result<Option<i64>> {
        Ok(self.occurrences(after_ms, i64::MAX, 1)?.first().copied())
    }

    /// The occurrences strictly after `after_ms` and at most `until_ms`
    /// (epoch ms), oldest first, at most `limit` of them. A cron schedule
    /// follows its time zone's DST changes as `croner` does: a fixed local
    /// time that a spring-forward skips occurs right after the gap, one that
    /// a fall-back repeats occurs once (the first time); wildcard and step
    /// fields occur at each matching real instant.
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::schedule::Schedule;
    /// let mut s = Schedule::every("n", Duration::from_secs(10));
    /// s.created_ms = 1_000_000;
    /// assert_eq!(s.occurrences(1_000_000, 1_030_000, 10)?, [1_010_000, 1_020_000, 1_030_000]);
    /// assert_eq!(s.occurrences(1_015_000, 1_100_000, 2)?, [1_020_000, 1_030_000]);
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn occurrences(&self, after_ms: i64, until_ms: i64, limit: usize) -> Result<Vec<i64>> {
        let mut out = Vec::new();
        if limit == 0 || until_ms <= after_ms {
            return Ok(out);
        }
        if let Some(every) = self.every_ms {
            let every = every.max(1) as i64;
            let base = self.created_ms;
            let mut i = if after_ms < base {
                0
            } else {
                (after_ms - base) / every + 1
            };
            while out.len() < limit {
                let o = base.saturating_add(i.saturating_mul(every));
                if o > until_ms || o == i64::MAX {
                    break;
                }
                if o > after_ms {
                    out.push(o);
                }
                i += 1;
            }
            return Ok(out);
        }
        let cron = parse_cron(self.cron.as_deref().unwrap_or_default())?;
        let tz = parse_tz(&self.tz)?;
        // croner works in whole seconds: start from the second that holds
        // after_ms; every result is after it.
        let mut at = from_ms(tz, after_ms.div_euclid(1000) * 1000)?;
        while out.len() < limit {
            let next = match cron.find_next_occurrence(&at, false) {
                Ok(n) => n,
                // No further occurrence (e.g. a year limit): none.
                Err(_) => break,
            };
            let ms = next.timestamp_millis();
            if ms > until_ms {
                break;
            }
            if ms > after_ms {
                out.push(ms);
            }
            at = next;
        }
        Ok(out)
    }

    /// The latest occurrence at or before `at_ms`, looked up directly
    /// (no walk from an old watermark).
    fn latest_at_or_before(&self, at_ms: i64) -> Result<Option<i64>> {
        if let Some(every) = self.every_ms {
            let every = every.max(1) as i64;
            if at_ms < self.created_ms {
                return Ok(None);
            }
            return Ok(Some(
                self.created_ms + (at_ms - self.created_ms) / every * every,
            ));
        }
        let cron = parse_cron(self.cron.as_deref().unwrap_or_default())?;
        let tz = parse_tz(&self.tz)?;
        let at = from_ms(tz, at_ms.div_euclid(1000) * 1000)?;
        Ok(cron
            .find_previous_occurrence(&at, true)
            .ok()
            .map(|t| t.timestamp_millis()))
    }

    /// What one firer pass does with this schedule: the occurrences after
    /// the watermark `wm` up to `now_ms + AHEAD` (missed ones by the
    /// catch-up policy), as (occurrence, due) pairs, and the new watermark.
    /// Pure; `cap` bounds the occurrences enqueued.
    pub(crate) fn plan(&self, wm: i64, now_ms: i64, cap: usize) -> Result<Plan> {
        let horizon = now_ms + AHEAD.as_millis() as i64;
        let missed_until = now_ms - LATE_GRACE.as_millis() as i64;
        let mut fire: Vec<(i64, i64)> = Vec::new();
        let mut from = wm;
        let mut more = false;
        if wm < missed_until {
            match self.catch_up {
                CatchUp::All | CatchUp::Spread => {
                    let missed = self.occurrences(wm, missed_until, cap)?;
                    if missed.len() == cap {
                        more = true;
                    }
                    let n = missed.len() as i64;
                    for (i, o) in missed.iter().enumerate() {
                        let due = match (self.catch_up, self.spread_ms) {
                            (CatchUp::Spread, Some(w)) if n > 1 => {
                                now_ms + (w as i64).saturating_mul(i as i64) / n
                            }
                            (CatchUp::Spread, _) => now_ms,
                            _ => *o,
                        };
                        fire.push((*o, due));
                    }
                    from = match missed.last() {
                        Some(last) if more => *last,
                        _ => missed_until,
                    };
                }
                CatchUp::Latest => {
                    if let Some(o) = self.latest_at_or_before(missed_until)? {
                        if o > wm {
                            fire.push((o, o));
                        }
                    }
                    from = missed_until;
                }
                CatchUp::Skip => from = missed_until,
            }
        }
        if !more {
            let left = cap - fire.len();
            let ahead = self.occurrences(from, horizon, left)?;
            if ahead.len() == left {
                more = true;
            }
            fire.extend(ahead.into_iter().map(|o| (o, o)));
        }
        let mut new_wm = from.max(wm);
        if let Some((o, _)) = fire.last() {
            new_wm = new_wm.max(*o);
        }
        Ok(Plan {
            fire,
            watermark: new_wm,
            more,
        })
    }
}

/// One firer pass for one schedule (see [`Schedule::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// (occurrence ms, due ms), oldest occurrence first.
    pub(crate) fire: Vec<(i64, i64)>,
    /// Every occurrence up to this is handled.
    pub(crate) watermark: i64,
    /// The cap was reached: run another pass at once.
    pub(crate) more: bool,
}

/// A schedule with what its firers did and will do, as
/// [`Queue::schedules`] lists it.
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

fn parse_cron(expr: &str) -> Result<Cron> {
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

fn parse_tz(tz: &str) -> Result<Tz> {
    tz.parse::<Tz>().map_err(|_| {
        Error::invalid(format!(
            "unknown time zone {tz:?}: use an IANA name such as UTC or Europe/Berlin"
        ))
    })
}

fn from_ms(tz: Tz, ms: i64) -> Result<DateTime<Tz>> {
    tz.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| Error::invalid(format!("time {ms} ms is out of range")))
}

/// The keys of a topic's schedules (in the topic's slot, never a
/// partition's).
struct Keys {
    schedules: String,
    last: String,
    lock: String,
}

fn keys(prefix: &str, topic: &str) -> Keys {
    let base = format!("{prefix}:{{{topic}}}:schedules");
    Keys {
        last: format!("{base}:last"),
        lock: format!("{base}:lock"),
        schedules: base,
    }
}

/// The channel a change to `topic`'s schedules is published on (the key's
/// name).
pub(crate) fn channel(prefix: &str, topic: &str) -> String {
    keys(prefix, topic).schedules
}

/// The job id of an occurrence.
///
/// ```
/// assert_eq!(punctual::schedule::occurrence_id("nightly", 1_796_000_000_000), "nightly@1796000000000");
/// ```
pub fn occurrence_id(name: &str, occurrence_ms: i64) -> String {
    format!("{name}@{occurrence_ms}")
}

static UNLOCK: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

/// The firers' lock, held by one firer pass or one change.
pub(crate) struct Lock {
    key: String,
    token: String,
}

impl Queue {
    async fn try_lock(&self, key: &str) -> Result<Option<Lock>> {
        let token = format!("{:016x}", rand::random::<u64>());
        let got: Option<String> = self
            .cmd(
                redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(LOCK_MS),
            )
            .await?;
        Ok(got.map(|_| Lock {
            key: key.to_string(),
            token,
        }))
    }

    /// Takes the lock for a change, waiting while a firer's pass holds it.
    async fn lock_for_change(&self, key: &str) -> Result<Lock> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(LOCK_MS + 2000);
        loop {
            if let Some(l) = self.try_lock(key).await? {
                return Ok(l);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::invalid(format!(
                    "the schedules' lock {key} stayed held for over {} s; try again",
                    LOCK_MS / 1000 + 2
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// For [`Queue::delete_topic`]: takes the firers' lock of `topic`'s
    /// schedules, so that no firer pass enqueues an occurrence while the
    /// topic is deleted.
    pub(crate) async fn lock_schedules(&self, topic: &str) -> Result<Lock> {
        self.lock_for_change(&keys(self.prefix(), topic).lock).await
    }

    /// For [`Queue::delete_topic`], under the lock: deletes every schedule
    /// of `topic` with its watermarks, then releases the lock (its key goes
    /// with it). Firers still running find no schedule.
    pub(crate) async fn delete_schedules(&self, topic: &str, lock: Lock) -> Result<()> {
        let k = keys(self.prefix(), topic);
        let r = self
            .cmd::<i64>(redis::cmd("DEL").arg(&k.schedules).arg(&k.last))
            .await;
        self.unlock(lock).await;
        r?;
        self.publish(&k, "").await;
        Ok(())
    }

    /// `P:{T}:fired` of a topic or partition `physical`.
    pub(crate) fn fired_key(&self, physical: &str) -> String {
        format!("{}:{{{physical}}}:fired", self.prefix())
    }

    /// The keys of `topic`'s schedules: the schedules, their watermarks and
    /// the firers' lock (all in the slot of `topic`).
    pub(crate) fn schedule_keys(&self, topic: &str) -> [String; 3] {
        let k = keys(self.prefix(), topic);
        [k.schedules, k.last, k.lock]
    }

    pub(crate) async fn unlock(&self, lock: Lock) {
        let mut conn = self.conn();
        let r: redis::RedisResult<i64> = UNLOCK
            .key(&lock.key)
            .arg(&lock.token)
            .invoke_async(&mut conn)
            .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, "could not release the schedules' lock; it expires by itself");
        }
    }

    async fn read_schedules(&self, key: &str) -> Result<BTreeMap<String, Schedule>> {
        let raw: HashMap<String, String> = self.cmd(redis::cmd("HGETALL").arg(key)).await?;
        let mut out = BTreeMap::new();
        for (name, json) in raw {
            match serde_json::from_str::<Schedule>(&json) {
                Ok(s) => {
                    out.insert(name, s);
                }
                Err(e) => {
                    tracing::warn!(key, name, error = %e, "skipping a schedule whose JSON is invalid")
                }
            }
        }
        Ok(out)
    }

    async fn watermarks(&self, key: &str) -> Result<HashMap<String, i64>> {
        self.cmd(redis::cmd("HGETALL").arg(key)).await
    }

    /// Adds a schedule to `topic`, or replaces the one with its name
    /// (upsert). A replaced schedule keeps its creation time, its paused
    /// state and its watermark; if its timing changed, the occurrences its
    /// old timing fired ahead and not yet due are taken back. Returns the
    /// schedule as stored. Firers look at once (`PUBLISH`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// let stored = queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// assert!(stored.created_ms > 0);
    /// // The same name again replaces it, keeping its creation time.
    /// let again = queue.schedule_put("orders", Schedule::cron("sweep", "*/10 * * * *")).await?;
    /// assert_eq!(again.created_ms, stored.created_ms);
    /// assert_eq!(again.cron.as_deref(), Some("*/10 * * * *"));
    /// # Ok(()) }
    /// ```
    pub async fn schedule_put(&self, topic: &str, schedule: Schedule) -> Result<Schedule> {
        validate_topic(topic)?;
        schedule.validate()?;
        let k = keys(self.prefix(), topic);
        let lock = self.lock_for_change(&k.lock).await?;
        let r = self.put_locked(topic, &k, schedule).await;
        self.unlock(lock).await;
        let stored = r?;
        self.publish(&k, &stored.name).await;
        if let Err(e) = self.register_topic(topic).await {
            tracing::warn!(topic, error = %e, "could not add the topic to the set of known topics");
        }
        Ok(stored)
    }

    async fn put_locked(&self, topic: &str, k: &Keys, mut schedule: Schedule) -> Result<Schedule> {
        let old: Option<String> = self
            .cmd(redis::cmd("HGET").arg(&k.schedules).arg(&schedule.name))
            .await?;
        let old = old.and_then(|j| serde_json::from_str::<Schedule>(&j).ok());
        let now = self.redis_now_ms().await?;
        match &old {
            Some(old) => {
                schedule.created_ms = old.created_ms;
                schedule.paused = old.paused;
                if !old.same_timing(&schedule) {
                    self.take_back(topic, k, old, now).await?;
                }
            }
            None => {
                schedule.created_ms = now;
                schedule.paused = false;
                // A new schedule: nothing before now is missed.
                let _: i64 = self
                    .cmd(redis::cmd("HSET").arg(&k.last).arg(&schedule.name).arg(now))
                    .await?;
            }
        }
        let json = serde_json::to_string(&schedule)
            .map_err(|e| Error::invalid(format!("cannot encode the schedule: {e}")))?;
        let _: i64 = self
            .cmd(
                redis::cmd("HSET")
                    .arg(&k.schedules)
                    .arg(&schedule.name)
                    .arg(json),
            )
            .await?;
        Ok(schedule)
    }

    /// Takes back the occurrences of `s` fired ahead (after `now`, up to its
    /// watermark) that are not due yet, and lowers the watermark to `now`.
    /// For catch-up `spread`, also the missed occurrences whose due time was
    /// spread ahead of now: found by their fired marks (`P:{T}:fired`),
    /// made within the spread window (at most [`FIRED_KEEP`]) before now.
    async fn take_back(&self, topic: &str, k: &Keys, s: &Schedule, now: i64) -> Result<u64> {
        let wm: Option<i64> = self
            .cmd(redis::cmd("HGET").arg(&k.last).arg(&s.name))
            .await?;
        let Some(wm) = wm else { return Ok(0) };
        let mut ids: Vec<String> = Vec::new();
        if wm > now {
            ids.extend(
                s.occurrences(now, wm, MAX_BATCH * 10)?
                    .into_iter()
                    .map(|o| occurrence_id(&s.name, o)),
            );
        }
        if let (CatchUp::Spread, Some(window)) = (s.catch_up, s.spread_ms) {
            // (Plus 5 minutes: the marks are made on the clock of the
            // partition's node, which may differ from the one read here.)
            let window = window.min(FIRED_KEEP.as_millis() as u64) as i64 + 300_000;
            ids.extend(self.spread_fired(topic, &s.name, now - window).await?);
        }
        if ids.is_empty() {
            return Ok(0);
        }
        let parts = self.partitions(topic).await?;
        let mut by_part: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for id in ids {
            by_part
                .entry(partition_name(topic, partition_of(&id, parts), parts))
                .or_default()
                .push(id);
        }
        let mut removed = 0;
        for (physical, ids) in by_part {
            for chunk in ids.chunks(MAX_BATCH) {
                let v = self
                    .run_fired(&SCRIPTS.unfire, &physical, |inv| {
                        for id in chunk {
                            inv.arg(id);
                        }
                    })
                    .await?;
                removed += redis::from_redis_value::<u64>(v)
                    .map_err(|e| Error::protocol("unfire", e.to_string()))?;
            }
        }
        if wm > now {
            let _: i64 = self
                .cmd(redis::cmd("HSET").arg(&k.last).arg(&s.name).arg(now))
                .await?;
        }
        Ok(removed)
    }

    /// The ids of `name`'s occurrences fired at or after `since` (ms), from
    /// the fired marks of every partition of `topic` (the ones `unfire`
    /// leaves alone, due or run, are among them). Read in pages of 1000 by
    /// score, each page starting at the last one's highest score past the
    /// ids read at it, so each page costs O(log N + 1000), not its offset.
    async fn spread_fired(&self, topic: &str, name: &str, since: i64) -> Result<Vec<String>> {
        let prefix = format!("{name}@");
        let mut out = Vec::new();
        for physical in self.partition_names(topic).await? {
            let key = self.fired_key(&physical);
            let (mut from, mut skip) = (since.to_string(), 0);
            loop {
                let page: Vec<(String, String)> = self
                    .cmd(
                        redis::cmd("ZRANGE")
                            .arg(&key)
                            .arg(&from)
                            .arg("+inf")
                            .arg("BYSCORE")
                            .arg("LIMIT")
                            .arg(skip)
                            .arg(MAX_BATCH)
                            .arg("WITHSCORES"),
                    )
                    .await?;
                let n = page.len();
                if let Some((_, last)) = page.last() {
                    let at_last = page.iter().rev().take_while(|(_, s)| s == last).count();
                    if *last == from {
                        skip += at_last;
                    } else {
                        (from, skip) = (last.clone(), at_last);
                    }
                }
                out.extend(page.into_iter().map(|(id, _)| id).filter(|id| {
                    id.strip_prefix(&prefix)
                        .is_some_and(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
                }));
                if n < MAX_BATCH {
                    break;
                }
            }
        }
        Ok(out)
    }

    async fn publish(&self, k: &Keys, name: &str) {
        let r: Result<i64> = self
            .cmd(redis::cmd("PUBLISH").arg(&k.schedules).arg(name))
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not publish a schedule change; firers see it within a minute");
        }
    }

    /// Runs a script with the nine keys of `physical` and its fired key.
    async fn run_fired(
        &self,
        script: &redis::Script,
        physical: &str,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<redis::Value> {
        self.run_keys(script, physical, true, args).await
    }

    /// The schedules of `topic`, by name, each with its watermark and next
    /// occurrence.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// assert!(queue.schedules("orders").await?.is_empty());
    /// queue.schedule_put("orders", Schedule::cron("b", "0 3 * * *")).await?;
    /// queue.schedule_put("orders", Schedule::cron("a", "0 4 * * *")).await?;
    /// let names: Vec<_> = queue.schedules("orders").await?.into_iter().map(|i| i.schedule.name).collect();
    /// assert_eq!(names, ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub async fn schedules(&self, topic: &str) -> Result<Vec<ScheduleInfo>> {
        validate_topic(topic)?;
        let k = keys(self.prefix(), topic);
        let all = self.read_schedules(&k.schedules).await?;
        if all.is_empty() {
            return Ok(Vec::new());
        }
        let wms = self.watermarks(&k.last).await?;
        let now = self.redis_now_ms().await?;
        let mut out = Vec::with_capacity(all.len());
        for (_, s) in all {
            out.push(info(s, &wms, now));
        }
        Ok(out)
    }

    /// One schedule of `topic`, or `None`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// assert!(queue.schedule("orders", "nightly").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn schedule(&self, topic: &str, name: &str) -> Result<Option<ScheduleInfo>> {
        validate_topic(topic)?;
        validate_name(name)?;
        let k = keys(self.prefix(), topic);
        let json: Option<String> = self
            .cmd(redis::cmd("HGET").arg(&k.schedules).arg(name))
            .await?;
        let Some(json) = json else { return Ok(None) };
        let s: Schedule = serde_json::from_str(&json).map_err(|e| {
            Error::protocol(
                "schedule",
                format!("the stored JSON of {name:?} is invalid: {e}"),
            )
        })?;
        let wms = self.watermarks(&k.last).await?;
        let now = self.redis_now_ms().await?;
        Ok(Some(info(s, &wms, now)))
    }

    /// Removes a schedule; the occurrences it fired ahead and that are not
    /// due yet are taken back. Returns whether it existed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// assert!(queue.schedule_remove("orders", "sweep").await?);
    /// assert!(!queue.schedule_remove("orders", "sweep").await?);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_remove(&self, topic: &str, name: &str) -> Result<bool> {
        validate_topic(topic)?;
        validate_name(name)?;
        let k = keys(self.prefix(), topic);
        let lock = self.lock_for_change(&k.lock).await?;
        let r = async {
            let json: Option<String> = self
                .cmd(redis::cmd("HGET").arg(&k.schedules).arg(name))
                .await?;
            let Some(json) = json else { return Ok(false) };
            if let Ok(s) = serde_json::from_str::<Schedule>(&json) {
                let now = self.redis_now_ms().await?;
                self.take_back(topic, &k, &s, now).await?;
            }
            let mut pipe = redis::pipe();
            pipe.atomic()
                .hdel(&k.schedules, name)
                .ignore()
                .hdel(&k.last, name)
                .ignore();
            self.pipe::<()>(&pipe).await?;
            Ok(true)
        }
        .await;
        self.unlock(lock).await;
        if matches!(r, Ok(true)) {
            self.publish(&k, name).await;
        }
        r
    }

    /// Pauses a schedule: it fires nothing until resumed, and the
    /// occurrences it fired ahead and that are not due yet are taken back.
    /// Returns whether it exists.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// assert!(queue.schedule_pause("orders", "sweep").await?);
    /// let info = queue.schedule("orders", "sweep").await?.unwrap();
    /// assert!(info.schedule.paused);
    /// assert_eq!(info.next_ms, None);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_pause(&self, topic: &str, name: &str) -> Result<bool> {
        self.set_paused(topic, name, true).await
    }

    /// Resumes a paused schedule. The occurrences missed while it was
    /// paused are handled by its catch-up policy. Returns whether it exists.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// queue.schedule_pause("orders", "sweep").await?;
    /// assert!(queue.schedule_resume("orders", "sweep").await?);
    /// assert!(!queue.schedule("orders", "sweep").await?.unwrap().schedule.paused);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_resume(&self, topic: &str, name: &str) -> Result<bool> {
        self.set_paused(topic, name, false).await
    }

    async fn set_paused(&self, topic: &str, name: &str, paused: bool) -> Result<bool> {
        validate_topic(topic)?;
        validate_name(name)?;
        let k = keys(self.prefix(), topic);
        let lock = self.lock_for_change(&k.lock).await?;
        let r = async {
            let json: Option<String> = self
                .cmd(redis::cmd("HGET").arg(&k.schedules).arg(name))
                .await?;
            let Some(json) = json else { return Ok(false) };
            let mut s: Schedule = serde_json::from_str(&json).map_err(|e| {
                Error::protocol(
                    "schedule",
                    format!("the stored JSON of {name:?} is invalid: {e}"),
                )
            })?;
            if s.paused == paused {
                return Ok(true);
            }
            if paused {
                let now = self.redis_now_ms().await?;
                self.take_back(topic, &k, &s, now).await?;
            }
            s.paused = paused;
            let json = serde_json::to_string(&s)
                .map_err(|e| Error::invalid(format!("cannot encode the schedule: {e}")))?;
            let _: i64 = self
                .cmd(redis::cmd("HSET").arg(&k.schedules).arg(name).arg(json))
                .await?;
            Ok(true)
        }
        .await;
        self.unlock(lock).await;
        if matches!(r, Ok(true)) {
            self.publish(&k, name).await;
        }
        r
    }

    /// Enqueues the planned occurrences of `s` (fired guard on), by
    /// partition, at most [`Queue::enqueue_chunk`] per call.
    async fn fire(&self, topic: &str, s: &Schedule, plan: &Plan) -> Result<usize> {
        let parts = self.partitions(topic).await?;
        let mut by_part: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        for (o, due) in &plan.fire {
            let id = occurrence_id(&s.name, *o);
            by_part
                .entry(partition_name(topic, partition_of(&id, parts), parts))
                .or_default()
                .push((id, *due));
        }
        let mut created = 0;
        for (physical, jobs) in by_part {
            for chunk in jobs.chunks(self.enqueue_chunk()) {
                let v = self
                    .run_fired(&SCRIPTS.enqueue, &physical, |inv| {
                        inv.arg(self.max_payload().min(MAX_SAFE))
                            .arg("0")
                            .arg(chunk.len());
                        for (id, due) in chunk {
                            inv.arg(id)
                                .arg(&s.payload)
                                .arg(format!("a{due}"))
                                .arg(&s.options)
                                .arg("");
                        }
                        inv.arg(parts);
                    })
                    .await?;
                let mut r = Reply::new("enqueue", v)?;
                while !r.is_empty() {
                    let id = r.string()?;
                    match r.int()? {
                        1 => created += 1,
                        0 | 3 | 4 => {}
                        other => {
                            return Err(Error::protocol(
                                "enqueue",
                                format!("unexpected status {other} for {id:?}"),
                            ))
                        }
                    }
                }
            }
        }
        Ok(created)
    }

    /// One firer pass over `topic`: the time until the next pass is needed.
    async fn fire_pass(&self, topic: &str) -> Result<Duration> {
        let k = keys(self.prefix(), topic);
        let all = self.read_schedules(&k.schedules).await?;
        if all.values().all(|s| s.paused) {
            return Ok(IDLE);
        }
        let Some(lock) = self.try_lock(&k.lock).await? else {
            // Another firer is at work; look again shortly.
            return Ok(Duration::from_secs(1));
        };
        let r = self.fire_locked(topic, &k, all).await;
        self.unlock(lock).await;
        r
    }

    async fn fire_locked(
        &self,
        topic: &str,
        k: &Keys,
        all: BTreeMap<String, Schedule>,
    ) -> Result<Duration> {
        let now = self.redis_now_ms().await?;
        let wms = self.watermarks(&k.last).await?;
        let mut wait = IDLE;
        let mut budget = MAX_CATCH_UP;
        let mut failed = None;
        for (name, s) in &all {
            if s.paused {
                continue;
            }
            if budget == 0 {
                // This pass enqueued its share: the next one continues.
                wait = Duration::ZERO;
                break;
            }
            let wm = wms.get(name).copied().unwrap_or(s.created_ms);
            let plan = match s.plan(wm, now, budget) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(topic, schedule = %name, error = %e, "cannot compute the occurrences of a schedule");
                    continue;
                }
            };
            if !plan.fire.is_empty() {
                match self.fire(topic, s, &plan).await {
                    Ok(created) => {
                        if created > 0 {
                            tracing::debug!(topic, schedule = %name, created, "fired occurrences");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(topic, schedule = %name, error = %e, "firing a schedule failed; retrying");
                        failed.get_or_insert(e);
                        continue;
                    }
                }
                budget = budget.saturating_sub(plan.fire.len());
            }
            if plan.watermark != wm {
                let _: i64 = self
                    .cmd(
                        redis::cmd("HSET")
                            .arg(&k.last)
                            .arg(name)
                            .arg(plan.watermark),
                    )
                    .await?;
            }
            if plan.more {
                wait = Duration::ZERO;
            } else if let Some(next) = s.next_after(plan.watermark)? {
                let ms = (next - AHEAD.as_millis() as i64 - now).clamp(0, IDLE.as_millis() as i64);
                wait = wait.min(Duration::from_millis(ms as u64));
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(wait)
    }
}

fn info(s: Schedule, wms: &HashMap<String, i64>, now: i64) -> ScheduleInfo {
    let last_ms = wms.get(&s.name).copied();
    let next_ms = if s.paused {
        None
    } else {
        s.next_after(now).ok().flatten()
    };
    ScheduleInfo {
        schedule: s,
        last_ms,
        next_ms,
    }
}

/// The firer of one topic, run by every [`crate::Scheduler`] of it until
/// `stop`: a pass, then sleep until the next pass is needed or a change to
/// the schedules (`notify`) arrives.
pub(crate) async fn fire_loop(
    queue: Queue,
    topic: String,
    notify: Arc<Notify>,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if stop.is_cancelled() {
            return;
        }
        let wait = match queue.fire_pass(&topic).await {
            Ok(w) => {
                backoff = Duration::from_millis(100);
                w
            }
            Err(e) => {
                tracing::warn!(topic = %topic, error = %e, "schedule firer pass failed; retrying in {backoff:?}");
                let b = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                b
            }
        };
        if wait.is_zero() {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = notify.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn berlin_spring_forward_a_skipped_fixed_time_occurs_right_after_the_gap() {
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST.
        let s = Schedule::cron("n", "30 2 * * *").tz("Europe/Berlin");
        let got = s
            .occurrences(ms("2026-03-27T12:00:00Z"), ms("2026-03-31T12:00:00Z"), 10)
            .unwrap();
        assert_eq!(
            got,
            [
                ms("2026-03-28T02:30:00+01:00"),
                ms("2026-03-29T03:00:00+02:00"),
                ms("2026-03-30T02:30:00+02:00"),
                ms("2026-03-31T02:30:00+02:00"),
            ]
        );
    }

    #[test]
    fn berlin_spring_forward_wildcard_hours_skip_the_gap() {
        let s = Schedule::cron("n", "0 * * * *").tz("Europe/Berlin");
        let got = s
            .occurrences(ms("2026-03-28T23:30:00Z"), ms("2026-03-29T02:30:00Z"), 10)
            .unwrap();
        // 01:00 CET, then 03:00 CEST (02:00 does not exist), 04:00 CEST.
        assert_eq!(
            got,
            [
                ms("2026-03-29T01:00:00+01:00"),
                ms("2026-03-29T03:00:00+02:00"),
                ms("2026-03-29T04:00:00+02:00"),
            ]
        );
    }

    #[test]
    fn new_york_fall_back_a_repeated_fixed_time_occurs_once() {
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST.
        let s = Schedule::cron("n", "30 1 * * *").tz("America/New_York");
        let got = s
            .occurrences(ms("2026-10-31T12:00:00Z"), ms("2026-11-02T12:00:00Z"), 10)
            .unwrap();
        assert_eq!(
            got,
            [
                ms("2026-11-01T01:30:00-04:00"),
                ms("2026-11-02T01:30:00-05:00"),
            ]
        );
    }

    #[test]
    fn new_york_fall_back_a_step_occurs_at_each_real_instant() {
        let s = Schedule::cron("n", "*/30 * * * *").tz("America/New_York");
        let got = s
            .occurrences(ms("2026-11-01T04:45:00Z"), ms("2026-11-01T07:00:00Z"), 10)
            .unwrap();
        assert_eq!(
            got,
            [
                ms("2026-11-01T01:00:00-04:00"),
                ms("2026-11-01T01:30:00-04:00"),
                ms("2026-11-01T01:00:00-05:00"),
                ms("2026-11-01T01:30:00-05:00"),
                ms("2026-11-01T02:00:00-05:00"),
            ]
        );
    }

    #[test]
    fn seconds_field_and_millisecond_watermarks() {
        let s = Schedule::cron("n", "*/2 * * * * *");
        let t = ms("2026-01-01T00:00:00Z");
        assert_eq!(
            s.occurrences(t + 1, t + 6000, 10).unwrap(),
            [t + 2000, t + 4000, t + 6000]
        );
        assert_eq!(s.occurrences(t, t + 2000, 10).unwrap(), [t + 2000]);
        assert_eq!(s.latest_at_or_before(t + 5999).unwrap(), Some(t + 4000));
    }

    #[test]
    fn plan_fires_ahead_and_applies_each_catch_up_policy() {
        let t = ms("2026-01-01T00:00:00Z");
        let every = |c: CatchUp| {
            let mut s = Schedule::every("n", Duration::from_secs(10)).catch_up(c);
            s.created_ms = t;
            s
        };
        // On time: everything up to now + 60 s, due at the occurrence.
        let p = every(CatchUp::Skip).plan(t, t, 1000).unwrap();
        assert_eq!(p.fire.len(), 6);
        assert_eq!(p.fire[0], (t + 10_000, t + 10_000));
        assert_eq!(p.watermark, t + 60_000);
        // 100 s late: 9 missed (10..90 s; 100 s is within the grace).
        let now = t + 100_000;
        let p = every(CatchUp::All).plan(t, now, 1000).unwrap();
        assert_eq!(p.fire.len(), 9 + 7);
        assert!(p.fire.iter().all(|(o, d)| o == d));
        let p = every(CatchUp::Latest).plan(t, now, 1000).unwrap();
        assert_eq!(p.fire[0], (t + 90_000, t + 90_000));
        assert_eq!(p.fire.len(), 1 + 7);
        let p = every(CatchUp::Skip).plan(t, now, 1000).unwrap();
        assert_eq!(p.fire[0].0, t + 100_000);
        assert_eq!(p.fire.len(), 7);
        let s = every(CatchUp::All).spread(Duration::from_secs(90));
        let p = s.plan(t, now, 1000).unwrap();
        let dues: Vec<i64> = p.fire[..9].iter().map(|(_, d)| d - now).collect();
        assert_eq!(
            dues,
            [0, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000]
        );
        // The cap: the watermark stops at the last one fired.
        let p = every(CatchUp::All).plan(t, now, 4).unwrap();
        assert_eq!(p.fire.len(), 4);
        assert!(p.more);
        assert_eq!(p.watermark, t + 40_000);
        let p = every(CatchUp::All).plan(p.watermark, now, 1000).unwrap();
        assert_eq!(p.fire[0].0, t + 50_000);
    }

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
