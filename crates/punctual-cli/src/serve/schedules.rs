//! `[schedules.NAME]` of the config: added to Redis (or replacing the
//! stored one) by the supervisor at start, with an audit entry for each
//! schedule that was new or changed.

use anyhow::{Context, Result};
use punctual::internal::audit::Entry;
use punctual::Queue;

use super::config::Config;

/// Upserts every schedule of `cfg` (validated already).
pub(crate) async fn upsert(queue: &Queue, cfg: &Config) -> Result<()> {
    for (name, sc) in &cfg.schedules {
        let s = sc.schedule(name)?;
        let old = queue
            .schedule(&sc.topic, name)
            .await
            .with_context(|| format!("cannot read schedule {name} of topic {}", sc.topic))?;
        let action = match &old {
            None => "schedule.add",
            Some(o) if !same(&o.schedule, &s) => "schedule.update",
            Some(_) => continue,
        };
        let stored = queue
            .schedule_put(&sc.topic, s)
            .await
            .with_context(|| format!("cannot store schedule {name} of topic {}", sc.topic))?;
        tracing::info!(topic = %sc.topic, schedule = %name, "{action} from the config");
        let entry = Entry::new("serve", "config", action)
            .topic(&sc.topic)
            .detail(serde_json::to_value(&stored).unwrap_or_default());
        crate::forms::record(queue, entry).await;
    }
    Ok(())
}

/// Whether the config's schedule is the stored one (creation time and
/// paused state are the stored schedule's own).
fn same(stored: &punctual::schedule::Schedule, new: &punctual::schedule::Schedule) -> bool {
    let mut a = stored.clone();
    a.created_ms = new.created_ms;
    a.paused = new.paused;
    &a == new
}
