//! `ack` (lua/ack.lua): the jobs are done and deleted, fenced by their
//! leases. Its arguments (pairs, or grouped by token), its reply, and its
//! resend rule: it may run twice (a second run refuses what the first
//! acked).

use crate::error::{Error, Result};
use crate::lease::{Lease, Partition};
use crate::queue::{Queue, MAX_BATCH};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

impl Lease {
    /// The token as `ack` sends it: the attempts entry the claim wrote
    /// (`0A:T`, PROTOCOL.md "Attempts and tokens") when the attempt is
    /// known, else the token alone. Written right to left into `buf`, by
    /// hand: `format!` cost about 1,000 instructions per job (callgrind).
    fn ack_arg<'b>(&self, buf: &'b mut [u8; 32]) -> &'b [u8] {
        // At most 1 + 10 + 1 + 20 bytes ("0" + u32 + ":" + i64): it fits.
        fn digits(buf: &mut [u8; 32], at: &mut usize, mut v: u64) {
            loop {
                *at -= 1;
                buf[*at] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
        }
        let mut at = buf.len();
        digits(buf, &mut at, self.token.unsigned_abs());
        if self.token < 0 {
            at -= 1;
            buf[at] = b'-';
        }
        if self.attempt > 0 {
            at -= 1;
            buf[at] = b':';
            digits(buf, &mut at, u64::from(self.attempt));
            at -= 1;
            buf[at] = b'0';
        }
        &buf[at..]
    }
}

/// How one `ack` call sends its leases. The jobs of one claim share its
/// token, so leases are grouped by the argument their token goes as (the
/// attempts entry, or the token alone): the script's grouped form sends each
/// group's token once and one argument per job, not two (PROTOCOL.md
/// "ack"). Pairs of id and token when that is not shorter (a call of one
/// or two jobs, or of as many tokens as jobs). A lease with an empty id is
/// left out: no job has one (enqueue refuses it), and a first argument ""
/// would read as the grouped form.
struct AckPlan {
    /// The positions of the leases sent, group after group (in the pair
    /// form, as given). The script's i-th id is `order[i - 1]`.
    order: Vec<usize>,
    /// Each group's first place in `order` and its count; empty for pairs.
    groups: Vec<(usize, usize)>,
}

impl AckPlan {
    fn of(leases: &[Lease]) -> AckPlan {
        let sent: Vec<usize> = (0..leases.len())
            .filter(|&i| !leases[i].id.is_empty())
            .collect();
        let mut order = sent.clone();
        // Stable: a group's ids go in the order given.
        order.sort_by_key(|&i| (leases[i].token, leases[i].attempt));
        let mut groups: Vec<(usize, usize)> = Vec::new();
        for (at, &i) in order.iter().enumerate() {
            let key = (leases[i].token, leases[i].attempt);
            match groups.last_mut() {
                Some((first, count))
                    if (leases[order[*first]].token, leases[order[*first]].attempt) == key =>
                {
                    *count += 1
                }
                _ => groups.push((at, 1)),
            }
        }
        // Grouped: "", g, a token and a count per group, the ids.
        if 2 + 2 * groups.len() + order.len() >= 2 * order.len() {
            return AckPlan {
                order: sent,
                groups: Vec::new(),
            };
        }
        AckPlan { order, groups }
    }
}

/// Acks jobs: they are done and deleted. Returns one flag per lease: acked,
/// or refused because the lease is no longer held (a lease with an empty
/// id, which no job has, is refused without being sent). An id given twice
/// with one token is acked once; its other places are refused.
/// (The script replies with the number acked and the positions refused.)
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue, part: punctual::raw::Partition, job: punctual::Delivery) -> punctual::Result<()> {
/// let acked = punctual::raw::ack(&queue, &part, &[job.lease()]).await?;
/// assert_eq!(acked, [true]);
/// # Ok(()) }
/// ```
pub async fn ack(queue: &Queue, part: &Partition, done: &[Lease]) -> Result<Vec<bool>> {
    let mut flags = Vec::with_capacity(done.len());
    for chunk in done.chunks(MAX_BATCH) {
        let plan = AckPlan::of(chunk);
        let start = flags.len();
        flags.resize(start + chunk.len(), false);
        if plan.order.is_empty() {
            continue;
        }
        let v = queue
            .run(&SCRIPTS.ack, part.as_str(), |inv| {
                let mut buf = [0u8; 32];
                if plan.groups.is_empty() {
                    for &i in &plan.order {
                        inv.arg(&chunk[i].id).arg(chunk[i].ack_arg(&mut buf));
                    }
                } else {
                    inv.arg("").arg(plan.groups.len());
                    for &(first, count) in &plan.groups {
                        inv.arg(chunk[plan.order[first]].ack_arg(&mut buf))
                            .arg(count);
                    }
                    for &i in &plan.order {
                        inv.arg(&chunk[i].id);
                    }
                }
            })
            .await?;
        let mut r = Reply::new("ack", v)?;
        let acked = r.int()?;
        for &i in &plan.order {
            flags[start + i] = true;
        }
        let mut refused = 0;
        while !r.is_empty() {
            match r.int()? {
                p if p >= 1 && p as usize <= plan.order.len() => {
                    flags[start + plan.order[p as usize - 1]] = false
                }
                p => {
                    return Err(Error::protocol(
                        "ack",
                        format!("a refused position {p} out of range"),
                    ))
                }
            }
            refused += 1;
        }
        if acked + refused != plan.order.len() as i64 {
            return Err(Error::protocol(
                "ack",
                "the counts do not add up to the jobs given",
            ));
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::{AckPlan, Lease};

    #[test]
    fn ack_args_are_the_attempts_entry_or_the_token() {
        let mut buf = [0u8; 32];
        let l = Lease::with_attempt("a", 1_700_000_000_000_000, 3);
        assert_eq!(l.ack_arg(&mut buf), b"03:1700000000000000");
        assert_eq!(Lease::new("a", -5).ack_arg(&mut buf), b"-5");
        let widest = Lease::with_attempt("a", i64::MIN, u32::MAX);
        assert_eq!(
            widest.ack_arg(&mut buf),
            b"04294967295:-9223372036854775808"
        );
    }

    #[test]
    fn acks_of_jobs_sharing_a_token_go_grouped_and_small_ones_in_pairs() {
        let l = |id: &str, token, attempt| Lease::with_attempt(id, token, attempt);
        // Two claims' jobs interleaved, one of them on its second attempt:
        // 2 + 2 * 3 + 9 = 17 arguments instead of 18.
        let leases = [
            l("a", 9, 1),
            l("b", 7, 1),
            l("c", 9, 1),
            l("d", 7, 1),
            l("e", 9, 2),
            l("f", 7, 1),
            l("g", 9, 1),
            l("h", 7, 1),
            l("i", 9, 1),
        ];
        let plan = AckPlan::of(&leases);
        assert_eq!(plan.order, [1, 3, 5, 7, 0, 2, 6, 8, 4]);
        assert_eq!(plan.groups, [(0, 4), (4, 4), (8, 1)]);
        // Without the last job, pairs are as short: 16 arguments either way.
        let plan = AckPlan::of(&leases[..8]);
        assert!(plan.groups.is_empty());
        assert_eq!(plan.order, (0..8).collect::<Vec<_>>());
        // One token: grouped from five jobs on (9 arguments against 10).
        let one = |n: usize| AckPlan::of(&vec![l("x", 1, 1); n]).groups;
        assert!(one(4).is_empty());
        assert_eq!(one(5), [(0, 5)]);
        assert_eq!(one(1000), [(0, 1000)]);
        assert!(one(0).is_empty());
        // Empty ids are left out, in either form.
        let plan = AckPlan::of(&[l("", 1, 1), l("a", 1, 1), l("", 2, 1)]);
        assert_eq!((plan.order, plan.groups), (vec![1], vec![]));
        let mut six = vec![l("x", 1, 1); 6];
        six[0].id.clear();
        let plan = AckPlan::of(&six);
        assert_eq!(plan.order, [1, 2, 3, 4, 5]);
        assert_eq!(plan.groups, [(0, 5)]);
        assert!(AckPlan::of(&[l("", 1, 1)]).order.is_empty());
        // The token alone (attempt unknown) is a group of its own.
        let plan = AckPlan::of(&[vec![l("x", 1, 0); 5], vec![l("y", 1, 1); 5]].concat());
        assert_eq!(plan.groups, [(0, 5), (5, 5)]);
    }
}
