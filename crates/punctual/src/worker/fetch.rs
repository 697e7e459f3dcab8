//! The fetcher: claims in batches for free slots, and sleeps until there
//! is work (its [`Plan`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::queue::MAX_BATCH;
use crate::raw::{self, Partition};

use super::capacity::Ticket;
use super::config::DEFAULT_CLAIM_BATCH;
use super::settle::Settle;
use super::shared::Shared;
use super::slot::spawn_slot;

/// When the fetcher should claim again for jobs due in the pool: planned
/// from the claims' replies (the pool's next due time) and from the pool
/// channel's messages (an earlier job was enqueued; the message carries its
/// due time, by Redis's clock).
pub(super) struct Plan {
    state: Mutex<PlanState>,
    /// Woken when a message moved the plan earlier.
    replan: Notify,
    /// Messages planning beyond this are left to the safety net.
    horizon: Duration,
}

#[derive(Default)]
struct PlanState {
    /// The last claim's Redis time (µs) and when its reply arrived.
    clock: Option<(i64, std::time::Instant)>,
    /// When to claim again.
    wake: Option<std::time::Instant>,
}

impl Plan {
    pub(super) fn new(horizon: Duration) -> Plan {
        Plan {
            state: Mutex::default(),
            replan: Notify::new(),
            horizon,
        }
    }

    /// A message on a pool channel: a job (or a lease) due at that epoch ms.
    pub(super) fn heard(&self, msg: Option<&[u8]>) {
        let Some(ms) = crate::wake::message_ms(msg) else {
            // A (re)subscribe: the ready channel's waiter looks for work.
            return;
        };
        let now = std::time::Instant::now();
        let mut st = self.state.lock().unwrap();
        // Due already, or no claim yet to read the clock by: claim now.
        let at = st
            .clock
            .and_then(|c| crate::wake::local_instant(c, ms))
            .unwrap_or(now);
        if at > now + self.horizon || st.wake.is_some_and(|w| w <= at) {
            return;
        }
        st.wake = Some(at);
        drop(st);
        self.replan.notify_one();
    }
}

pub(super) async fn fetch_loop(
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    notify: Arc<Notify>,
    plan: Arc<Plan>,
    timer: Arc<crate::wake::PreciseTimer>,
    settle: mpsc::UnboundedSender<Settle>,
    stop: CancellationToken,
) {
    let batch = match shared.config.claim_batch {
        0 => shared.config.concurrency.min(DEFAULT_CLAIM_BATCH),
        n => n,
    }
    .clamp(1, MAX_BATCH);
    let mut next_topic = 0;
    let mut backoff = Duration::from_millis(50);
    // After a full claim there is likely more: wait briefly for half a batch
    // of free slots rather than claim a handful at a time.
    let mut backlog = false;
    loop {
        // Wait for one free slot, then take as many more as are free.
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let mut permits = vec![first];
        // Every entry of `permits` must hold exactly one slot: it is one job.
        // (A claim batch of 2 or 3 makes `want` 0, and `acquire_many(0)`
        // yields a permit for no slot at all.)
        let want = (batch / 2).saturating_sub(1) as u32;
        if backlog && want > 0 {
            if let Ok(Ok(more)) = tokio::time::timeout(
                Duration::from_millis(2),
                slots.clone().acquire_many_owned(want),
            )
            .await
            {
                let mut more = more;
                while more.num_permits() > 1 {
                    permits.push(more.split(1).expect("more than one permit"));
                }
                permits.push(more);
            }
        }
        while permits.len() < batch {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let mut failed = false;
        // The shortest wait a topic's rate asked for: the next token.
        let mut limited: Option<Duration> = None;
        // From this round's replies: the earliest pool due time, and whether
        // due jobs were left in a pool with no limit holding them back.
        plan.state.lock().unwrap().wake = None;
        let mut next_due: Option<std::time::Instant> = None;
        let mut due_left = false;
        let n_topics = shared.topics.len();
        for i in 0..n_topics {
            if permits.is_empty() || stop.is_cancelled() {
                break;
            }
            let ti = (next_topic + i) % n_topics;
            let topic = &shared.topics[ti];
            // A handler with a capacity of its own: no more than it can start.
            let want = match &topic.gate {
                Some(g) => g.take(permits.len()),
                None => permits.len(),
            };
            if want == 0 {
                continue;
            }
            let part = Partition::known(&topic.name);
            let claimed =
                raw::claim_with_wait(&shared.queue, &part, want, shared.config.lease).await;
            if let Some(g) = &topic.gate {
                let got = claimed.as_ref().map_or(0, |c| c.jobs.len());
                g.unused(want - got.min(want));
            }
            match claimed {
                Ok(got) => {
                    if let Some(raw::Wait::For(d)) = got.wait {
                        limited = Some(limited.map_or(d, |l| l.min(d)));
                    }
                    if let Some((us, at)) = got.clock {
                        plan.state.lock().unwrap().clock = Some((us, at));
                        match got.next_due {
                            Some(d) if d.is_zero() => due_left |= got.wait.is_none(),
                            Some(d) => {
                                let w = at + d;
                                next_due = Some(next_due.map_or(w, |n| n.min(w)));
                            }
                            None => {}
                        }
                    }
                    // (Wait::UntilRunningEnds: the ack or fail that frees a
                    // slot publishes on the ready channel, which wakes us.)
                    // How late each job starts, added to the book once per
                    // claim (its jobs share the claim's clock and minute).
                    let mut starts = crate::Lateness::default();
                    let claimed_us = got.jobs.first().map(|j| j.claimed_us);
                    for mut job in got.jobs {
                        starts.record(job.lateness_us());
                        job.topic.clone_from(&topic.logical);
                        let permit = permits.pop().expect("claimed no more than the free slots");
                        let ticket = Ticket(topic.gate.clone());
                        spawn_slot(&shared, ti, job, (permit, ticket), settle.clone());
                    }
                    if let Some(us) = claimed_us {
                        shared.lateness.record(&topic.name, us, &starts);
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %topic.name, error = %e, "claim failed; retrying in {backoff:?}");
                    failed = true;
                }
            }
        }
        next_topic = (next_topic + 1) % n_topics;
        if let Some(w) = next_due {
            // Messages heard during the round may have planned earlier.
            let mut st = plan.state.lock().unwrap();
            st.wake = Some(st.wake.map_or(w, |p| p.min(w)));
        }
        let starved = !permits.is_empty() && !due_left;
        backlog = !starved && !failed;
        drop(permits);
        if failed {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
            continue;
        }
        backoff = Duration::from_millis(50);
        if starved {
            // Nothing more to claim: sleep until a wake-up (or the safety
            // net), until the next token of a rate-limited topic, or until
            // the pool's next job is due.
            let nap = limited.map_or(shared.config.idle_check, |d| {
                d.min(shared.config.idle_check)
            });
            let nap_until = tokio::time::Instant::now() + nap;
            loop {
                let wake = plan.state.lock().unwrap().wake;
                // To the instant (tokio's sleep would round up to whole ms).
                timer.set(wake);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = notify.notified() => break,
                    _ = tokio::time::sleep_until(nap_until) => break,
                    _ = timer.fired() => {
                        // (Or a deadline replaced since: then sleep on.)
                        if wake.is_some_and(|w| w <= std::time::Instant::now()) {
                            break;
                        }
                    }
                    // A message planned an earlier claim: sleep to that.
                    _ = plan.replan.notified() => continue,
                }
            }
            timer.set(None);
        }
    }
}
