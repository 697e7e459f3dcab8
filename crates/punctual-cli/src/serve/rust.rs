//! Handlers written in Rust, for a program that embeds `punctual_cli` and
//! runs `serve` itself: the supervisor re-executes that program, and its
//! workers run these functions for topics whose config table names no exec
//! or http handler.

use std::collections::BTreeMap;
use std::future::Future;

use punctual::{BoxedHandler, Delivery, Handler, Outcome};

/// Rust handlers by topic, for [`crate::main_with`].
///
/// ```no_run
/// use punctual::Outcome;
/// fn main() -> std::process::ExitCode {
///     let handlers = punctual_cli::Handlers::new().handle("emails", |job| async move {
///         println!("sending {}", String::from_utf8_lossy(&job.payload));
///         Outcome::Done
///     });
///     // `myprogram serve --config punctual.toml` runs the same supervisor,
///     // workers and schedulers as `punctual serve`, with these handlers.
///     punctual_cli::main_with(handlers)
/// }
/// ```
#[derive(Clone, Default)]
pub struct Handlers {
    pub(crate) map: BTreeMap<String, BoxedHandler>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("topics", &self.map.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Handlers {
    /// No handlers: the `punctual` binary itself.
    pub fn new() -> Self {
        Handlers::default()
    }

    /// Runs `handler` for jobs of `topic`. The topic still needs its
    /// `[topics.NAME]` table in the config (timeout, max_attempts, backoff,
    /// partitions), without `exec` or `http`.
    pub fn handle<F, Fut>(self, topic: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.handler(topic, handler)
    }

    /// Runs any [`Handler`] for jobs of `topic`: a type of yours, or a
    /// [`punctual::cancellable`] closure that watches the delivery's
    /// cancellation token (it fires on timeout, lost lease, an operator's
    /// cancel and shutdown; `Delivery::cancelled` fires for the cancel only).
    ///
    /// ```no_run
    /// use punctual::{cancellable, Outcome};
    /// fn main() -> std::process::ExitCode {
    ///     let handlers = punctual_cli::Handlers::new().handler(
    ///         "reports",
    ///         cancellable(|_job, cancel| async move {
    ///             tokio::select! {
    ///                 _ = cancel.cancelled() => Outcome::retry("stopped"),
    ///                 _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => Outcome::Done,
    ///             }
    ///         }),
    ///     );
    ///     punctual_cli::main_with(handlers)
    /// }
    /// ```
    pub fn handler(mut self, topic: impl Into<String>, handler: impl Handler) -> Self {
        self.map.insert(topic.into(), BoxedHandler::new(handler));
        self
    }

    /// The topics with a Rust handler.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }
}
