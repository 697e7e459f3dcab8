//! `extend` (lua/extend.lua): pushes leases' deadlines back, fenced. Its
//! arguments, its reply, and its resend rule: it may run twice (a deadline
//! never moves earlier).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::{lease_ms, Lease, Partition};
use crate::queue::{Queue, MAX_BATCH};
use crate::scripts::SCRIPTS;

/// Extends leases to now + `lease`, never earlier than they were (a
/// deadline already later stays); returns one flag per lease: extended, or
/// lost (stop working on that job: it was reclaimed or cancelled).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// use std::time::Duration;
/// let held = punctual::raw::extend(&queue, &part, &[job.lease()], Duration::from_secs(30)).await?;
/// if !held[0] {
///     println!("lost the lease of {}", job.id);
/// }
/// # Ok(()) }
/// ```
pub async fn extend(
    queue: &Queue,
    part: &Partition,
    held: &[Lease],
    lease: Duration,
) -> Result<Vec<bool>> {
    let mut flags = Vec::with_capacity(held.len());
    for chunk in held.chunks(MAX_BATCH) {
        let v = queue
            .run(&SCRIPTS.extend, part.as_str(), |inv| {
                inv.arg(lease_ms(lease));
                for l in chunk {
                    inv.arg(&l.id).arg(l.token);
                }
            })
            .await?;
        let f: Vec<i64> =
            redis::from_redis_value(v).map_err(|e| Error::protocol("extend", e.to_string()))?;
        flags.extend(f.into_iter().map(|x| x == 1));
    }
    Ok(flags)
}
