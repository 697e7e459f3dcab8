//! Wake-ups over Redis pub/sub: scripts publish on the channel named after
//! the pool key ("an earlier job arrived") or the ready key ("jobs are
//! ready"); listeners turn messages into `Notify` permits.
//!
//! A message can be lost only while the subscription is down; after every
//! (re)subscribe all waiters are notified, so they look for work themselves.
//! A listener may also read the message: workers and schedulers read the
//! time a pool message carries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What a channel's messages go to: called with the message's payload, or
/// with `None` after a (re)subscribe (messages may have been lost).
pub(crate) type OnMessage = Arc<dyn Fn(Option<&[u8]>) + Send + Sync>;

/// A [`OnMessage`] that notifies `n` whatever the message.
pub(crate) fn notifier(n: Arc<Notify>) -> OnMessage {
    Arc::new(move |_| n.notify_one())
}

/// Subscribes to `channels` until `stop`, handing each message to the
/// channel's [`OnMessage`] ([`notifier`] to just wake a waiter). Reconnects
/// with backoff.
pub(crate) fn listen(
    clients: Vec<redis::Client>,
    channels: HashMap<String, OnMessage>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let span = tracing::Span::current();
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let mut backoff = Duration::from_millis(100);
            // On a cluster any node sees every PUBLISH: rotate through the
            // nodes when one fails.
            let mut next = 0;
            loop {
                if stop.is_cancelled() {
                    return;
                }
                let client = &clients[next % clients.len()];
                next += 1;
                match subscribe(client, &channels).await {
                    Ok(pubsub) => {
                        backoff = Duration::from_millis(100);
                        // Anything published while we were away is lost: look now.
                        for on in channels.values() {
                            on(None);
                        }
                        let mut messages = pubsub.into_on_message();
                        loop {
                            tokio::select! {
                                _ = stop.cancelled() => return,
                                msg = messages.next() => match msg {
                                    Some(msg) => {
                                        if let Some(on) = channels.get(msg.get_channel_name()) {
                                            on(Some(msg.get_payload_bytes()));
                                        }
                                    }
                                    None => {
                                        tracing::warn!("wake-up subscription lost; reconnecting");
                                        break;
                                    }
                                },
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot subscribe for wake-ups; retrying in {backoff:?}");
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        },
        span,
    ))
}

async fn subscribe(
    client: &redis::Client,
    channels: &HashMap<String, OnMessage>,
) -> redis::RedisResult<redis::aio::PubSub> {
    let mut pubsub = tokio::time::timeout(Duration::from_secs(5), client.get_async_pubsub())
        .await
        .map_err(|_| {
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
        })??;
    for ch in channels.keys() {
        pubsub.subscribe(ch).await?;
    }
    Ok(pubsub)
}

/// A timer to the instant, for the worker's claim at a job's due time:
/// tokio's timer wheel rounds a deadline up to the next whole ms, this one
/// is a thread waiting on a condition variable (a futex with a timeout, a
/// few tens of µs late). One deadline at a time; [`PreciseTimer::fired`]
/// may also return for a deadline that was replaced, so the caller checks
/// its own plan. The thread ends when the last [`TimerGuard`] is dropped.
pub(crate) struct PreciseTimer {
    state: std::sync::Mutex<TimerState>,
    cv: std::sync::Condvar,
    fired: Notify,
}

#[derive(Default)]
struct TimerState {
    deadline: Option<std::time::Instant>,
    stopped: bool,
}

/// Stops a [`PreciseTimer`]'s thread when dropped.
pub(crate) struct TimerGuard(pub(crate) Arc<PreciseTimer>);

impl Drop for TimerGuard {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().stopped = true;
        self.0.cv.notify_one();
    }
}

impl PreciseTimer {
    /// Starts the timer's thread.
    pub(crate) fn start() -> std::io::Result<TimerGuard> {
        let t = Arc::new(PreciseTimer {
            state: Default::default(),
            cv: Default::default(),
            fired: Notify::new(),
        });
        let t2 = t.clone();
        std::thread::Builder::new()
            .name("punctual-timer".into())
            .spawn(move || t2.run())?;
        Ok(TimerGuard(t))
    }

    fn run(&self) {
        let mut st = self.state.lock().unwrap();
        loop {
            if st.stopped {
                return;
            }
            st = match st.deadline {
                None => self.cv.wait(st).unwrap(),
                Some(d) => {
                    let now = std::time::Instant::now();
                    if now >= d {
                        st.deadline = None;
                        self.fired.notify_one();
                        continue;
                    }
                    self.cv.wait_timeout(st, d - now).unwrap().0
                }
            };
        }
    }

    /// Sets (or clears) the deadline.
    pub(crate) fn set(&self, at: Option<std::time::Instant>) {
        let mut st = self.state.lock().unwrap();
        if st.deadline != at {
            st.deadline = at;
            self.cv.notify_one();
        }
    }

    /// Returns once a deadline has passed (see above).
    pub(crate) async fn fired(&self) {
        self.fired.notified().await
    }
}

/// The epoch ms a pool channel's message carries (a job's due time or a
/// lease deadline, by Redis's clock); None for a (re)subscribe or anything
/// that is not a number.
pub(crate) fn message_ms(msg: Option<&[u8]>) -> Option<i64> {
    msg.and_then(|m| std::str::from_utf8(m).ok())
        .and_then(|m| m.parse::<i64>().ok())
}

/// The local instant of the Redis time `ms` (epoch ms), by `clock`: a
/// Redis time in µs and the local instant it was read at (a claim's or a
/// tick's reply). None when `ms` is not after that reading.
pub(crate) fn local_instant(
    clock: (i64, std::time::Instant),
    ms: i64,
) -> Option<std::time::Instant> {
    let (us, at) = clock;
    let d = ms.saturating_mul(1000).saturating_sub(us);
    (d > 0).then(|| at + std::time::Duration::from_micros(d as u64))
}
