//! What a [`Worker`](crate::Worker) runs for a delivery and what it answers
//! ([`Outcome`]): the [`Handler`]
//! trait, implemented for closures, its type-erased form [`BoxedHandler`],
//! [`cancellable`] for closures that watch the delivery's cancellation
//! token, and the typed-JSON adapter behind
//! [`Worker::handle_json`](crate::Worker::handle_json).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::raw::Delivery;

/// What a handler says about one delivery.
///
/// ```
/// use std::time::Duration;
/// use punctual::{Delivery, Outcome};
///
/// async fn send_email(job: Delivery) -> Outcome {
///     match std::str::from_utf8(&job.payload) {
///         Err(_) => Outcome::permanent("the payload is not an address"),
///         Ok("") => Outcome::retry_after("no address yet", Duration::from_secs(60)),
///         Ok(_address) => Outcome::Done,
///     }
/// }
/// # let _ = send_email;
/// // A handler may also answer with a Result: Ok is done, Err a retry.
/// let o: Outcome = Err::<(), _>("timeout").into();
/// assert_eq!(o, Outcome::retry("timeout"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Done: the job is acked and deleted.
    Done,
    /// Try again after `after` (or the backoff ladder), unless the attempts
    /// are used up, then dead.
    Retry {
        /// Kept as the job's last error.
        error: String,
        /// Wait this long instead of the ladder's step.
        after: Option<Duration>,
    },
    /// Do not try again: straight to dead.
    Permanent {
        /// Kept as the job's last error.
        error: String,
    },
    /// The job's expiry ([`crate::Job::expire`]) passed before it started:
    /// to dead, counted as expired, as the claim does with a job past its
    /// deadline. The worker answers it itself for a job held past its
    /// expiry; a handler that holds jobs before starting them may too.
    Expired {
        /// Kept as the job's last error.
        error: String,
    },
    /// The handler never started the job and the worker is stopping, or the
    /// job's lease is in doubt ([`crate::Delivery::lease_in_doubt`]): back
    /// to ready at once, its attempt not counted. Answered otherwise, it is
    /// taken as [`Outcome::Retry`] (an attempt counted), so no handler can
    /// put a job back for ever.
    HandBack,
}

impl Outcome {
    /// Retry with the backoff ladder.
    ///
    /// ```
    /// let o = punctual::Outcome::retry("upstream 503");
    /// assert!(matches!(o, punctual::Outcome::Retry { after: None, .. }));
    /// ```
    pub fn retry(error: impl Into<String>) -> Self {
        Outcome::Retry {
            error: error.into(),
            after: None,
        }
    }

    /// Retry after `after`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = punctual::Outcome::retry_after("rate limited", Duration::from_secs(30));
    /// assert!(matches!(o, punctual::Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(30)));
    /// ```
    pub fn retry_after(error: impl Into<String>, after: Duration) -> Self {
        Outcome::Retry {
            error: error.into(),
            after: Some(after),
        }
    }

    /// Permanent failure: to dead now.
    ///
    /// ```
    /// let o = punctual::Outcome::permanent("unknown customer");
    /// assert_eq!(o, punctual::Outcome::Permanent { error: "unknown customer".into() });
    /// ```
    pub fn permanent(error: impl Into<String>) -> Self {
        Outcome::Permanent {
            error: error.into(),
        }
    }
}

impl<E: std::fmt::Display> From<std::result::Result<(), E>> for Outcome {
    /// `Ok` is done, `Err` a retry with the error's text.
    fn from(r: std::result::Result<(), E>) -> Self {
        match r {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::retry(e.to_string()),
        }
    }
}

/// Runs one delivery of a job and says what became of it.
///
/// `cancel` fires when the worker wants the run to stop: the handler timed
/// out, the job's lease was lost (it expired and went to another worker, or
/// was cancelled and the message was missed), an operator cancelled the job
/// (then [`Delivery::cancelled`](crate::Delivery::cancelled) fired first),
/// or the worker is shutting down. A handler that watches
/// it can stop cleanly (finish a write, roll back) within the worker's
/// [`cancel_grace`](crate::WorkerConfig::cancel_grace) (after an operator's
/// cancel, [`cancelled_grace`](crate::WorkerConfig::cancelled_grace)); after
/// a timeout, a lost lease or a cancel the run is then dropped. At shutdown the worker waits for it
/// up to its `shutdown_timeout` and records what it answers (a retry, say).
///
/// The run is polled inside its job's slot task, so the timeout and a lost
/// lease are acted on at its `.await` points: a handler must not block its
/// thread (put blocking work in `tokio::task::spawn_blocking`). One that
/// does holds its slot, and its lease stays extended, until it returns.
///
/// Closures `Fn(Delivery) -> impl Future<Output = Outcome>` are handlers
/// that ignore the token; [`cancellable`] makes one of a closure that takes
/// it. A type implements it like this:
///
/// ```
/// use std::future::Future;
/// use punctual::{CancellationToken, Delivery, Handler, Outcome};
///
/// struct Mailer {
///     from: String,
/// }
///
/// impl Handler for Mailer {
///     fn call(
///         &self,
///         job: Delivery,
///         cancel: CancellationToken,
///     ) -> impl Future<Output = Outcome> + Send + 'static {
///         let from = self.from.clone();
///         async move {
///             tokio::select! {
///                 _ = cancel.cancelled() => Outcome::retry("stopped before sending"),
///                 _ = tokio::time::sleep(std::time::Duration::from_millis(1)) => {
///                     println!("mail from {from}: {}", String::from_utf8_lossy(&job.payload));
///                     Outcome::Done
///                 }
///             }
///         }
///     }
/// }
/// # fn demo(queue: punctual::Queue) {
/// let mailer = Mailer { from: "shop@example.com".into() };
/// let worker = punctual::Worker::new(queue, Default::default()).handler("mails", mailer);
/// # let _ = worker; }
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Runs `job`; `cancel` fires when the run should stop. A worker calls
    /// it; a test can too:
    ///
    /// ```
    /// use punctual::{BoxedHandler, CancellationToken, Delivery, Handler, Outcome};
    /// async fn run_once(h: &BoxedHandler, job: Delivery) -> Outcome {
    ///     h.call(job, CancellationToken::new()).await
    /// }
    /// # let _ = run_once;
    /// ```
    fn call(
        &self,
        job: Delivery,
        cancel: CancellationToken,
    ) -> impl Future<Output = Outcome> + Send + 'static;
}

impl<F, Fut> Handler for F
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(
        &self,
        job: Delivery,
        _cancel: CancellationToken,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        self(job)
    }
}

/// The object-safe form of [`Handler`], behind [`BoxedHandler`].
trait DynHandler: Send + Sync {
    fn call_boxed(&self, job: Delivery, cancel: CancellationToken) -> BoxFuture<'static, Outcome>;
}

impl<H: Handler> DynHandler for H {
    fn call_boxed(&self, job: Delivery, cancel: CancellationToken) -> BoxFuture<'static, Outcome> {
        self.call(job, cancel).boxed()
    }
}

/// Any [`Handler`], type-erased and cheap to clone: what a worker keeps
/// per topic, and what a table of handlers by topic holds.
///
/// ```
/// use std::collections::BTreeMap;
/// use punctual::{BoxedHandler, Outcome};
///
/// let mut by_topic: BTreeMap<&str, BoxedHandler> = BTreeMap::new();
/// by_topic.insert("emails", BoxedHandler::new(|_job| async { Outcome::Done }));
/// by_topic.insert(
///     "orders",
///     BoxedHandler::new(|_job| async { Outcome::permanent("not today") }),
/// );
/// assert_eq!(by_topic.len(), 2);
/// ```
#[derive(Clone)]
pub struct BoxedHandler(Arc<dyn DynHandler>);

impl BoxedHandler {
    /// Erases the type of `handler`.
    ///
    /// ```
    /// let h = punctual::BoxedHandler::new(|_job| async { punctual::Outcome::Done });
    /// let again = h.clone(); // shares the handler
    /// # let _ = again;
    /// ```
    pub fn new(handler: impl Handler) -> Self {
        BoxedHandler(Arc::new(handler))
    }
}

impl std::fmt::Debug for BoxedHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxedHandler")
    }
}

impl Handler for BoxedHandler {
    fn call(
        &self,
        job: Delivery,
        cancel: CancellationToken,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        self.0.call_boxed(job, cancel)
    }
}

/// A closure that takes the delivery's cancellation token too, as a
/// [`Handler`].
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// use punctual::{cancellable, Outcome, Worker, WorkerConfig};
/// Worker::new(queue, WorkerConfig::default())
///     .handler("reports", cancellable(|job, cancel| async move {
///         for chunk in job.payload.chunks(1024) {
///             if cancel.is_cancelled() {
///                 return Outcome::retry("stopped between chunks");
///             }
///             let _ = chunk; // ... one chunk of work ...
///         }
///         Outcome::Done
///     }))
///     .run(async { tokio::signal::ctrl_c().await.ok(); })
///     .await?;
/// # Ok(()) }
/// ```
pub fn cancellable<F, Fut>(f: F) -> Cancellable<F>
where
    F: Fn(Delivery, CancellationToken) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    Cancellable(f)
}

/// A closure taking a delivery and its token: see [`cancellable`].
///
/// ```
/// use punctual::{cancellable, Cancellable, Handler, Outcome};
/// fn takes_any(_: impl Handler) {}
/// let h: Cancellable<_> = cancellable(|_job, _cancel| async { Outcome::Done });
/// takes_any(h.clone());
/// ```
#[derive(Clone, Copy)]
pub struct Cancellable<F>(F);

impl<F> std::fmt::Debug for Cancellable<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cancellable")
    }
}

impl<F, Fut> Handler for Cancellable<F>
where
    F: Fn(Delivery, CancellationToken) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(
        &self,
        job: Delivery,
        cancel: CancellationToken,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        (self.0)(job, cancel)
    }
}

/// A closure taking the payload parsed as `T` (and the delivery), as a
/// [`Handler`]: a payload that is not that JSON is a permanent failure,
/// since no retry can fix it. Made by
/// [`Worker::handle_json`](crate::Worker::handle_json).
pub(crate) struct Json<T, F> {
    f: F,
    _t: PhantomData<fn() -> T>,
}

impl<T, F> Json<T, F> {
    pub(crate) fn new(f: F) -> Self {
        Json { f, _t: PhantomData }
    }
}

impl<T, F, Fut> Handler for Json<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(
        &self,
        job: Delivery,
        _cancel: CancellationToken,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        match job.json::<T>() {
            Ok(value) => (self.f)(value, job).left_future(),
            Err(e) => futures::future::ready(Outcome::permanent(e.to_string())).right_future(),
        }
    }
}
