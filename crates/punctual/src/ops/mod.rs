//! One file per operation: each owns its script's arguments, the parsing of
//! its reply, and whether a call of it may be sent twice (`conn.rs` asks
//! [`must_not_repeat`]). The runtime's calls ([`crate::raw`]: claim, ack,
//! fail, extend, tick) are re-exported there; enqueue and cancel are
//! [`Queue`](crate::Queue) methods.

use redis::Script;

use crate::scripts::SCRIPTS;

pub(crate) mod ack;
pub(crate) mod cancel;
pub(crate) mod claim;
pub(crate) mod enqueue;
pub(crate) mod extend;
pub(crate) mod fail;
pub(crate) mod tick;

/// An operation's resend rule: whether a call with these ARGV could do harm
/// if it ran twice.
type ResendRule = fn(&[&[u8]]) -> bool;

/// Whether a call of the script whose SHA is `sha` could do harm if it ran
/// twice, by the rule of the operation that owns it; `argv` is None when
/// the call does not parse (then it counts as unsafe). A script not listed
/// here may run twice; a new script that may not must be added.
pub(crate) fn must_not_repeat(sha: &[u8], argv: Option<&[&[u8]]>) -> bool {
    let s = &*SCRIPTS;
    let rules: [(&Script, ResendRule); 3] = [
        (&s.claim, claim::must_not_repeat),
        (&s.cancel, cancel::must_not_repeat),
        (&s.enqueue, enqueue::must_not_repeat),
    ];
    rules
        .iter()
        .find(|(script, _)| script.get_hash().as_bytes() == sha)
        .is_some_and(|(_, rule)| argv.is_none_or(rule))
}
