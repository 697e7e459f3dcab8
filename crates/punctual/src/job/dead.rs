//! Which dead jobs to replay or purge, and how a replay is paced.

use std::time::Duration;

use super::when::MAX_DELAY;
use crate::error::{Error, Result};

/// Which dead jobs to replay or purge.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::DeadSelector;
/// queue.dead_replay("orders", DeadSelector::Ids(vec!["order:1".into()])).await?;
/// queue.dead_replay("orders", DeadSelector::Oldest(100)).await?;
/// queue.dead_purge("orders", DeadSelector::All).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DeadSelector {
    /// These ids.
    Ids(Vec<String>),
    /// The oldest n.
    Oldest(usize),
    /// All of them (purge only; replays all in batches).
    All,
}

/// When replayed dead jobs become due ([`crate::Queue::dead_replay_paced`]).
///
/// The pacing is in the jobs' due times (Redis's clock, read once at the
/// start): paced jobs wait in pool, so it holds without the caller staying
/// alive, and a scheduler releases them.
///
/// ```
/// use std::time::Duration;
/// use punctual::ReplayPace;
///
/// let pace = ReplayPace::Rate { jobs: 100, per: Duration::from_secs(1) };
/// assert_eq!(pace.offset(250, 50_000), Duration::from_millis(2500));
/// let pace = ReplayPace::Spread(Duration::from_secs(600));
/// assert_eq!(pace.offset(1, 600), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplayPace {
    /// Every job due now, in ready.
    #[default]
    Now,
    /// `jobs` per `per`: the i-th job replayed (from 0) is due
    /// i × per / jobs after the start.
    Rate {
        /// Jobs per `per` (at least 1).
        jobs: u64,
        /// The period (at least 1 ms).
        per: Duration,
    },
    /// Evenly over this window: the i-th of n is due i × window / n after
    /// the start (the last one a step before the window ends).
    Spread(Duration),
}

impl ReplayPace {
    /// How long after the start the `i`-th (from 0) of `n` jobs is due.
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::ReplayPace;
    /// assert_eq!(ReplayPace::Now.offset(999, 1000), Duration::ZERO);
    /// let pace = ReplayPace::Spread(Duration::from_secs(100));
    /// assert_eq!(pace.offset(3, 10), Duration::from_secs(30));
    /// ```
    pub fn offset(&self, i: usize, n: usize) -> Duration {
        let ms = match *self {
            ReplayPace::Now => 0,
            ReplayPace::Rate { jobs, per } => i as u128 * per.as_millis() / u128::from(jobs.max(1)),
            ReplayPace::Spread(window) => i as u128 * window.as_millis() / (n.max(1) as u128),
        };
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// The pacing as a user writes it, for messages and the audit trail:
    /// `("rate", "100/s")`, `("rate", "50/10s")`, `("spread", "10m")`;
    /// `None` for [`ReplayPace::Now`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::ReplayPace;
    /// let pace = ReplayPace::Rate { jobs: 100, per: Duration::from_secs(1) };
    /// assert_eq!(pace.describe(), Some(("rate", "100/s".to_string())));
    /// let pace = ReplayPace::Rate { jobs: 50, per: Duration::from_secs(10) };
    /// assert_eq!(pace.describe(), Some(("rate", "50/10s".to_string())));
    /// let pace = ReplayPace::Spread(Duration::from_secs(600));
    /// assert_eq!(pace.describe(), Some(("spread", "10m".to_string())));
    /// assert_eq!(ReplayPace::Now.describe(), None);
    /// ```
    pub fn describe(&self) -> Option<(&'static str, String)> {
        match *self {
            ReplayPace::Now => None,
            ReplayPace::Rate { jobs, per } => {
                let per = exact_span(per);
                let per = per
                    .strip_prefix("1")
                    .filter(|u| u.starts_with(|c: char| c.is_ascii_alphabetic()))
                    .map(str::to_string)
                    .unwrap_or(per);
                Some(("rate", format!("{jobs}/{per}")))
            }
            ReplayPace::Spread(window) => Some(("spread", exact_span(window))),
        }
    }

    /// Checks the pacing: a rate of at least one job per period of at least
    /// 1 ms, a window of at least 1 ms, at most ten years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use punctual::ReplayPace;
    /// assert!(ReplayPace::Rate { jobs: 10, per: Duration::from_secs(1) }.validate().is_ok());
    /// assert!(ReplayPace::Rate { jobs: 0, per: Duration::from_secs(1) }.validate().is_err());
    /// assert!(ReplayPace::Spread(Duration::ZERO).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        match *self {
            ReplayPace::Now => Ok(()),
            ReplayPace::Rate { jobs, per } => {
                if jobs == 0 || per < Duration::from_millis(1) || per > MAX_DELAY {
                    return Err(Error::invalid(
                        "replay rate must be at least one job per period of 1 ms to ten years",
                    ));
                }
                Ok(())
            }
            ReplayPace::Spread(w) => {
                if w < Duration::from_millis(1) || w > MAX_DELAY {
                    return Err(Error::invalid("replay spread must be 1 ms to ten years"));
                }
                Ok(())
            }
        }
    }
}

/// A duration in its largest whole unit (`10m`, `90s`, `1500ms`), as
/// `--delay`, `--spread` and rates parse it back.
fn exact_span(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}
