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
