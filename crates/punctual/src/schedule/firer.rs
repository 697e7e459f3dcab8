//! The firer: every [`crate::Scheduler`] of a topic runs one, which under
//! the schedules' lock enqueues each occurrence up to [`AHEAD`] in advance
//! (the enqueue script's fired guard on) and raises the watermarks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::model::Schedule;
use super::plan::Plan;
use super::store::{keys, occurrence_id, Keys};
use super::{AHEAD, MAX_CATCH_UP};
use crate::error::{Error, Result};
use crate::partition::{partition_name, partition_of};
use crate::queue::{Queue, MAX_SAFE};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// Idle sleep of a firer (a topic without schedules costs one `HGETALL`
/// per such period, unless a change wakes it).
const IDLE: Duration = Duration::from_secs(60);

impl Queue {
    /// Enqueues the planned occurrences of `s` (fired guard on), by
    /// partition, at most [`Queue::enqueue_chunk`] per call.
    async fn fire(&self, topic: &str, s: &Schedule, plan: &Plan) -> Result<usize> {
        let parts = self.partitions(topic).await?;
        let mut by_part: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        for (o, due) in &plan.fire {
            let id = occurrence_id(&s.name, *o);
            by_part
                .entry(partition_name(topic, partition_of(&id, parts), parts))
                .or_default()
                .push((id, *due));
        }
        let mut created = 0;
        for (physical, jobs) in by_part {
            for chunk in jobs.chunks(self.enqueue_chunk()) {
                let v = self
                    .run_fired(&SCRIPTS.enqueue, &physical, |inv| {
                        inv.arg(self.max_payload().min(MAX_SAFE))
                            .arg("0")
                            .arg(chunk.len());
                        for (id, due) in chunk {
                            inv.arg(id)
                                .arg(&s.payload)
                                .arg(format!("a{due}"))
                                .arg(&s.options)
                                .arg("");
                        }
                        inv.arg(parts);
                    })
                    .await?;
                let mut r = Reply::new("enqueue", v)?;
                while !r.is_empty() {
                    let id = r.string()?;
                    match r.int()? {
                        1 => created += 1,
                        0 | 3 | 4 => {}
                        other => {
                            return Err(Error::protocol(
                                "enqueue",
                                format!("unexpected status {other} for {id:?}"),
                            ))
                        }
                    }
                }
            }
        }
        Ok(created)
    }

    /// One firer pass over `topic`: the time until the next pass is needed.
    async fn fire_pass(&self, topic: &str) -> Result<Duration> {
        let k = keys(self.prefix(), topic);
        let all = self.read_schedules(&k.schedules).await?;
        if all.values().all(|s| s.paused) {
            return Ok(IDLE);
        }
        let Some(lock) = self.try_lock(&k.lock).await? else {
            // Another firer is at work; look again shortly.
            return Ok(Duration::from_secs(1));
        };
        let r = self.fire_locked(topic, &k, all).await;
        self.unlock(lock).await;
        r
    }

    async fn fire_locked(
        &self,
        topic: &str,
        k: &Keys,
        all: BTreeMap<String, Schedule>,
    ) -> Result<Duration> {
        let now = self.redis_now_ms().await?;
        let wms = self.watermarks(&k.last).await?;
        let mut wait = IDLE;
        let mut budget = MAX_CATCH_UP;
        let mut failed = None;
        for (name, s) in &all {
            if s.paused {
                continue;
            }
            if budget == 0 {
                // This pass enqueued its share: the next one continues.
                wait = Duration::ZERO;
                break;
            }
            let wm = wms.get(name).copied().unwrap_or(s.created_ms);
            let plan = match s.plan(wm, now, budget) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(topic, schedule = %name, error = %e, "cannot compute the occurrences of a schedule");
                    continue;
                }
            };
            if !plan.fire.is_empty() {
                match self.fire(topic, s, &plan).await {
                    Ok(created) => {
                        if created > 0 {
                            tracing::debug!(topic, schedule = %name, created, "fired occurrences");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(topic, schedule = %name, error = %e, "firing a schedule failed; retrying");
                        failed.get_or_insert(e);
                        continue;
                    }
                }
                budget = budget.saturating_sub(plan.fire.len());
            }
            if plan.watermark != wm {
                let _: i64 = self
                    .cmd(
                        redis::cmd("HSET")
                            .arg(&k.last)
                            .arg(name)
                            .arg(plan.watermark),
                    )
                    .await?;
            }
            if plan.more {
                wait = Duration::ZERO;
            } else if let Some(next) = s.next_after(plan.watermark)? {
                let ms = (next - AHEAD.as_millis() as i64 - now).clamp(0, IDLE.as_millis() as i64);
                wait = wait.min(Duration::from_millis(ms as u64));
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(wait)
    }
}

/// The firer of one topic, run by every [`crate::Scheduler`] of it until
/// `stop`: a pass, then sleep until the next pass is needed or a change to
/// the schedules (`notify`) arrives.
pub(crate) async fn fire_loop(
    queue: Queue,
    topic: String,
    notify: Arc<Notify>,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if stop.is_cancelled() {
            return;
        }
        let wait = match queue.fire_pass(&topic).await {
            Ok(w) => {
                backoff = Duration::from_millis(100);
                w
            }
            Err(e) => {
                tracing::warn!(topic = %topic, error = %e, "schedule firer pass failed; retrying in {backoff:?}");
                let b = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                b
            }
        };
        if wait.is_zero() {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = notify.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
