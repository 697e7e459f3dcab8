//! The cancel listener: an operator's cancel of a running job reaches its
//! run.

use std::sync::Arc;

use super::shared::Shared;

/// What the cancel channel of topic entry `name` goes to: a message
/// `<token>:<id>` fires the `cancelled` token of the run this process holds
/// under that id and token, if any (docs/PROTOCOL.md "cancel").
pub(super) fn on_cancel(shared: &Arc<Shared>, name: &str) -> crate::wake::OnMessage {
    let ti = shared
        .topics
        .iter()
        .position(|t| t.name == name)
        .expect("a topic entry of this worker");
    let shared = Arc::downgrade(shared);
    Arc::new(move |msg| {
        let Some((token, id)) = msg.and_then(parse_cancel) else {
            return;
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let inflight = shared.inflight.lock().unwrap();
        if let Some((t, run)) = inflight[ti].get(id) {
            if *t == token {
                run.cancelled.cancel();
            }
        }
    })
}

/// A cancel message: `<token>:<id>`.
fn parse_cancel(msg: &[u8]) -> Option<(i64, &str)> {
    let msg = std::str::from_utf8(msg).ok()?;
    let (token, id) = msg.split_once(':')?;
    Some((token.parse().ok()?, id))
}

#[cfg(test)]
mod tests {
    use super::parse_cancel;

    #[test]
    fn a_cancel_message_is_the_token_then_the_whole_id() {
        assert_eq!(
            parse_cancel(b"1764530000000123:order:10086"),
            Some((1764530000000123, "order:10086"))
        );
        assert_eq!(parse_cancel(b"7: spaced id "), Some((7, " spaced id ")));
        assert_eq!(parse_cancel(b"order:10086"), None);
        assert_eq!(parse_cancel(b"12"), None);
        assert_eq!(parse_cancel(b"\xff:x"), None);
    }
}
