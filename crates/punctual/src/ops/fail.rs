//! `fail` (lua/fail.lua): an attempt failed, expired unstarted or is
//! handed back, fenced by its lease. Its arguments, its reply, and its
//! resend rule: it may run twice (a second run finds the lease gone and
//! is refused).

use std::time::Duration;

use crate::error::Result;
use crate::lease::{Lease, Partition};
use crate::queue::Queue;
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// How [`fail`] treats the attempt.
///
/// ```
/// use std::time::Duration;
/// use punctual::raw::FailKind;
/// let later = FailKind::Retry { after: Some(Duration::from_secs(60)) };
/// assert_ne!(later, FailKind::Permanent);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// Retry: after `after`, or the topic's backoff ladder when None; to
    /// dead anyway when the attempts are used up.
    Retry {
        /// The delay before the next attempt.
        after: Option<Duration>,
    },
    /// A permanent failure: to dead now.
    Permanent,
}

/// What [`fail`] did.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// use punctual::raw::{fail, FailKind, Failed};
/// if fail(&queue, &part, &job.lease(), "bad input", FailKind::Permanent).await? == Failed::Dead {
///     println!("{} is in the dead-letter set", job.id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failed {
    /// Back in pool (or ready), to be retried.
    Retry,
    /// Moved to dead: permanent failure or attempts used up.
    Dead,
    /// Refused: the lease is no longer this caller's.
    Stale,
    /// Handed back unstarted ([`hand_back`]): in ready again, its attempt
    /// not counted.
    Back,
}

/// Fails an attempt, fenced by the lease: retried (after the given delay or
/// the backoff ladder) or moved to dead (permanent, or the attempts are
/// used up). `error` is kept as the job's last error.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// use punctual::raw::{FailKind, Failed};
/// let kind = FailKind::Retry { after: None };
/// match punctual::raw::fail(&queue, &part, &job.lease(), "card declined", kind).await? {
///     Failed::Retry | Failed::Dead => {}
///     Failed::Stale => println!("someone else holds it now"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
pub async fn fail(
    queue: &Queue,
    part: &Partition,
    lease: &Lease,
    error: &str,
    kind: FailKind,
) -> Result<Failed> {
    let (after, permanent) = match kind {
        FailKind::Retry { after } => (after, false),
        FailKind::Permanent => (None, true),
    };
    let delay = after
        .map(|d| crate::job::ceil_ms(d.min(crate::job::MAX_DELAY)).to_string())
        .unwrap_or_default();
    fail_as(
        queue,
        part,
        lease,
        error,
        &delay,
        if permanent { "1" } else { "0" },
    )
    .await
}

/// Sends a leased job whose expiry ([`crate::Job::expire`]) passed before
/// its handler started to dead, as the claim would have: `error` kept as
/// its last error, counted in the topic's `expired` and `dead`. Fenced
/// like [`fail`].
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// let r = punctual::raw::fail_expired(&queue, &part, &job.lease(), "expired: held past its deadline").await?;
/// assert!(matches!(r, punctual::raw::Failed::Dead | punctual::raw::Failed::Stale));
/// # Ok(()) }
/// ```
pub async fn fail_expired(
    queue: &Queue,
    part: &Partition,
    lease: &Lease,
    error: &str,
) -> Result<Failed> {
    fail_as(queue, part, lease, error, "", "2").await
}

/// Hands a leased job that no handler started back: to ready at once (at
/// its due time's place), its attempt not counted, its last error kept.
/// Fenced like [`fail`]; [`Failed::Back`] when done.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// use std::time::Duration;
/// use punctual::{raw::{self, Failed}, Job};
/// queue.enqueue("mail", Job::new("a").id("a")).await?;
/// let part: raw::Partition = "mail".parse()?;
/// let job = raw::claim(&queue, &part, 1, Duration::from_secs(30)).await?.remove(0);
/// assert_eq!(raw::hand_back(&queue, &part, &job.lease()).await?, Failed::Back);
/// // Claimed again, it is still its first attempt.
/// let again = raw::claim(&queue, &part, 1, Duration::from_secs(30)).await?.remove(0);
/// assert_eq!((again.id.as_str(), again.attempt), ("a", 1));
/// # Ok(()) }
/// ```
pub async fn hand_back(queue: &Queue, part: &Partition, lease: &Lease) -> Result<Failed> {
    fail_as(queue, part, lease, "", "", "3").await
}

async fn fail_as(
    queue: &Queue,
    part: &Partition,
    lease: &Lease,
    error: &str,
    delay: &str,
    kind: &str,
) -> Result<Failed> {
    let v = queue
        .run(&SCRIPTS.fail, part.as_str(), |inv| {
            inv.arg(&lease.id)
                .arg(lease.token)
                .arg(error)
                .arg(delay)
                .arg(kind);
        })
        .await?;
    let mut r = Reply::new("fail", v)?;
    Ok(match r.string()?.as_str() {
        "retry" => Failed::Retry,
        "dead" => Failed::Dead,
        "back" => Failed::Back,
        _ => Failed::Stale,
    })
}
