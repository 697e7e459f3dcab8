//! `QueueBuilder::connect`: checks the settings and opens the connection,
//! handing it the operations' resend rule ([`crate::ops::must_not_repeat`]).
//! It stands apart from `mod.rs` because it alone knows both the connection
//! and the operations: `conn.rs` knows no operation, and the operations
//! know `Queue`, so nothing loops.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::{Inner, Queue, QueueBuilder, MAX_BATCH};
use crate::error::{Error, Result};

impl QueueBuilder {
    /// Connects. Fails if Redis does not answer, or at once (without
    /// connecting) if a setting is invalid.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// // Braces would break the keys' hash tags: refused before connecting.
    /// let err = punctual::Queue::builder("redis://127.0.0.1:6379")
    ///     .prefix("a{b}")
    ///     .connect()
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(err.kind(), punctual::ErrorKind::InvalidInput);
    /// # }
    /// ```
    pub async fn connect(self) -> Result<Queue> {
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "invalid prefix {:?}: prefixes must be non-empty and may not contain braces",
                self.prefix
            )));
        }
        if !(1..=MAX_BATCH).contains(&self.enqueue_chunk) {
            return Err(Error::invalid(format!(
                "invalid enqueue_chunk {}: an enqueue script call carries 1 to {MAX_BATCH} jobs",
                self.enqueue_chunk
            )));
        }
        let connected = crate::conn::connect(
            &self.url,
            self.connect_timeout,
            self.response_timeout,
            crate::ops::must_not_repeat,
        )
        .await?;
        Ok(Queue {
            inner: Arc::new(Inner {
                conn: connected.conn,
                pubsub: connected.pubsub,
                cluster: connected.cluster,
                url: self.url,
                prefix: self.prefix,
                max_payload: self.max_payload,
                enqueue_chunk: self.enqueue_chunk,
                loading_wait: self.loading_wait,
                registered: Mutex::new(HashSet::new()),
                skipped_logged: Mutex::new(HashSet::new()),
                partitions: Mutex::new(HashMap::new()),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::scripts::SCRIPTS;

    /// The rule that `connect` hands the connection.
    fn must_not_repeat(cmd: &redis::Cmd) -> bool {
        crate::conn::must_not_repeat(cmd, crate::ops::must_not_repeat)
    }

    fn evalsha<S: AsRef<str>>(sha: &str, argv: &[S]) -> redis::Cmd {
        let mut c = redis::cmd("EVALSHA");
        c.arg(sha).arg(9);
        for k in 0..9 {
            c.arg(format!("k{k}"));
        }
        for a in argv {
            c.arg(a.as_ref());
        }
        c
    }

    #[test]
    fn claims_cancels_and_some_enqueues_are_never_resent_blindly() {
        let claim = SCRIPTS.claim.get_hash();
        let enqueue = SCRIPTS.enqueue.get_hash();
        assert!(must_not_repeat(&evalsha(claim, &["10", "30000"])));
        assert!(must_not_repeat(&evalsha(SCRIPTS.cancel.get_hash(), &["a"])));
        // enqueue's own rule (ops/enqueue.rs) reads its ARGV, after the keys.
        let ids = [
            "1048576", "0", "2", "a", "p", "d0", "", "", "b", "p", "d0", "", "",
        ];
        assert!(!must_not_repeat(&evalsha(enqueue, &ids)), "ids: safe");
        let mut generated = ids;
        generated[8] = "";
        assert!(
            must_not_repeat(&evalsha(enqueue, &generated)),
            "a generated id"
        );
        let mut bad_keys = redis::cmd("EVALSHA");
        bad_keys.arg(enqueue).arg("nine").arg("k");
        assert!(
            must_not_repeat(&bad_keys),
            "a key count that does not parse"
        );
        for safe in [
            "ack",
            "fail",
            "extend",
            "tick",
            "get",
            "stats",
            "reschedule",
            "dead_purge",
            "dead_replay",
        ] {
            let sha = crate::scripts::script_source(safe).map(|s| redis::Script::new(&s));
            let sha = sha.expect("a script").get_hash().to_string();
            assert!(!must_not_repeat(&evalsha(&sha, &["x"])), "{safe}");
        }
        assert!(!must_not_repeat(
            redis::cmd("SADD").arg("P:topics").arg("t")
        ));
    }
}
