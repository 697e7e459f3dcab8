//! Key names and the validation of names that go into them.

use crate::error::{Error, Result};

/// Longest topic name, in bytes.
///
/// ```
/// use punctual::{validate_topic, MAX_TOPIC_LEN};
/// assert!(validate_topic(&"t".repeat(MAX_TOPIC_LEN)).is_ok());
/// assert!(validate_topic(&"t".repeat(MAX_TOPIC_LEN + 1)).is_err());
/// ```
pub const MAX_TOPIC_LEN: usize = 100;
/// Longest job id, in bytes.
///
/// ```
/// use punctual::{validate_id, MAX_ID_LEN};
/// assert!(validate_id(&"i".repeat(MAX_ID_LEN)).is_ok());
/// assert!(validate_id(&"i".repeat(MAX_ID_LEN + 1)).is_err());
/// ```
pub const MAX_ID_LEN: usize = 200;

/// Checks a topic name: 1 to 100 bytes, no braces (they would break the hash
/// tag), no `#` (reserved for partitions), no whitespace or control
/// characters, and no invisible or bidirectional formatting characters (such
/// as U+202E or U+200B), which would let one topic pass for another.
///
/// ```
/// assert!(punctual::validate_topic("orders").is_ok());
/// let err = punctual::validate_topic("a{b}").unwrap_err();
/// assert_eq!(err.to_string(), r#"invalid topic "a{b}": topic names may not contain braces"#);
/// ```
pub fn validate_topic(topic: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("invalid topic {topic:?}: {why}")));
    if topic.is_empty() {
        return bad("topic names may not be empty");
    }
    if topic.len() > MAX_TOPIC_LEN {
        return bad(&format!("topic names are at most {MAX_TOPIC_LEN} bytes"));
    }
    if topic.contains(['{', '}']) {
        return bad("topic names may not contain braces");
    }
    if topic.contains('#') {
        return bad("'#' is reserved for partitions");
    }
    if topic.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("topic names may not contain spaces or control characters");
    }
    if let Some(c) = topic.chars().find(|c| is_invisible(*c)) {
        return bad(&format!(
            "topic names may not contain invisible or bidirectional formatting characters (U+{:04X})",
            c as u32
        ));
    }
    Ok(())
}

/// Characters that show nothing or reorder text: Unicode's format characters
/// (general category Cf: bidi controls and isolates, zero-width characters,
/// the byte order mark, soft hyphen, tags...) and the Hangul fillers. The
/// enqueue script refuses the same list (a test in tests/validation.rs sends
/// it every code point `validate_topic` refuses, and their neighbours).
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{AD}'
        | '\u{600}'..='\u{605}'
        | '\u{61C}'
        | '\u{6DD}'
        | '\u{70F}'
        | '\u{115F}'..='\u{1160}'
        | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}'
        | '\u{FEFF}'
        | '\u{FFA0}'
        | '\u{FFF9}'..='\u{FFFB}'
        | '\u{110BD}'
        | '\u{110CD}'
        | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E007F}'
    )
}

/// Checks a job id: 1 to 200 bytes, no control characters.
///
/// ```
/// assert!(punctual::validate_id("order:10086").is_ok());
/// assert!(punctual::validate_id("").is_err());
/// ```
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid(
            "invalid id \"\": ids may not be empty (leave the id out to have one generated)",
        ));
    }
    if id.len() > MAX_ID_LEN {
        return Err(Error::invalid(format!(
            "invalid id: {} bytes, ids are at most {MAX_ID_LEN} bytes",
            id.len()
        )));
    }
    if id.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "invalid id {id:?}: ids may not contain control characters"
        )));
    }
    Ok(())
}

/// The nine keys of one topic (or of one partition, named `topic#i`), in
/// the order every script takes them: `P:{topic}:pool`, `ready`,
/// `running`, `dead`, `jobs`, `meta`, `stats`, `seq`, `attempts` (see
/// docs/PROTOCOL.md). For tools that look at the keys themselves; jobs are
/// read and changed through [`crate::Queue`].
///
/// ```
/// let k = punctual::internal::TopicKeys::new("punctual", "orders");
/// assert_eq!(k.pool(), "punctual:{orders}:pool");
/// assert_eq!(k.all()[6], "punctual:{orders}:stats");
/// let p = punctual::internal::TopicKeys::new("punctual", &punctual::internal::partition_name("orders", 2, 4));
/// assert_eq!(p.jobs(), "punctual:{orders#2}:jobs");
/// ```
#[derive(Debug, Clone)]
pub struct TopicKeys {
    pub(crate) keys: [String; 9],
}

impl TopicKeys {
    /// The keys of `topic` (a physical name: a topic or one partition)
    /// under `prefix`.
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("myapp", "emails");
    /// assert_eq!(k.ready(), "myapp:{emails}:ready");
    /// ```
    pub fn new(prefix: &str, topic: &str) -> Self {
        let k = |name: &str| format!("{prefix}:{{{topic}}}:{name}");
        TopicKeys {
            keys: [
                k("pool"),
                k("ready"),
                k("running"),
                k("dead"),
                k("jobs"),
                k("meta"),
                k("stats"),
                k("seq"),
                k("attempts"),
            ],
        }
    }

    /// All nine, in script order.
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.all().len(), 9);
    /// assert_eq!(k.all()[0], k.pool());
    /// assert!(k.all().iter().all(|key| key.starts_with("punctual:{orders}:")));
    /// ```
    pub fn all(&self) -> &[String; 9] {
        &self.keys
    }
    /// Jobs waiting for their due time (sorted set by due time).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.pool(), "punctual:{orders}:pool");
    /// ```
    pub fn pool(&self) -> &str {
        &self.keys[0]
    }
    /// Due jobs waiting for a worker (sorted set).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.ready(), "punctual:{orders}:ready");
    /// ```
    pub fn ready(&self) -> &str {
        &self.keys[1]
    }
    /// Leased jobs (sorted set by lease deadline).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.running(), "punctual:{orders}:running");
    /// ```
    pub fn running(&self) -> &str {
        &self.keys[2]
    }
    /// Dead jobs (sorted set by time of death).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.dead(), "punctual:{orders}:dead");
    /// ```
    pub fn dead(&self) -> &str {
        &self.keys[3]
    }
    /// Job records (hash id -> record).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.jobs(), "punctual:{orders}:jobs");
    /// ```
    pub fn jobs(&self) -> &str {
        &self.keys[4]
    }
    /// Topic settings: `max_attempts`, `backoff`, `paused`, `partitions`
    /// (hash).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.meta(), "punctual:{orders}:meta");
    /// ```
    pub fn meta(&self) -> &str {
        &self.keys[5]
    }
    /// Counters (hash).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.stats(), "punctual:{orders}:stats");
    /// ```
    pub fn stats(&self) -> &str {
        &self.keys[6]
    }
    /// The counter behind generated ids and lease tokens (string).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.seq(), "punctual:{orders}:seq");
    /// ```
    pub fn seq(&self) -> &str {
        &self.keys[7]
    }
    /// Deliveries so far and the latest lease token per job (hash).
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.attempts(), "punctual:{orders}:attempts");
    /// ```
    pub fn attempts(&self) -> &str {
        &self.keys[8]
    }
    /// The index of the cold pool's buckets (sorted set, member and score
    /// both a bucket's start; see docs/PROTOCOL.md "The cold pool"). Not
    /// one of the nine keys the scripts take.
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.cold(), "punctual:{orders}:cold");
    /// ```
    pub fn cold(&self) -> String {
        format!("{}cold", self.base())
    }
    /// The set of the ids of waiting jobs that kept an attempts entry (a
    /// retry or a reclaim; see docs/PROTOCOL.md "Attempts and tokens"). Not
    /// one of the nine keys the scripts take.
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.retried(), "punctual:{orders}:retried");
    /// ```
    pub fn retried(&self) -> String {
        format!("{}retried", self.base())
    }
    /// The cold bucket that starts at `start` (epoch ms, a multiple of
    /// 60,000): a list of the ids placed cold with a due time in
    /// `[start, start + 60000)`.
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.cold_bucket(1_800_000_000_000), "punctual:{orders}:c:1800000000000");
    /// ```
    pub fn cold_bucket(&self, start: i64) -> String {
        format!("{}c:{start}", self.base())
    }
    /// The pub/sub channel on which the `cancel` script tells the worker
    /// holding a running job's lease that the job was cancelled: messages
    /// `<token>:<id>` (docs/PROTOCOL.md "cancel"). A channel, not a key.
    ///
    /// ```
    /// let k = punctual::internal::TopicKeys::new("punctual", "orders");
    /// assert_eq!(k.cancel_channel(), "punctual:{orders}:cancel");
    /// ```
    pub fn cancel_channel(&self) -> String {
        format!("{}cancel", self.base())
    }
    /// `P:{T}:`, what every key name of the topic starts with.
    fn base(&self) -> &str {
        let pool = &self.keys[0];
        &pool[..pool.len() - "pool".len()]
    }
}

/// The one global key: the set of known topics.
pub(crate) fn topics_key(prefix: &str) -> String {
    format!("{prefix}:topics")
}

/// The global hash of partition counts (topic -> k).
pub(crate) fn partitions_key(prefix: &str) -> String {
    format!("{prefix}:partitions")
}
