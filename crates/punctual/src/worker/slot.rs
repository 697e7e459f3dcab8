//! A slot: one job's run of its handler, from the checks before it starts
//! to its outcome.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::handler::{Handler, Outcome};
use crate::held::Extended;
use crate::raw::{self, Delivery, Lease, Partition};

use super::attempt::{AttemptEnd, AttemptObserver};
use super::capacity::Ticket;
use super::settle::Settle;
use super::shared::{forget, Running, Shared};

pub(super) fn spawn_slot(
    shared: &Arc<Shared>,
    ti: usize,
    mut job: Delivery,
    permit: (tokio::sync::OwnedSemaphorePermit, Ticket),
    settle: mpsc::UnboundedSender<Settle>,
) {
    let topic = &shared.topics[ti];
    let (id, token, attempt) = (job.id.clone(), job.token, job.attempt);
    // The job's own timeout (Job::timeout) replaces the topic's, unless the
    // handler enforces it (then the backstop says how long to wait).
    let timeout = match &topic.backstop {
        Some(backstop) => backstop(&job),
        None => job.timeout.unwrap_or(topic.timeout),
    };
    let grace = shared.config.cancel_grace;
    let extended = Arc::new(Extended::new(shared.config.lease));
    job.extended = Some(extended.clone());
    let (slot_extended, sent) = (extended.clone(), job.sent);
    // Right before the handler starts: the job's expiry, by Redis's clock
    // (the claim's, advanced by the local clock since), and the age of its
    // lease (at most the time since the claim was sent: a worker stalled
    // between the claim and its reply holds an older lease than it knows).
    let expired = expiry_passed(&job);
    let stale = job.sent.elapsed() > shared.config.lease / 3;
    // Fires at shutdown (a child of `stopping`), at the timeout and when the
    // lease is lost (both below).
    let cancel = shared.stopping.child_token();
    let lost = CancellationToken::new();
    // Fired by the cancel listener (an operator cancelled the job).
    let cancelled = job.cancelled.clone();
    let slot_cancelled = cancelled.clone();
    let cancelled_grace = shared.config.cancelled_grace;
    let handler = topic.handler.clone();
    let watch = Watch::start(shared, ti, &job);
    let slot_shared = shared.clone();
    let slot_lost = lost.clone();
    let slot_id = id.clone();
    // The handler runs inside its slot's task (one task per job, not two):
    // the slot polls it against the timeout and the lease, and drops it
    // (after the grace) when either ends first.
    let slot = async move {
        let (lost, id, shared, cancelled) = (slot_lost, slot_id, slot_shared, slot_cancelled);
        let _permit = permit;
        // The run's end: observed, then recorded by the settler.
        let end = move |watch: Option<Watch>, id: String, outcome: Outcome| {
            Watch::finish(watch, Some(&outcome));
            let _ = settle.send(Settle {
                topic: ti,
                id,
                token,
                attempt,
                outcome,
            });
        };
        if let Some(error) = expired {
            end(watch, id, Outcome::Expired { error });
            return;
        }
        if stale {
            // Extended before it starts, or not started at all.
            let topic = &shared.topics[ti].name;
            let part = Partition::known(topic);
            let lease = [Lease::new(id.clone(), token)];
            match raw::extend(&shared.queue, &part, &lease, shared.config.lease).await {
                Ok(held) if held.first() == Some(&true) => {}
                Ok(_) => {
                    tracing::warn!(topic = %topic, id = %id, "not started: its lease was lost before its handler could start (this worker stalled after its claim); it was reclaimed or cancelled");
                    forget(&shared, ti, &id, token);
                    return;
                }
                Err(e) => {
                    tracing::warn!(topic = %topic, id = %id, error = %e, "not started: its lease is old and could not be extended; leaving the job to its lease");
                    forget(&shared, ti, &id, token);
                    return;
                }
            }
        }
        if cancelled.is_cancelled() {
            // Cancelled between the claim and now: never started.
            let topic = &shared.topics[ti].logical;
            tracing::info!(topic = %topic, id = %id, "not started: the job was cancelled");
            forget(&shared, ti, &id, token);
            return;
        }
        let run = AssertUnwindSafe(handler.call(job, cancel.clone())).catch_unwind();
        let mut run = std::pin::pin!(run);
        let finished = tokio::select! {
            r = &mut run => Some(r),
            _ = tokio::time::sleep(timeout) => None,
            _ = lost.cancelled() => None,
            _ = cancelled.cancelled() => None,
        };
        if cancelled.is_cancelled() {
            // An operator cancelled it: the cancel script ended the job
            // (its lease is revoked), so nothing is recorded. Ask the
            // handler to stop, give it the grace, then drop it.
            cancel.cancel();
            if finished.is_none() {
                let _ = tokio::time::timeout(cancelled_grace, &mut run).await;
            }
            let topic = &shared.topics[ti].logical;
            tracing::info!(topic = %topic, id = %id, "job cancelled while it ran: its handler was stopped; nothing recorded");
            Watch::cancelled(watch);
            forget(&shared, ti, &id, token);
            return;
        }
        let outcome = match finished {
            Some(Ok(outcome)) => outcome,
            Some(Err(panic)) => {
                Outcome::retry(format!("handler panicked: {}", panic_message(&panic)))
            }
            None => {
                // Timed out or lost its lease: ask the handler to stop, give
                // it the grace, then drop it; its answer no longer counts.
                cancel.cancel();
                let _ = tokio::time::timeout(grace, &mut run).await;
                if lost.is_cancelled() {
                    // The keeper already forgot the job; nothing to record.
                    Watch::finish(watch, None);
                    return;
                }
                Outcome::retry(format!("handler timed out after {}", humanize(timeout)))
            }
        };
        // A hand-back costs no attempt: honoured while the worker stops, or
        // for a job not started because its lease was in doubt (it may run
        // elsewhere: `Delivery::lease_in_doubt`). Otherwise it is a retry,
        // or a handler answering it could loop a job for ever.
        let outcome = match outcome {
            Outcome::HandBack
                if !shared.stopping.is_cancelled() && !slot_extended.in_doubt(sent) =>
            {
                Outcome::retry("the handler handed the job back while the worker was running")
            }
            other => other,
        };
        end(watch, id, outcome);
    };
    // Spawned under the lock, so that the slot's outcome cannot be
    // recorded (and the job forgotten) before the job is listed here.
    // Aborting the task (the shutdown timeout) drops the run unrecorded.
    let mut inflight = shared.inflight.lock().unwrap();
    let handle = tokio::spawn(slot.in_current_span());
    let previous = inflight[ti].insert(
        id,
        (
            token,
            Running {
                lost,
                cancelled,
                abort: handle.abort_handle(),
                extended,
            },
        ),
    );
    drop(inflight);
    if let Some((_, old)) = previous {
        // This process still ran an earlier delivery of the same job, whose
        // lease was lost meanwhile: that run can no longer ack; stop it.
        old.lost.cancel();
    }
}

/// An attempt whose end the observer ([`Worker::on_attempt`](crate::Worker::on_attempt)) is told.
struct Watch {
    observer: AttemptObserver,
    end: AttemptEnd,
    max_attempts: u32,
}

impl Watch {
    /// None without an observer: then nothing is cloned or timed.
    fn start(shared: &Shared, ti: usize, job: &Delivery) -> Option<Watch> {
        let observer = shared.observer.clone()?;
        let now = std::time::SystemTime::now();
        Some(Watch {
            observer,
            end: AttemptEnd {
                topic: shared.topics[ti].logical.clone(),
                id: job.id.clone(),
                attempt: job.attempt,
                token: job.token,
                traceparent: job.traceparent.clone(),
                tracestate: job.tracestate.clone(),
                started: now,
                ended: now,
                lateness_us: job.lateness_us(),
                outcome: "lost",
                error: None,
            },
            max_attempts: job.max_attempts,
        })
    }

    /// Tells the observer that an operator cancelled the job while it ran.
    fn cancelled(watch: Option<Watch>) {
        if let Some(Watch {
            observer, mut end, ..
        }) = watch
        {
            end.ended = std::time::SystemTime::now();
            end.outcome = "cancelled";
            observer(end);
        }
    }

    /// Tells the observer; `None`: the lease was lost.
    fn finish(watch: Option<Watch>, outcome: Option<&Outcome>) {
        let Some(Watch {
            observer,
            mut end,
            max_attempts,
        }) = watch
        else {
            return;
        };
        end.ended = std::time::SystemTime::now();
        let last = end.attempt >= max_attempts;
        (end.outcome, end.error) = match outcome {
            None => ("lost", None),
            Some(Outcome::Done) => ("done", None),
            Some(Outcome::Retry { error, .. }) => {
                (if last { "dead" } else { "retry" }, Some(error.clone()))
            }
            Some(Outcome::Permanent { error }) => ("dead", Some(error.clone())),
            Some(Outcome::Expired { error }) => ("expired", Some(error.clone())),
            // (Only while stopping, or with its lease in doubt: see the slot.)
            Some(Outcome::HandBack) => ("handed back", None),
        };
        observer(end);
    }
}

fn expiry_passed(job: &Delivery) -> Option<String> {
    job.expiry_error()
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".into()
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
