//! The settler: records the outcomes of runs (acks batched per topic,
//! each fail on its own).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::error::Result;
use crate::handler::Outcome;
use crate::queue::MAX_BATCH;
use crate::raw::{self, FailKind, Failed, Lease, Partition};

use super::shared::{forget, forget_held, Shared};

pub(super) struct Settle {
    pub(super) topic: usize,
    pub(super) id: String,
    pub(super) token: i64,
    /// The claim's attempt: the ack sends the attempts entry ("0A:T").
    pub(super) attempt: u32,
    pub(super) outcome: Outcome,
}

/// Records outcomes. No call waits behind another: every fail is its own
/// task, and each topic has its own lane of acks, one call in flight at a
/// time, which takes whatever has queued up for that topic meanwhile (so
/// acks still go out in batches); with no call in flight, a few acks wait
/// up to `ack_linger` for more to share the next. A passing Redis error (an outage) is
/// retried; meanwhile the keeper keeps the leases alive, so an outcome is
/// never lost to a short outage. A call that Redis keeps refusing (a wrong
/// key type, a missing permission, invalid input) holds up nothing but its
/// own jobs, and only for a few tries: then they are forgotten, their
/// leases run out, and a scheduler reclaims them (see `settle_or_give_up`).
/// Ends when every sender is gone and every call has finished.
pub(super) async fn settle_loop(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Settle>) {
    // Per topic: acks waiting for the lane; the topics with a call in flight.
    let mut waiting: HashMap<usize, Vec<Lease>> = HashMap::new();
    let mut busy: HashSet<usize> = HashSet::new();
    let mut in_flight: HashMap<tokio::task::Id, usize> = HashMap::new();
    let mut acks: JoinSet<()> = JoinSet::new();
    let mut fails: JoinSet<()> = JoinSet::new();
    let mut open = true;
    let linger = shared.config.ack_linger.min(Duration::from_secs(1));
    // Per topic: since when acks wait with no call in flight.
    let mut held: HashMap<usize, tokio::time::Instant> = HashMap::new();
    while open || !acks.is_empty() || !fails.is_empty() || !waiting.is_empty() {
        // (A topic with a call in flight sends when it returns.)
        let until = held
            .iter()
            .filter(|(ti, _)| !busy.contains(*ti))
            .map(|(_, t)| *t + linger)
            .min();
        tokio::select! {
            _ = tokio::time::sleep_until(until.unwrap_or_else(tokio::time::Instant::now)), if until.is_some() => {}
            s = rx.recv(), if open => match s {
                Some(first) => {
                    let mut next = Some(first);
                    let mut taken = 0;
                    while let Some(s) = next.take() {
                        match s.outcome {
                            Outcome::Done => waiting.entry(s.topic).or_default().push(Lease::with_attempt(s.id, s.token, s.attempt)),
                            _ => {
                                fails.spawn(fail_one(shared.clone(), s).in_current_span());
                            }
                        }
                        taken += 1;
                        if taken < MAX_BATCH {
                            next = rx.try_recv().ok();
                        }
                    }
                }
                None => open = false,
            },
            Some(done) = acks.join_next_with_id(), if !acks.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                if let Some(ti) = in_flight.remove(&id) {
                    busy.remove(&ti);
                }
            }
            Some(_) = fails.join_next(), if !fails.is_empty() => {}
        }
        // Start a call for every topic with acks waiting and none in
        // flight, once they are many or have lingered.
        let now = tokio::time::Instant::now();
        let ready: Vec<usize> = {
            // (The running jobs are looked at only when acks may linger.)
            let running = (!linger.is_zero()).then(|| shared.inflight.lock().unwrap());
            waiting
                .iter()
                .filter(|(ti, w)| {
                    let since = *held.entry(**ti).or_insert(now);
                    // Others still running here may join; else no wait.
                    let others = running.as_ref().is_some_and(|r| r[**ti].len() > w.len());
                    !busy.contains(ti)
                        && (!open || !others || w.len() >= ACK_ENOUGH || now >= since + linger)
                })
                .map(|(ti, _)| *ti)
                .collect()
        };
        for ti in ready {
            held.remove(&ti);
            let leases = waiting.remove(&ti).expect("listed above");
            let call = acks.spawn(ack_many(shared.clone(), ti, leases).in_current_span());
            in_flight.insert(call.id(), ti);
            busy.insert(ti);
        }
    }
}

/// Acks enough to send at once, without lingering
/// ([`WorkerConfig::ack_linger`](crate::WorkerConfig::ack_linger)).
const ACK_ENOUGH: usize = 64;

async fn ack_many(shared: Arc<Shared>, ti: usize, leases: Vec<Lease>) {
    let topic = &shared.topics[ti].name;
    let part = Partition::known(topic);
    let Some((flags, resent)) = settle_or_give_up(|| raw::ack(&shared.queue, &part, &leases)).await
    else {
        for Lease { id, token, .. } in leases {
            tracing::error!(topic = %topic, id = %id, "Redis keeps refusing the ack: leaving the job to its lease; it will be reclaimed and run again");
            forget(&shared, ti, &id, token);
        }
        return;
    };
    let mut inflight = shared.inflight.lock().unwrap();
    for (Lease { id, token, .. }, ok) in leases.into_iter().zip(flags) {
        if !ok {
            tracing::warn!(topic = %topic, id = %id, "{}", ack_refused(resent));
        }
        forget_held(&mut inflight[ti], &id, token);
    }
}

/// What an ack refused tells: after a resend (the first try's reply was
/// lost), only that the job is no longer leased under this token.
fn ack_refused(resent: bool) -> &'static str {
    if resent {
        "ack refused on a resend: an earlier try may have been recorded before its reply was lost; the ack's outcome is unknown; the job is not running here"
    } else {
        "ack refused: the lease was lost and the job re-delivered or cancelled"
    }
}

async fn fail_one(shared: Arc<Shared>, s: Settle) {
    let topic = &shared.topics[s.topic].name;
    let (part, lease) = (Partition::known(topic), Lease::new(s.id.clone(), s.token));
    let (error, r) = match &s.outcome {
        // The one place every retry delay passes: capped here.
        Outcome::Retry { error, after } => {
            let kind = FailKind::Retry {
                after: after.map(|a| a.min(shared.config.max_retry_delay)),
            };
            let r =
                settle_or_give_up(|| raw::fail(&shared.queue, &part, &lease, error, kind)).await;
            (error.as_str(), r)
        }
        Outcome::Permanent { error } => {
            let kind = FailKind::Permanent;
            let r =
                settle_or_give_up(|| raw::fail(&shared.queue, &part, &lease, error, kind)).await;
            (error.as_str(), r)
        }
        Outcome::Expired { error } => {
            let r =
                settle_or_give_up(|| raw::fail_expired(&shared.queue, &part, &lease, error)).await;
            (error.as_str(), r)
        }
        Outcome::HandBack => {
            let r = settle_or_give_up(|| raw::hand_back(&shared.queue, &part, &lease)).await;
            ("", r)
        }
        Outcome::Done => unreachable!("done outcomes are acked"),
    };
    let Some((r, resent)) = r else {
        tracing::error!(topic = %topic, id = %s.id, error, "Redis keeps refusing the fail: leaving the job to its lease; it will be reclaimed and run again");
        forget(&shared, s.topic, &s.id, s.token);
        return;
    };
    match r {
        Failed::Retry => {
            tracing::info!(topic = %topic, id = %s.id, error, "job failed; will retry")
        }
        Failed::Dead if matches!(s.outcome, Outcome::Expired { .. }) => {
            tracing::warn!(topic = %topic, id = %s.id, error, "job expired before it started; moved to dead")
        }
        Failed::Dead => {
            tracing::warn!(topic = %topic, id = %s.id, error, "job failed; moved to dead")
        }
        Failed::Back => {
            tracing::info!(topic = %topic, id = %s.id, "job handed back unstarted: in ready again, its attempt not counted")
        }
        Failed::Stale if resent => {
            tracing::warn!(topic = %topic, id = %s.id, "fail refused on a resend: an earlier try may have been recorded before its reply was lost; its outcome is unknown; the job is not running here")
        }
        _ => {
            tracing::warn!(topic = %topic, id = %s.id, "fail refused: the lease was lost")
        }
    }
    forget(&shared, s.topic, &s.id, s.token);
}

/// Tries of a settle call that Redis refuses for a lasting reason before
/// the worker gives up on it (about 0.75 s of backoff in all).
const LASTING_REFUSALS: u32 = 5;

/// Runs a settle call until it succeeds: through any passing error (an
/// outage: the keeper cannot extend either, so nothing is held longer than
/// a lease past it), but only `LASTING_REFUSALS` times through a refusal
/// that lasts, or the keeper would extend the job's lease for the life of
/// the worker. `None`: given up; the caller forgets the job. With the
/// value, whether the call was resent after a passing error.
async fn settle_or_give_up<T, F, Fut>(mut call: F) -> Option<(T, bool)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = Duration::from_millis(50);
    let mut refused = 0;
    // Whether a try failed in a way that may have reached Redis (its reply
    // lost): then a refusal of a later try says less.
    let mut resent = false;
    loop {
        match call().await {
            Ok(v) => return Some((v, resent)),
            Err(e) => {
                if !e.is_passing() {
                    refused += 1;
                    if refused >= LASTING_REFUSALS {
                        tracing::error!(error = %e, "recording a job outcome was refused {refused} times; giving up");
                        return None;
                    }
                } else {
                    resent = true;
                }
                tracing::warn!(error = %e, "recording a job outcome failed; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
