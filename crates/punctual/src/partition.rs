//! Partitioned topics: a topic too hot for one shard is split into k
//! partitions `T#0` ... `T#k-1`, each with its own hash tag (so its own
//! cluster slot). An id always maps to the same partition: `crc32(id) mod k`
//! (IEEE CRC-32, as zlib's `crc32` and PHP's `crc32()` compute it), so dedup
//! and lookups by id still work. The count lives in Redis, in the hash
//! `P:partitions` (topic -> k; absent means 1), so every producer routes alike.

use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;

/// Most partitions a topic may have.
///
/// ```
/// use punctual::{raw::Partition, MAX_PARTITIONS};
/// assert!(Partition::of("orders", MAX_PARTITIONS - 1, MAX_PARTITIONS).is_ok());
/// assert!(Partition::of("orders", 0, MAX_PARTITIONS + 1).is_err());
/// ```
pub const MAX_PARTITIONS: u32 = 1024;

/// The partition of `id` among `k`.
///
/// ```
/// assert_eq!(punctual::internal::partition_of("order:10086", 1), 0);
/// let p = punctual::internal::partition_of("order:10086", 3);
/// assert!(p < 3);
/// assert_eq!(p, punctual::internal::partition_of("order:10086", 3));
/// ```
pub fn partition_of(id: &str, k: u32) -> u32 {
    if k <= 1 {
        return 0;
    }
    crc32fast::hash(id.as_bytes()) % k
}

/// The name of partition `i` of `topic` among `k`: the topic itself when it
/// is not partitioned (`k` = 1), else `topic#i`. The low-level calls of
/// [`crate::raw`] take these names as a checked [`crate::raw::Partition`].
///
/// ```
/// assert_eq!(punctual::internal::partition_name("orders", 0, 1), "orders");
/// assert_eq!(punctual::internal::partition_name("orders", 2, 3), "orders#2");
/// ```
pub fn partition_name(topic: &str, i: u32, k: u32) -> String {
    if k <= 1 {
        topic.to_string()
    } else {
        format!("{topic}#{i}")
    }
}

/// A generated id for a partitioned topic, made by the client because the
/// id picks the partition: 9 base-36 digits of the time (ms) and 12 random
/// ones (62 bits), so ids sort by creation time and do not collide.
pub(crate) fn generate_id() -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut out = vec![b'0'; 21];
    let mut n = ms;
    for i in (0..9).rev() {
        out[i] = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    let mut rng = rand::rng();
    for b in out.iter_mut().skip(9) {
        *b = DIGITS[rng.random_range(0..36)];
    }
    String::from_utf8(out).expect("ascii")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_spread_over_partitions_and_generated_ids_are_unique() {
        let mut counts = [0u32; 3];
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3000 {
            let id = generate_id();
            assert_eq!(id.len(), 21);
            counts[partition_of(&id, 3) as usize] += 1;
            assert!(seen.insert(id));
        }
        assert!(counts.iter().all(|c| *c > 800), "{counts:?}");
        // The documented function: IEEE CRC-32, as zlib computes it.
        assert_eq!(
            crc32fast::hash(b"order:10086") % 7,
            partition_of("order:10086", 7)
        );
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }
}
