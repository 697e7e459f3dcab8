//! The audit trail: who changed what, and when, for the operations an
//! operator runs by hand (replay, purge, cancel, pause, resume, topic
//! deletion, imports).
//!
//! Entries are JSON texts in the capped LIST `P:audit` (newest first, at
//! most [`MAX_ENTRIES`]): each append is one `LPUSH` and one `LTRIM` in a
//! `MULTI`. The key is global, like `P:topics`, and never used by a script.
//! The time of an entry is the clock of the host that made the change (the
//! trail is for people; no job's timing depends on it).
//!
//! ```no_run
//! # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
//! use punctual::internal::audit::{self, Entry};
//! let entry = Entry::new("cli", "alice", "pause").topic("orders");
//! audit::append(&queue, &entry).await?;
//! for e in audit::read(&queue, 20).await?.entries {
//!     println!("{} {} ({}) {}", e.at_ms, e.who, e.from, e.action);
//! }
//! # Ok(()) }
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{Error, Queue, Result};

/// How many entries the trail keeps (the newest).
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::internal::audit::{self, MAX_ENTRIES};
/// let everything = audit::read(&queue, MAX_ENTRIES).await?;
/// assert!(everything.entries.len() <= MAX_ENTRIES);
/// # Ok(()) }
/// ```
pub const MAX_ENTRIES: usize = 10_000;

/// The key of the trail under `prefix`: `P:audit`.
///
/// ```
/// assert_eq!(punctual::internal::audit::key("punctual"), "punctual:audit");
/// ```
pub fn key(prefix: &str) -> String {
    format!("{prefix}:audit")
}

/// One change: who made it, from where, what it was, and when.
///
/// ```
/// let e = punctual::internal::audit::Entry::new("api", "10.0.0.7:51234", "dead.replay")
///     .topic("orders")
///     .detail(serde_json::json!({"replayed": 3}));
/// assert_eq!(e.topic.as_deref(), Some("orders"));
/// assert!(e.at_ms > 0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Entry {
    /// When, in epoch ms (the clock of the host that made the change).
    pub at_ms: i64,
    /// Who: `cli`, `api`, or another name the caller chose (an API token's
    /// name, for example).
    pub who: String,
    /// Where from: the OS user for `cli`, the client's address for `api`.
    pub from: String,
    /// What: `cancel`, `dead.replay`, `dead.purge`, `pause`, `resume`,
    /// `import`, ...
    pub action: String,
    /// The topic it touched, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// What else there is to say: ids, counts, the selector used.
    #[serde(default)]
    pub detail: serde_json::Value,
}

impl Entry {
    /// An entry made now, with no topic and no detail.
    ///
    /// ```
    /// let e = punctual::internal::audit::Entry::new("cli", "alice", "pause");
    /// assert_eq!((e.who.as_str(), e.from.as_str(), e.action.as_str()), ("cli", "alice", "pause"));
    /// assert_eq!(e.topic, None);
    /// assert_eq!(e.detail, serde_json::json!({}));
    /// ```
    pub fn new(who: impl Into<String>, from: impl Into<String>, action: impl Into<String>) -> Self {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Entry {
            at_ms,
            who: who.into(),
            from: from.into(),
            action: action.into(),
            topic: None,
            detail: serde_json::Value::Object(Default::default()),
        }
    }

    /// The topic the change touched.
    ///
    /// ```
    /// let e = punctual::internal::audit::Entry::new("cli", "alice", "resume").topic("orders");
    /// assert_eq!(e.topic.as_deref(), Some("orders"));
    /// ```
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Details: a JSON object with ids, counts, ...
    ///
    /// ```
    /// let e = punctual::internal::audit::Entry::new("api", "10.0.0.7:51234", "cancel")
    ///     .topic("orders")
    ///     .detail(serde_json::json!({"ids": ["o-17", "o-18"]}));
    /// assert_eq!(e.detail["ids"][1], "o-18");
    /// ```
    pub fn detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = detail;
        self
    }
}

/// What [`read`] found.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let trail = punctual::internal::audit::read(&queue, 100).await?;
/// for e in &trail.entries {
///     println!("{} {} {} {:?}", e.at_ms, e.who, e.action, e.topic);
/// }
/// if trail.unreadable > 0 {
///     eprintln!("{} items of the list are not audit entries", trail.unreadable);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Trail {
    /// The entries, newest first.
    pub entries: Vec<Entry>,
    /// Items of the list that are not entries (written by something else),
    /// skipped.
    pub unreadable: usize,
}

/// Appends `entry` to the trail and trims it to [`MAX_ENTRIES`], atomically.
///
/// A caller should not let a failure here undo or hide the change it
/// records: log it and go on.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// use punctual::internal::audit::{self, Entry};
/// queue.pause("orders").await?;
/// let entry = Entry::new("cli", "alice", "pause").topic("orders");
/// if let Err(e) = audit::append(&queue, &entry).await {
///     eprintln!("orders paused, but not recorded in the audit trail: {e}");
/// }
/// assert_eq!(audit::read(&queue, 1).await?.entries, [entry]);
/// # Ok(()) }
/// ```
pub async fn append(queue: &Queue, entry: &Entry) -> Result<()> {
    let text = serde_json::to_string(entry)
        .map_err(|e| Error::invalid(format!("cannot encode an audit entry: {e}")))?;
    let key = key(queue.prefix());
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("LPUSH")
        .arg(&key)
        .arg(text)
        .ignore()
        .cmd("LTRIM")
        .arg(&key)
        .arg(0)
        .arg(MAX_ENTRIES - 1)
        .ignore();
    queue.pipe::<()>(&pipe).await.map_err(|e| with_key(e, &key))
}

/// The newest `limit` entries (1 to [`MAX_ENTRIES`]), newest first.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> punctual::Result<()> {
/// # let redis = punctual_testkit::RedisServer::start();
/// # let queue = punctual::Queue::connect(redis.url()).await?;
/// use punctual::internal::audit::{self, Entry};
/// for action in ["pause", "resume", "dead.purge"] {
///     audit::append(&queue, &Entry::new("cli", "alice", action).topic("orders")).await?;
/// }
/// let trail = audit::read(&queue, 2).await?;
/// let actions: Vec<&str> = trail.entries.iter().map(|e| e.action.as_str()).collect();
/// assert_eq!(actions, ["dead.purge", "resume"]);
/// assert_eq!(trail.unreadable, 0);
/// assert!(audit::read(&queue, 0).await.is_err());
/// # Ok(()) }
/// ```
pub async fn read(queue: &Queue, limit: usize) -> Result<Trail> {
    if limit == 0 || limit > MAX_ENTRIES {
        return Err(Error::invalid(format!(
            "the audit trail shows 1 to {MAX_ENTRIES} entries, not {limit}"
        )));
    }
    let key = key(queue.prefix());
    let items: Vec<Vec<u8>> = queue
        .cmd(redis::cmd("LRANGE").arg(&key).arg(0).arg(limit - 1))
        .await
        .map_err(|e| with_key(e, &key))?;
    let mut trail = Trail::default();
    for item in items {
        match serde_json::from_slice::<Entry>(&item) {
            Ok(e) => trail.entries.push(e),
            Err(_) => trail.unreadable += 1,
        }
    }
    Ok(trail)
}

/// A WRONGTYPE error names the key and what to do.
fn with_key(e: Error, key: &str) -> Error {
    match &e {
        Error::Redis(r) if r.code() == Some("WRONGTYPE") => Error::protocol(
            "audit",
            format!("{key} is not a list (something else wrote it): rename or delete it, e.g. `redis-cli RENAME {key} {key}.old`"),
        ),
        _ => e,
    }
}
