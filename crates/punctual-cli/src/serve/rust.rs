//! Handlers written in Rust, for a program that embeds `punctual_cli` and
//! runs `serve` itself: the supervisor re-executes that program, and its
//! workers run these functions for topics whose config table names no exec
//! or http handler.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use punctual::{Delivery, Outcome};

pub(crate) type RustHandler = Arc<dyn Fn(Delivery) -> BoxFuture<'static, Outcome> + Send + Sync>;

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
    pub(crate) map: BTreeMap<String, RustHandler>,
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
    pub fn handle<F, Fut>(mut self, topic: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let handler: RustHandler = Arc::new(move |d| handler(d).boxed());
        self.map.insert(topic.into(), handler);
        self
    }

    /// The topics with a Rust handler.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }
}
