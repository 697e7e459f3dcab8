//! What one firer pass does with one schedule, computed without Redis:
//! the occurrences to enqueue (missed ones by the catch-up policy) with
//! their due times, and the new watermark.

use super::model::{CatchUp, Schedule};
use super::{AHEAD, LATE_GRACE};
use crate::error::Result;

impl Schedule {
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use std::time::Duration;

    fn ms(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis()
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
}
