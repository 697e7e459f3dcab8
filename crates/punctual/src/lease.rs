//! What the runtime's calls ([`crate::raw`]) name: a [`Partition`], and a
//! job by its [`Lease`]. A leaf: the operations in `ops/` and `raw.rs` take
//! these from here.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::partition::{partition_name, MAX_PARTITIONS};

/// The name a low-level call takes: a topic (`orders`), or one partition of
/// a partitioned topic (`orders#2`). Checked when made, so a call cannot
/// name keys that no topic has.
///
/// ```
/// use punctual::raw::Partition;
/// let p: Partition = "orders#2".parse()?;
/// assert_eq!((p.topic(), p.index()), ("orders", Some(2)));
/// assert_eq!(Partition::of("orders", 2, 3)?, p);
/// assert_eq!(Partition::of("orders", 0, 1)?.as_str(), "orders");
/// assert!("orders#x".parse::<Partition>().is_err());
/// assert!("orders#1024".parse::<Partition>().is_err());
/// # Ok::<(), punctual::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition(String);

impl Partition {
    /// Partition `i` of `topic` among `k` (the topic itself when `k` is 1).
    ///
    /// ```
    /// use punctual::raw::Partition;
    /// let all: Vec<Partition> = (0..4).map(|i| Partition::of("clicks", i, 4)).collect::<Result<_, _>>()?;
    /// assert_eq!(all[3].as_str(), "clicks#3");
    /// assert!(Partition::of("clicks", 4, 4).is_err());
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn of(topic: &str, i: u32, k: u32) -> Result<Partition> {
        validate_topic(topic)?;
        if k == 0 || k > MAX_PARTITIONS || i >= k {
            return Err(Error::invalid(format!(
                "invalid partition {i} of {k}: give 0 to k-1, with k from 1 to {MAX_PARTITIONS}"
            )));
        }
        Ok(Partition(partition_name(topic, i, k)))
    }

    /// A name taken from this library (a worker's or scheduler's own list),
    /// not checked again.
    pub(crate) fn known(name: impl Into<String>) -> Partition {
        Partition(name.into())
    }

    /// The name, as the keys use it.
    ///
    /// ```
    /// let p = punctual::raw::Partition::of("orders", 1, 2)?;
    /// assert_eq!(p.as_str(), "orders#1");
    /// assert_eq!(punctual::internal::TopicKeys::new("punctual", p.as_str()).pool(), "punctual:{orders#1}:pool");
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The topic this is (a partition of).
    ///
    /// ```
    /// use punctual::raw::Partition;
    /// assert_eq!("orders#5".parse::<Partition>()?.topic(), "orders");
    /// assert_eq!("orders".parse::<Partition>()?.topic(), "orders");
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn topic(&self) -> &str {
        self.0.split_once('#').map_or(&self.0, |(t, _)| t)
    }

    /// Which partition this is, or None for a topic that is not
    /// partitioned.
    ///
    /// ```
    /// use punctual::raw::Partition;
    /// assert_eq!("orders#5".parse::<Partition>()?.index(), Some(5));
    /// assert_eq!("orders".parse::<Partition>()?.index(), None);
    /// # Ok::<(), punctual::Error>(())
    /// ```
    pub fn index(&self) -> Option<u32> {
        self.0.split_once('#').and_then(|(_, i)| i.parse().ok())
    }
}

impl std::str::FromStr for Partition {
    type Err = Error;

    fn from_str(name: &str) -> Result<Partition> {
        let Some((topic, i)) = name.split_once('#') else {
            validate_topic(name)?;
            return Ok(Partition(name.to_string()));
        };
        validate_topic(topic)?;
        let bad = || {
            Error::invalid(format!(
                "invalid partition {name:?}: give topic#i, with i from 0 to {}",
                MAX_PARTITIONS - 1
            ))
        };
        // Decimal without a sign or leading zeros, as partition_name writes it.
        if i.is_empty()
            || !i.bytes().all(|b| b.is_ascii_digit())
            || (i.len() > 1 && i.starts_with('0'))
        {
            return Err(bad());
        }
        match i.parse::<u32>() {
            Ok(n) if n < MAX_PARTITIONS => Ok(Partition(name.to_string())),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Partition {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A claimed job as the fenced calls name it: its id and the token of the
/// claim. A lease that expired (the job was reclaimed, cancelled or claimed
/// again) is refused.
///
/// ```
/// let lease = punctual::raw::Lease::new("order:10086", 1_700_000_000_000_000);
/// assert_eq!(lease.id, "order:10086");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The job id.
    pub id: String,
    /// The lease token of the claim ([`Delivery::token`](crate::raw::Delivery::token)).
    pub token: i64,
    /// The attempt the claim counted ([`Delivery::attempt`](crate::raw::Delivery::attempt)), or 0 when
    /// unknown ([`Lease::new`]). Only a shortcut: with it, [`ack`](crate::raw::ack) sends
    /// the attempts entry the claim wrote (`0A:T`), which the script checks
    /// with one string comparison; the token alone decides either way.
    pub attempt: u32,
}

impl Lease {
    /// The lease of job `id` claimed with `token`.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition) -> punctual::Result<()> {
    /// use punctual::raw::{ack, Lease};
    /// // Id and token kept from a claim, e.g. by another process.
    /// let (id, token) = ("order:10086".to_string(), 1_700_000_000_000_000);
    /// let acked = ack(&queue, &part, &[Lease::new(id, token)]).await?;
    /// if !acked[0] {
    ///     println!("the lease expired: another attempt may run");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn new(id: impl Into<String>, token: i64) -> Lease {
        Lease {
            id: id.into(),
            token,
            attempt: 0,
        }
    }

    /// The lease of job `id` claimed with `token` as its attempt `attempt`
    /// (what [`Delivery::lease`](crate::raw::Delivery::lease) returns).
    ///
    /// ```
    /// let lease = punctual::raw::Lease::with_attempt("order:10086", 1_700_000_000_000_000, 2);
    /// assert_eq!(lease.attempt, 2);
    /// ```
    pub fn with_attempt(id: impl Into<String>, token: i64, attempt: u32) -> Lease {
        Lease {
            id: id.into(),
            token,
            attempt,
        }
    }
}

/// A lease as the scripts take it: 1 ms to ten years.
pub(crate) fn lease_ms(lease: Duration) -> u64 {
    lease.min(crate::job::MAX_DELAY).as_millis().max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::Partition;

    #[test]
    fn partitions_are_topics_or_topic_hash_index() {
        for ok in ["orders", "orders#0", "orders#7", "orders#1023"] {
            let p: Partition = ok.parse().unwrap();
            assert_eq!(p.as_str(), ok);
            assert_eq!(p.topic(), "orders");
        }
        for bad in [
            "",
            "a{b}",
            "orders#",
            "orders#-1",
            "orders#01",
            "orders#1024",
            "orders#x",
            "#1",
            "orders#1#2",
            "orders #1",
        ] {
            assert!(bad.parse::<Partition>().is_err(), "{bad:?}");
        }
        assert_eq!(Partition::of("orders", 3, 4).unwrap().index(), Some(3));
        assert!(Partition::of("orders", 4, 4).is_err());
        assert!(Partition::of("orders", 0, 0).is_err());
        assert_eq!(Partition::of("orders", 0, 1).unwrap().index(), None);
    }
}
