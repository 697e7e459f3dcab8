//! `tick` (lua/tick.lua): the scheduler's step, reclaiming expired leases
//! and promoting due jobs. Its arguments, its reply, and its resend rule: it
//! may run twice (a second run finds less to do).

use std::time::Duration;

use crate::error::Result;
use crate::lease::Partition;
use crate::queue::{Queue, MAX_BATCH, MAX_SAFE};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// The batch limits of one [`tick`]. The default is the scheduler's.
///
/// ```
/// let limits = punctual::raw::TickLimits { max_ready: 1_000, ..Default::default() };
/// assert_eq!(limits.promote_batch, 200);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickLimits {
    /// Most jobs promoted from pool to ready (1 to 1,000).
    pub promote_batch: usize,
    /// Promotion stops while ready holds this many jobs.
    pub max_ready: usize,
    /// Most expired leases reclaimed (1 to 1,000).
    pub reclaim_batch: usize,
}

impl Default for TickLimits {
    fn default() -> Self {
        TickLimits::from(&crate::SchedulerConfig::default())
    }
}

impl From<&crate::SchedulerConfig> for TickLimits {
    fn from(c: &crate::SchedulerConfig) -> Self {
        TickLimits {
            promote_batch: c.promote_batch,
            max_ready: c.max_ready,
            reclaim_batch: c.reclaim_batch,
        }
    }
}

/// What one scheduler tick did ([`tick`]).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
/// use punctual::raw::{tick, TickLimits};
/// // Tick until nothing is left to do now, then sleep until the next due job.
/// loop {
///     let t = tick(&queue, &part, &TickLimits::default()).await?;
///     if !t.more {
///         let nap = t.next_due.unwrap_or(std::time::Duration::from_secs(1));
///         tokio::time::sleep(nap.min(std::time::Duration::from_secs(1))).await;
///     }
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Tick {
    /// Jobs moved from pool to ready.
    pub promoted: u64,
    /// Expired leases moved back to pool (or ready) for another attempt.
    pub reclaimed: u64,
    /// Expired leases whose attempts were used up, moved to dead.
    pub dead: u64,
    /// Promotion was refused because ready holds `max_ready` jobs.
    pub refused: bool,
    /// A batch limit was hit: tick again now.
    pub more: bool,
    /// Time until the next due job in pool, or until the next move of a
    /// cold bucket into pool when that is earlier, by Redis's clock.
    pub next_due: Option<Duration>,
    /// Time until the next lease deadline, by Redis's clock.
    pub next_lease: Option<Duration>,
}

/// One scheduler step on `part`: reclaim expired leases, then promote due
/// jobs, at most a batch of each.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
/// let t = punctual::raw::tick(&queue, &part, &Default::default()).await?;
/// println!("promoted {}, next due in {:?}", t.promoted, t.next_due);
/// # Ok(()) }
/// ```
pub async fn tick(queue: &Queue, part: &Partition, limits: &TickLimits) -> Result<Tick> {
    Ok(tick_with_grace(queue, part, limits, Duration::ZERO)
        .await?
        .0)
}

/// [`tick`] that, on a topic without groups, promotes only jobs due more
/// than `grace` ago (workers claim due jobs from the pool themselves; the
/// scheduler promotes what they left). `next_due` is then the time until
/// the earliest due time plus the grace, to the µs. Also returns the tick's
/// Redis time (µs) and when its reply arrived, to map Redis times to the
/// caller's clock.
pub(crate) async fn tick_with_grace(
    queue: &Queue,
    part: &Partition,
    limits: &TickLimits,
    grace: Duration,
) -> Result<(Tick, Option<(i64, std::time::Instant)>)> {
    let v = queue
        .run(&SCRIPTS.tick, part.as_str(), |inv| {
            inv.arg(limits.promote_batch.clamp(1, MAX_BATCH))
                .arg(limits.max_ready.clamp(1, MAX_SAFE))
                .arg(limits.reclaim_batch.clamp(1, MAX_BATCH))
                .arg(grace.as_millis().min(60_000) as u64);
        })
        .await?;
    let received = std::time::Instant::now();
    let mut r = Reply::new("tick", v)?;
    let ms = |v: i64| (v >= 0).then(|| Duration::from_millis(v as u64));
    let mut t = Tick {
        promoted: r.int()? as u64,
        reclaimed: r.int()? as u64,
        dead: r.int()? as u64,
        refused: r.int()? == 1,
        more: r.int()? == 1,
        next_due: ms(r.int()?),
        next_lease: ms(r.int()?),
    };
    // The next due time to the µs (not whole ms, which a sleep rounds up).
    let mut clock = None;
    if !r.is_empty() {
        let us = r.int()?;
        t.next_due = (us >= 0).then(|| Duration::from_micros(us as u64));
        clock = Some((r.int()?, received));
    }
    Ok((t, clock))
}
