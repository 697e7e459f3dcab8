//! When a schedule occurs: its occurrences after a time, the next one,
//! and the latest at or before a time, in its time zone (DST included).

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;

use super::model::{parse_cron, parse_tz, Schedule};
use crate::error::{Error, Result};

impl Schedule {
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
    pub(super) fn latest_at_or_before(&self, at_ms: i64) -> Result<Option<i64>> {
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
}

fn from_ms(tz: Tz, ms: i64) -> Result<DateTime<Tz>> {
    tz.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| Error::invalid(format!("time {ms} ms is out of range")))
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
}
