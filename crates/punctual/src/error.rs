//! The library's one error type.

use std::fmt;

/// What went wrong, in classes a caller can act on ([`Error::kind`]).
///
/// ```
/// use punctual::ErrorKind;
/// let err = punctual::validate_topic("").unwrap_err();
/// match err.kind() {
///     ErrorKind::InvalidInput => println!("fix the input: {err}"),
///     ErrorKind::Redis => println!("try again later: {err}"),
///     _ => println!("report it: {err}"),
/// }
/// assert_eq!(err.kind().to_string(), "invalid input");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad input (topic, id, payload, delay, option). Nothing was written.
    InvalidInput,
    /// Redis could not be reached, timed out, or refused the command (for
    /// example OOM under `maxmemory`). The operation may be retried.
    Redis,
    /// Redis answered something punctual did not expect: a script of another
    /// version, or keys written by something else.
    Protocol,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Redis => "redis",
            ErrorKind::Protocol => "protocol",
        })
    }
}

/// An error from punctual.
///
/// ```
/// let err = punctual::Job::new("x").id("").validate().unwrap_err();
/// assert_eq!(err.kind(), punctual::ErrorKind::InvalidInput);
/// assert!(!err.is_retryable());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad input; the message says what was wrong and what to do.
    #[error("{0}")]
    Invalid(String),
    /// A Redis error.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A batch of several script calls (each atomic; see
    /// [`Queue::enqueue_chunk`](crate::Queue::enqueue_chunk)) failed part
    /// way: some calls were written, others not.
    #[error("{source} (the batch of {total} jobs went in several calls, each atomic: {} written, {} not; enqueue those again, ids make that safe)", written.len(), failed.len())]
    PartialBatch {
        /// Jobs in the batch.
        total: usize,
        /// The jobs that have a result (created, replaced, or duplicate), by
        /// their index in the batch.
        written: Vec<(usize, crate::enqueued::Enqueued)>,
        /// The indexes of the jobs not written.
        failed: Vec<usize>,
        /// Why the rest failed.
        source: Box<Error>,
    },
    /// An unexpected reply.
    #[error("unexpected reply from Redis to {op}: {detail}")]
    Protocol {
        /// The operation that got the reply.
        op: &'static str,
        /// What was wrong with it.
        detail: String,
    },
}

impl Error {
    /// The class of this error.
    ///
    /// ```
    /// let err = punctual::Job::new("x").max_attempts(0).validate().unwrap_err();
    /// assert_eq!(err.kind(), punctual::ErrorKind::InvalidInput);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid(_) => ErrorKind::InvalidInput,
            Error::Redis(_) => ErrorKind::Redis,
            Error::Protocol { .. } => ErrorKind::Protocol,
            Error::PartialBatch { source, .. } => source.kind(),
        }
    }

    /// Whether the same call may succeed later (Redis down, busy, OOM).
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let enqueued = loop {
    ///     match queue.enqueue("orders", punctual::Job::new("x").id("order:1")).await {
    ///         Err(e) if e.is_retryable() => {
    ///             tokio::time::sleep(std::time::Duration::from_secs(1)).await
    ///         }
    ///         other => break other?,
    ///     }
    /// };
    /// # let _ = enqueued;
    /// # Ok(()) }
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Redis(_) => true,
            Error::PartialBatch { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// Whether this is a passing condition (Redis unreachable, timed out,
    /// busy, out of memory, loading, failing over) rather than a refusal
    /// that will last until someone acts (a wrong key type, a missing
    /// permission, invalid input, an unexpected reply).
    ///
    /// ```
    /// let err = punctual::Job::new("x").id("").validate().unwrap_err();
    /// assert!(!err.is_passing(), "bad input lasts until the caller fixes it");
    /// ```
    pub fn is_passing(&self) -> bool {
        match self {
            Error::Redis(r) => {
                r.is_io_error()
                    || r.is_timeout()
                    || r.is_connection_dropped()
                    || r.is_connection_refusal()
                    || matches!(
                        r.code(),
                        Some(
                            "OOM"
                                | "BUSY"
                                | "LOADING"
                                | "READONLY"
                                | "MASTERDOWN"
                                | "TRYAGAIN"
                                | "CLUSTERDOWN"
                                | "NOREPLICAS"
                                | "MISCONF"
                                | "MOVED"
                                | "ASK"
                                | "NOSCRIPT"
                        )
                    )
            }
            Error::PartialBatch { source, .. } => source.is_passing(),
            _ => false,
        }
    }

    /// Whether Redis answered `LOADING`: it is reading its dataset (after a
    /// restart) and ran nothing.
    pub(crate) fn is_loading(&self) -> bool {
        matches!(self, Error::Redis(r) if r.code() == Some("LOADING"))
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    pub(crate) fn protocol(op: &'static str, detail: impl Into<String>) -> Self {
        Error::Protocol {
            op,
            detail: detail.into(),
        }
    }

    /// Turns a script's `PUNCTUAL_INVALID` reply into [`Error::Invalid`].
    pub(crate) fn from_redis(err: redis::RedisError) -> Self {
        if err.code() == Some("PUNCTUAL_INVALID") {
            return Error::Invalid(err.detail().unwrap_or("invalid input").to_string());
        }
        Error::Redis(err)
    }
}

/// The result type of punctual.
///
/// ```
/// fn parse_state(s: &str) -> punctual::Result<punctual::State> {
///     s.parse()
/// }
/// assert!(parse_state("dead").is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
