//! The keeper: extends the leases of the jobs a worker holds.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::held::Extended;
use crate::raw::{self, Lease, Partition};

use super::shared::Shared;

/// A lease the keeper extends, and where it marks the extension.
type HeldLease = (Lease, Arc<Extended>);

/// Extends the leases of every job this process holds, every third of the
/// lease; stops the handler of a job whose lease was lost.
pub(super) async fn keep_leases(shared: Arc<Shared>, stop: CancellationToken) {
    let every = shared.config.lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // Every lease listed now and extended below holds a lease past this.
        let round = std::time::Instant::now();
        let by_topic: Vec<(usize, Vec<HeldLease>)> = shared
            .inflight
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, held)| !held.is_empty())
            .map(|(ti, held)| {
                let leases = held.iter().map(|(id, (token, run))| {
                    (Lease::new(id.clone(), *token), run.extended.clone())
                });
                (ti, leases.collect())
            })
            .collect();
        for (ti, held) in by_topic {
            let topic = &shared.topics[ti].name;
            let part = Partition::known(topic);
            let (held, marks): (Vec<Lease>, Vec<Arc<Extended>>) = held.into_iter().unzip();
            match raw::extend(&shared.queue, &part, &held, shared.config.lease).await {
                Ok(flags) => {
                    for ((Lease { id, token, .. }, ok), mark) in
                        held.into_iter().zip(flags).zip(marks)
                    {
                        if ok {
                            mark.mark(round);
                            continue;
                        }
                        let mut inflight = shared.inflight.lock().unwrap();
                        let held = &mut inflight[ti];
                        // A run that has ended sent its outcome, and its ack
                        // may have deleted the job after this round listed
                        // it (a busy worker, every round): the ack or fail
                        // says what happened, and forgets it.
                        if held
                            .get(&id)
                            .is_some_and(|(t, run)| *t == token && !run.abort.is_finished())
                        {
                            if let Some((_, run)) = held.remove(&id) {
                                run.lost.cancel();
                            }
                            tracing::warn!(topic = %topic, id = %id, "lease lost (expired or cancelled); stopped its handler");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %topic, error = %e, "lease extension failed; will retry")
                }
            }
        }
    }
}
