//! Topic limits: a rate (token bucket) and a most-running count, enforced by
//! the claim script for every worker on every host (PROTOCOL.md, "Limits").

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};

/// Largest rate count, burst or most-running count accepted.
pub(crate) const MAX_LIMIT: u32 = 1_000_000;
/// Longest rate period: a day.
pub(crate) const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// A rate: `n` jobs per `per` (a token bucket refilled with `n` tokens every
/// `per`). Parsed from `200/s`, `30/m`, `5/h`, or `n/<period>` with a
/// period such as `500ms`, `10s`, `2m`; shown the same way.
///
/// ```
/// use std::time::Duration;
/// use punctual::Rate;
/// let r: Rate = "200/s".parse()?;
/// assert_eq!((r.n, r.per), (200, Duration::from_secs(1)));
/// assert_eq!(r.to_string(), "200/s");
/// assert_eq!("3/500ms".parse::<Rate>()?.to_string(), "3/500ms");
/// assert!("0/s".parse::<Rate>().is_err());
/// # Ok::<(), punctual::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Jobs per period (1 to 1,000,000).
    pub n: u32,
    /// The period (1 ms to one day, whole milliseconds).
    pub per: Duration,
}

impl Rate {
    /// `n` jobs per `per`, checked.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = punctual::Rate::new(50, Duration::from_secs(1))?;
    /// assert_eq!(r.to_string(), "50/s");
    /// assert!(punctual::Rate::new(50, Duration::ZERO).is_err());
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn new(n: u32, per: Duration) -> Result<Rate> {
        let r = Rate { n, per };
        r.check()?;
        Ok(r)
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.n == 0 || self.n > MAX_LIMIT {
            return Err(Error::invalid(format!(
                "invalid rate {}: the count must be 1 to {MAX_LIMIT}",
                self.n
            )));
        }
        if self.per < Duration::from_millis(1)
            || self.per > MAX_PERIOD
            || !self.per.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Err(Error::invalid(format!(
                "invalid rate period {:?}: give whole milliseconds from 1 ms to one day",
                self.per
            )));
        }
        Ok(())
    }

    /// The period in ms.
    pub(crate) fn per_ms(&self) -> u64 {
        self.per.as_millis() as u64
    }

    /// The form stored in a topic's meta: `<n>/<period ms>`.
    pub(crate) fn wire(&self) -> String {
        format!("{}/{}", self.n, self.per_ms())
    }

    /// Parses the stored form `<n>/<period ms>`; None when it is not one.
    pub(crate) fn from_wire(s: &str) -> Option<Rate> {
        let (n, p) = s.split_once('/')?;
        let r = Rate {
            n: n.parse().ok()?,
            per: Duration::from_millis(p.parse().ok()?),
        };
        r.check().ok().map(|_| r)
    }

    /// The default burst: a tenth of a second's worth, at least 1 (as the
    /// claim script computes it).
    pub(crate) fn default_burst(&self) -> u32 {
        ((self.n as u64 * 100) / self.per_ms()).max(1) as u32
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.per_ms();
        match ms {
            1000 => write!(f, "{}/s", self.n),
            60_000 => write!(f, "{}/m", self.n),
            3_600_000 => write!(f, "{}/h", self.n),
            _ if ms.is_multiple_of(3_600_000) => write!(f, "{}/{}h", self.n, ms / 3_600_000),
            _ if ms.is_multiple_of(60_000) => write!(f, "{}/{}m", self.n, ms / 60_000),
            _ if ms.is_multiple_of(1000) => write!(f, "{}/{}s", self.n, ms / 1000),
            _ => write!(f, "{}/{}ms", self.n, ms),
        }
    }
}

impl FromStr for Rate {
    type Err = Error;

    fn from_str(s: &str) -> Result<Rate> {
        let bad = || {
            Error::invalid(format!(
                "invalid rate {s:?}: give <count>/<period>, e.g. 200/s, 30/m, 5/h or 3/500ms"
            ))
        };
        let (n, p) = s.trim().split_once('/').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let p = p.trim();
        let digits = p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len());
        let (count, unit) = p.split_at(digits);
        let count: u64 = if count.is_empty() {
            1
        } else {
            count.parse().map_err(|_| bad())?
        };
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" | "sec" | "second" => 1000,
            "m" | "min" | "minute" => 60_000,
            "h" | "hour" => 3_600_000,
            _ => return Err(bad()),
        };
        let per = Duration::from_millis(count.checked_mul(unit_ms).ok_or_else(bad)?);
        Rate::new(n, per)
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A topic's limits ([`crate::Queue::set_limits`]): at most `rate` claims
/// (with a `burst`), and at most `max_running` jobs running at once. `None`
/// is no limit (for `burst`: a tenth of a second's worth of the rate, at
/// least 1).
///
/// ```
/// use punctual::Limits;
/// let l = Limits::default().rate("200/s".parse()?).burst(20).max_running(50);
/// assert_eq!(l.to_string(), "rate 200/s, burst 20, max running 50");
/// assert_eq!(Limits::default().to_string(), "none");
/// # Ok::<(), punctual::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Limits {
    /// Claims per period, for the whole topic.
    pub rate: Option<Rate>,
    /// Bucket size: how many claims may follow each other at once.
    pub burst: Option<u32>,
    /// Most jobs in `running` at once.
    pub max_running: Option<u32>,
}

impl Limits {
    /// With this rate.
    ///
    /// ```
    /// let l = punctual::Limits::default().rate("10/s".parse()?);
    /// assert_eq!(l.rate.unwrap().n, 10);
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn rate(mut self, r: Rate) -> Self {
        self.rate = Some(r);
        self
    }

    /// With this burst (needs a rate).
    ///
    /// ```
    /// let l = punctual::Limits::default().rate("10/s".parse()?).burst(3);
    /// assert_eq!(l.burst, Some(3));
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn burst(mut self, n: u32) -> Self {
        self.burst = Some(n);
        self
    }

    /// With at most `n` jobs running at once.
    ///
    /// ```
    /// let l = punctual::Limits::default().max_running(4);
    /// assert_eq!(l.max_running, Some(4));
    /// ```
    pub fn max_running(mut self, n: u32) -> Self {
        self.max_running = Some(n);
        self
    }

    /// Whether no limit is set.
    ///
    /// ```
    /// assert!(punctual::Limits::default().is_none());
    /// assert!(!punctual::Limits::default().max_running(1).is_none());
    /// ```
    pub fn is_none(&self) -> bool {
        self.rate.is_none() && self.max_running.is_none()
    }

    /// Checks the values (the library calls it before writing them).
    ///
    /// ```
    /// let l = punctual::Limits::default().burst(5);
    /// assert!(l.validate().is_err()); // a burst without a rate
    /// assert!(punctual::Limits::default().max_running(0).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        if let Some(r) = &self.rate {
            r.check()?;
        }
        match self.burst {
            Some(_) if self.rate.is_none() => {
                return Err(Error::invalid(
                    "a burst needs a rate: give --rate too (or leave the burst out)",
                ))
            }
            Some(b) if b == 0 || b > MAX_LIMIT => {
                return Err(Error::invalid(format!(
                    "invalid burst {b}: give 1 to {MAX_LIMIT}"
                )))
            }
            _ => {}
        }
        if let Some(m) = self.max_running {
            if m == 0 || m > MAX_LIMIT {
                return Err(Error::invalid(format!(
                    "invalid max running {m}: give 1 to {MAX_LIMIT}"
                )));
            }
        }
        Ok(())
    }

    /// The share of one of `k` partitions: each count divided by `k`,
    /// rounded up (so the topic's limits hold in total to within the
    /// rounding).
    pub(crate) fn per_partition(&self, k: u32) -> Limits {
        let div = |n: u32| n.div_ceil(k.max(1));
        Limits {
            rate: self.rate.map(|r| Rate {
                n: div(r.n),
                per: r.per,
            }),
            burst: self.burst.map(div),
            max_running: self.max_running.map(div),
        }
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(r) = &self.rate {
            parts.push(format!("rate {r}"));
            match self.burst {
                Some(b) => parts.push(format!("burst {b}")),
                None => parts.push(format!("burst {} (default)", r.default_burst())),
            }
        }
        if let Some(m) = self.max_running {
            parts.push(format!("max running {m}"));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// Which limit holds a topic's ready jobs back right now
/// ([`crate::TopicStats::limited`]).
///
/// ```
/// use punctual::Limited;
/// assert_eq!(Limited::MaxRunning.as_str(), "max_running");
/// assert_eq!(Limited::Rate.to_string(), "rate");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Limited {
    /// The bucket has no whole token: the next claim waits for one.
    Rate,
    /// `max_running` jobs are running: the next claim waits for one to end.
    MaxRunning,
}

impl Limited {
    /// The name used on the wire and in `stats`: `rate` or `max_running`.
    ///
    /// ```
    /// assert_eq!(punctual::Limited::Rate.as_str(), "rate");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            Limited::Rate => "rate",
            Limited::MaxRunning => "max_running",
        }
    }

    pub(crate) fn from_wire(s: &str) -> Option<Limited> {
        match s {
            "rate" => Some(Limited::Rate),
            "max_running" => Some(Limited::MaxRunning),
            _ => None,
        }
    }
}

impl fmt::Display for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_show() {
        for (s, n, ms, shown) in [
            ("200/s", 200, 1000, "200/s"),
            ("30/m", 30, 60_000, "30/m"),
            ("5/h", 5, 3_600_000, "5/h"),
            ("3/500ms", 3, 500, "3/500ms"),
            ("7/10s", 7, 10_000, "7/10s"),
            (" 1 / 2m ", 1, 120_000, "1/2m"),
        ] {
            let r: Rate = s.parse().unwrap();
            assert_eq!((r.n, r.per_ms()), (n, ms), "{s}");
            assert_eq!(r.to_string(), shown);
            assert_eq!(Rate::from_wire(&r.wire()), Some(r));
        }
        for bad in [
            "", "5", "0/s", "5/0s", "5/d", "-1/s", "5/2d", "1/25h", "x/s",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn partitions_share_the_limits_rounded_up() {
        let l = Limits::default()
            .rate("10/s".parse().unwrap())
            .burst(4)
            .max_running(5);
        let p = l.per_partition(3);
        assert_eq!(p.rate.unwrap().n, 4);
        assert_eq!((p.burst, p.max_running), (Some(2), Some(2)));
        assert_eq!(l.per_partition(1), l);
    }

    #[test]
    fn default_burst_is_a_tenth_of_a_second_at_least_one() {
        assert_eq!("200/s".parse::<Rate>().unwrap().default_burst(), 20);
        assert_eq!("5/s".parse::<Rate>().unwrap().default_burst(), 1);
        assert_eq!("60/m".parse::<Rate>().unwrap().default_burst(), 1);
    }
}
