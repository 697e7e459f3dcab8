//! `[schedules.NAME]`: a recurring schedule of the service.

use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::humantime_serde;

/// One recurring schedule (`[schedules.NAME]`); see docs/operations/configure.md.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleConfig {
    /// The topic its jobs go to (one of `[topics]`).
    pub topic: String,
    /// A cron expression (5 fields, or 6 with seconds first).
    #[serde(default)]
    pub cron: Option<String>,
    /// A fixed interval instead ("30s", "5m").
    #[serde(default, with = "humantime_serde::option")]
    pub every: Option<Duration>,
    /// The cron expression's IANA time zone (default UTC).
    #[serde(default = "default_tz")]
    pub tz: String,
    /// Each occurrence's payload.
    #[serde(default)]
    pub payload: String,
    /// all, latest, skip or spread (default all).
    #[serde(default = "default_catch_up")]
    pub catch_up: String,
    /// The window of catch-up spread ("10m").
    #[serde(default, with = "humantime_serde::option")]
    pub spread: Option<Duration>,
    /// Job options: the enqueue M field (max attempts, `;`-separated
    /// options).
    #[serde(default)]
    pub options: String,
}

impl ScheduleConfig {
    /// The schedule it describes, checked.
    pub(crate) fn schedule(&self, name: &str) -> Result<punctual::schedule::Schedule> {
        crate::forms::build_schedule(
            name,
            self.cron.as_deref(),
            self.every,
            &self.tz,
            &self.payload,
            &self.catch_up,
            self.spread,
            &self.options,
        )
        .map_err(|e| anyhow::anyhow!("[schedules.{name}]: {e:#}"))
    }
}

fn default_tz() -> String {
    "UTC".into()
}

fn default_catch_up() -> String {
    "all".into()
}
