//! Where schedules are kept: `P:{T}:schedules` (name -> JSON), their
//! watermarks `P:{T}:schedules:last` and the firers' lock; the public
//! calls that add, list, pause, resume and remove them, and taking back
//! the occurrences a changed timing no longer fires.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::model::{validate_name, CatchUp, Schedule, ScheduleInfo};
use super::FIRED_KEEP;
use crate::error::{Error, Result};
use crate::keys::validate_topic;
use crate::partition::{partition_name, partition_of};
use crate::queue::{Queue, MAX_BATCH};
use crate::scripts::SCRIPTS;

/// The lock's lifetime; a firer's pass takes far less.
const LOCK_MS: u64 = 10_000;

/// The keys of a topic's schedules (in the topic's slot, never a
/// partition's).
pub(super) struct Keys {
    pub(super) schedules: String,
    pub(super) last: String,
    pub(super) lock: String,
}

pub(super) fn keys(prefix: &str, topic: &str) -> Keys {
    let base = format!("{prefix}:{{{topic}}}:schedules");
    Keys {
        last: format!("{base}:last"),
        lock: format!("{base}:lock"),
        schedules: base,
    }
}

/// The channel a change to `topic`'s schedules is published on (the key's
/// name).
pub(crate) fn channel(prefix: &str, topic: &str) -> String {
    keys(prefix, topic).schedules
}

/// The job id of an occurrence.
///
/// ```
/// assert_eq!(punctual::schedule::occurrence_id("nightly", 1_796_000_000_000), "nightly@1796000000000");
/// ```
pub fn occurrence_id(name: &str, occurrence_ms: i64) -> String {
    format!("{name}@{occurrence_ms}")
}

static UNLOCK: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

/// The firers' lock, held by one firer pass or one change.
pub(crate) struct Lock {
    key: String,
    token: String,
}

impl Queue {
    pub(super) async fn try_lock(&self, key: &str) -> Result<Option<Lock>> {
        let token = format!("{:016x}", rand::random::<u64>());
        let got: Option<String> = self
            .cmd(
                redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(LOCK_MS),
            )
            .await?;
        Ok(got.map(|_| Lock {
            key: key.to_string(),
            token,
        }))
    }

    /// Takes the lock for a change, waiting while a firer's pass holds it.
    async fn lock_for_change(&self, key: &str) -> Result<Lock> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(LOCK_MS + 2000);
        loop {
            if let Some(l) = self.try_lock(key).await? {
                return Ok(l);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::invalid(format!(
                    "the schedules' lock {key} stayed held for over {} s; try again",
                    LOCK_MS / 1000 + 2
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// For [`Queue::delete_topic`]: takes the firers' lock of `topic`'s
    /// schedules, so that no firer pass enqueues an occurrence while the
    /// topic is deleted.
    pub(crate) async fn lock_schedules(&self, topic: &str) -> Result<Lock> {
        self.lock_for_change(&keys(self.prefix(), topic).lock).await
    }

    /// For [`Queue::delete_topic`], under the lock: deletes every schedule
    /// of `topic` with its watermarks, then releases the lock (its key goes
    /// with it). Firers still running find no schedule.
    pub(crate) async fn delete_schedules(&self, topic: &str, lock: Lock) -> Result<()> {
        let k = keys(self.prefix(), topic);
        let r = self
            .cmd::<i64>(redis::cmd("DEL").arg(&k.schedules).arg(&k.last))
            .await;
        self.unlock(lock).await;
        r?;
        self.publish(&k, "").await;
        Ok(())
    }

    /// `P:{T}:fired` of a topic or partition `physical`.
    pub(crate) fn fired_key(&self, physical: &str) -> String {
        format!("{}:{{{physical}}}:fired", self.prefix())
    }

    /// The keys of `topic`'s schedules: the schedules, their watermarks and
    /// the firers' lock (all in the slot of `topic`).
    pub(crate) fn schedule_keys(&self, topic: &str) -> [String; 3] {
        let k = keys(self.prefix(), topic);
        [k.schedules, k.last, k.lock]
    }

    pub(crate) async fn unlock(&self, lock: Lock) {
        let mut conn = self.conn();
        let r: redis::RedisResult<i64> = UNLOCK
            .key(&lock.key)
            .arg(&lock.token)
            .invoke_async(&mut conn)
            .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, "could not release the schedules' lock; it expires by itself");
        }
    }

    pub(super) async fn read_schedules(&self, key: &str) -> Result<BTreeMap<String, Schedule>> {
        let raw: HashMap<String, String> = self.cmd(redis::cmd("HGETALL").arg(key)).await?;
        let mut out = BTreeMap::new();
        for (name, json) in raw {
            match serde_json::from_str::<Schedule>(&json) {
                Ok(s) => {
                    out.insert(name, s);
                }
                Err(e) => {
                    tracing::warn!(key, name, error = %e, "skipping a schedule whose JSON is invalid")
                }
            }
        }
        Ok(out)
    }

    pub(super) async fn watermarks(&self, key: &str) -> Result<HashMap<String, i64>> {
        self.cmd(redis::cmd("HGETALL").arg(key)).await
    }

    /// Adds a schedule to `topic`, or replaces the one with its name
    /// (upsert). A replaced schedule keeps its creation time, its paused
    /// state and its watermark; if its timing changed, the occurrences its
    /// old timing fired ahead and not yet due are taken back. Returns the
    /// schedule as stored. Firers look at once (`PUBLISH`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// let stored = queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// assert!(stored.created_ms > 0);
    /// // The same name again replaces it, keeping its creation time.
    /// let again = queue.schedule_put("orders", Schedule::cron("sweep", "*/10 * * * *")).await?;
    /// assert_eq!(again.created_ms, stored.created_ms);
    /// assert_eq!(again.cron.as_deref(), Some("*/10 * * * *"));
    /// # Ok(()) }
    /// ```
    pub async fn schedule_put(&self, topic: &str, schedule: Schedule) -> Result<Schedule> {
        validate_topic(topic)?;
        schedule.validate()?;
        let k = keys(self.prefix(), topic);
        let lock = self.lock_for_change(&k.lock).await?;
        let r = self.put_locked(topic, &k, schedule).await;
        self.unlock(lock).await;
        let stored = r?;
        self.publish(&k, &stored.name).await;
        if let Err(e) = self.register_topic(topic).await {
            tracing::warn!(topic, error = %e, "could not add the topic to the set of known topics");
        }
        Ok(stored)
    }

    async fn put_locked(&self, topic: &str, k: &Keys, mut schedule: Schedule) -> Result<Schedule> {
        let old: Option<String> = self
            .cmd(redis::cmd("HGET").arg(&k.schedules).arg(&schedule.name))
            .await?;
        let old = old.and_then(|j| serde_json::from_str::<Schedule>(&j).ok());
        let now = self.redis_now_ms().await?;
        match &old {
            Some(old) => {
                schedule.created_ms = old.created_ms;
                schedule.paused = old.paused;
                if !old.same_timing(&schedule) {
                    self.take_back(topic, k, old, now).await?;
                }
            }
            None => {
                schedule.created_ms = now;
                schedule.paused = false;
                // A new schedule: nothing before now is missed.
                let _: i64 = self
                    .cmd(redis::cmd("HSET").arg(&k.last).arg(&schedule.name).arg(now))
                    .await?;
            }
        }
        let json = serde_json::to_string(&schedule)
            .map_err(|e| Error::invalid(format!("cannot encode the schedule: {e}")))?;
        let _: i64 = self
            .cmd(
                redis::cmd("HSET")
                    .arg(&k.schedules)
                    .arg(&schedule.name)
                    .arg(json),
            )
            .await?;
        Ok(schedule)
    }

    /// Takes back the occurrences of `s` fired ahead (after `now`, up to its
    /// watermark) that are not due yet, and lowers the watermark to `now`.
    /// For catch-up `spread`, also the missed occurrences whose due time was
    /// spread ahead of now: found by their fired marks (`P:{T}:fired`),
    /// made within the spread window (at most [`FIRED_KEEP`]) before now.
    async fn take_back(&self, topic: &str, k: &Keys, s: &Schedule, now: i64) -> Result<u64> {
        let wm: Option<i64> = self
            .cmd(redis::cmd("HGET").arg(&k.last).arg(&s.name))
            .await?;
        let Some(wm) = wm else { return Ok(0) };
        let mut ids: Vec<String> = Vec::new();
        if wm > now {
            ids.extend(
                s.occurrences(now, wm, MAX_BATCH * 10)?
                    .into_iter()
                    .map(|o| occurrence_id(&s.name, o)),
            );
        }
        if let (CatchUp::Spread, Some(window)) = (s.catch_up, s.spread_ms) {
            // (Plus 5 minutes: the marks are made on the clock of the
            // partition's node, which may differ from the one read here.)
            let window = window.min(FIRED_KEEP.as_millis() as u64) as i64 + 300_000;
            ids.extend(self.spread_fired(topic, &s.name, now - window).await?);
        }
        if ids.is_empty() {
            return Ok(0);
        }
        let parts = self.partitions(topic).await?;
        let mut by_part: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for id in ids {
            by_part
                .entry(partition_name(topic, partition_of(&id, parts), parts))
                .or_default()
                .push(id);
        }
        let mut removed = 0;
        for (physical, ids) in by_part {
            for chunk in ids.chunks(MAX_BATCH) {
                let v = self
                    .run_fired(&SCRIPTS.unfire, &physical, |inv| {
                        for id in chunk {
                            inv.arg(id);
                        }
                    })
                    .await?;
                removed += redis::from_redis_value::<u64>(v)
                    .map_err(|e| Error::protocol("unfire", e.to_string()))?;
            }
        }
        if wm > now {
            let _: i64 = self
                .cmd(redis::cmd("HSET").arg(&k.last).arg(&s.name).arg(now))
                .await?;
        }
        Ok(removed)
    }

    /// The ids of `name`'s occurrences fired at or after `since` (ms), from
    /// the fired marks of every partition of `topic` (the ones `unfire`
    /// leaves alone, due or run, are among them). Read in pages of 1000 by
    /// score, each page starting at the last one's highest score past the
    /// ids read at it, so each page costs O(log N + 1000), not its offset.
    async fn spread_fired(&self, topic: &str, name: &str, since: i64) -> Result<Vec<String>> {
        let prefix = format!("{name}@");
        let mut out = Vec::new();
        for physical in self.partition_names(topic).await? {
            let key = self.fired_key(&physical);
            let (mut from, mut skip) = (since.to_string(), 0);
            loop {
                let page: Vec<(String, String)> = self
                    .cmd(
                        redis::cmd("ZRANGE")
                            .arg(&key)
                            .arg(&from)
                            .arg("+inf")
                            .arg("BYSCORE")
                            .arg("LIMIT")
                            .arg(skip)
                            .arg(MAX_BATCH)
                            .arg("WITHSCORES"),
                    )
                    .await?;
                let n = page.len();
                if let Some((_, last)) = page.last() {
                    let at_last = page.iter().rev().take_while(|(_, s)| s == last).count();
                    if *last == from {
                        skip += at_last;
                    } else {
                        (from, skip) = (last.clone(), at_last);
                    }
                }
                out.extend(page.into_iter().map(|(id, _)| id).filter(|id| {
                    id.strip_prefix(&prefix)
                        .is_some_and(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
                }));
                if n < MAX_BATCH {
                    break;
                }
            }
        }
        Ok(out)
    }

    async fn publish(&self, k: &Keys, name: &str) {
        let r: Result<i64> = self
            .cmd(redis::cmd("PUBLISH").arg(&k.schedules).arg(name))
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not publish a schedule change; firers see it within a minute");
        }
    }

    /// Runs a script with the nine keys of `physical` and its fired key.
    pub(super) async fn run_fired(
        &self,
        script: &redis::Script,
        physical: &str,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<redis::Value> {
        self.run_keys(script, physical, true, args).await
    }

    /// The schedules of `topic`, by name, each with its watermark and next
    /// occurrence.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// assert!(queue.schedules("orders").await?.is_empty());
    /// queue.schedule_put("orders", Schedule::cron("b", "0 3 * * *")).await?;
    /// queue.schedule_put("orders", Schedule::cron("a", "0 4 * * *")).await?;
    /// let names: Vec<_> = queue.schedules("orders").await?.into_iter().map(|i| i.schedule.name).collect();
    /// assert_eq!(names, ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub async fn schedules(&self, topic: &str) -> Result<Vec<ScheduleInfo>> {
        validate_topic(topic)?;
        let k = keys(self.prefix(), topic);
        let all = self.read_schedules(&k.schedules).await?;
        if all.is_empty() {
            return Ok(Vec::new());
        }
        let wms = self.watermarks(&k.last).await?;
        let now = self.redis_now_ms().await?;
        let mut out = Vec::with_capacity(all.len());
        for (_, s) in all {
            out.push(info(s, &wms, now));
        }
        Ok(out)
    }

    /// One schedule of `topic`, or `None`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// assert!(queue.schedule("orders", "nightly").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn schedule(&self, topic: &str, name: &str) -> Result<Option<ScheduleInfo>> {
        validate_topic(topic)?;
        validate_name(name)?;
        let k = keys(self.prefix(), topic);
        let json: Option<String> = self
            .cmd(redis::cmd("HGET").arg(&k.schedules).arg(name))
            .await?;
        let Some(json) = json else { return Ok(None) };
        let s: Schedule = serde_json::from_str(&json).map_err(|e| {
            Error::protocol(
                "schedule",
                format!("the stored JSON of {name:?} is invalid: {e}"),
            )
        })?;
        let wms = self.watermarks(&k.last).await?;
        let now = self.redis_now_ms().await?;
        Ok(Some(info(s, &wms, now)))
    }

    /// Removes a schedule; the occurrences it fired ahead and that are not
    /// due yet are taken back. Returns whether it existed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// assert!(queue.schedule_remove("orders", "sweep").await?);
    /// assert!(!queue.schedule_remove("orders", "sweep").await?);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_remove(&self, topic: &str, name: &str) -> Result<bool> {
        self.change_stored(topic, name, async |k, json| {
            if let Ok(s) = serde_json::from_str::<Schedule>(&json) {
                let now = self.redis_now_ms().await?;
                self.take_back(topic, k, &s, now).await?;
            }
            let mut pipe = redis::pipe();
            pipe.atomic()
                .hdel(&k.schedules, name)
                .ignore()
                .hdel(&k.last, name)
                .ignore();
            self.pipe::<()>(&pipe).await?;
            Ok(true)
        })
        .await
    }

    /// Pauses a schedule: it fires nothing until resumed, and the
    /// occurrences it fired ahead and that are not due yet are taken back.
    /// Returns whether it exists.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// assert!(queue.schedule_pause("orders", "sweep").await?);
    /// let info = queue.schedule("orders", "sweep").await?.unwrap();
    /// assert!(info.schedule.paused);
    /// assert_eq!(info.next_ms, None);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_pause(&self, topic: &str, name: &str) -> Result<bool> {
        self.set_paused(topic, name, true).await
    }

    /// Resumes a paused schedule. The occurrences missed while it was
    /// paused are handled by its catch-up policy. Returns whether it exists.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use punctual::schedule::Schedule;
    /// queue.schedule_put("orders", Schedule::cron("sweep", "*/5 * * * *")).await?;
    /// queue.schedule_pause("orders", "sweep").await?;
    /// assert!(queue.schedule_resume("orders", "sweep").await?);
    /// assert!(!queue.schedule("orders", "sweep").await?.unwrap().schedule.paused);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_resume(&self, topic: &str, name: &str) -> Result<bool> {
        self.set_paused(topic, name, false).await
    }

    async fn set_paused(&self, topic: &str, name: &str, paused: bool) -> Result<bool> {
        self.change_stored(topic, name, async |k, json| {
            let mut s: Schedule = serde_json::from_str(&json).map_err(|e| {
                Error::protocol(
                    "schedule",
                    format!("the stored JSON of {name:?} is invalid: {e}"),
                )
            })?;
            if s.paused == paused {
                return Ok(true);
            }
            if paused {
                let now = self.redis_now_ms().await?;
                self.take_back(topic, k, &s, now).await?;
            }
            s.paused = paused;
            let json = serde_json::to_string(&s)
                .map_err(|e| Error::invalid(format!("cannot encode the schedule: {e}")))?;
            let _: i64 = self
                .cmd(redis::cmd("HSET").arg(&k.schedules).arg(name).arg(json))
                .await?;
            Ok(true)
        })
        .await
    }

    /// Runs `change` on the stored JSON of schedule `name` under the
    /// topic's change lock, and tells the firers when it returns `Ok(true)`;
    /// `Ok(false)` without running it when there is no such schedule.
    async fn change_stored(
        &self,
        topic: &str,
        name: &str,
        change: impl AsyncFnOnce(&Keys, String) -> Result<bool>,
    ) -> Result<bool> {
        validate_topic(topic)?;
        validate_name(name)?;
        let k = keys(self.prefix(), topic);
        let lock = self.lock_for_change(&k.lock).await?;
        let r = async {
            let json: Option<String> = self
                .cmd(redis::cmd("HGET").arg(&k.schedules).arg(name))
                .await?;
            match json {
                Some(json) => change(&k, json).await,
                None => Ok(false),
            }
        }
        .await;
        self.unlock(lock).await;
        if matches!(r, Ok(true)) {
            self.publish(&k, name).await;
        }
        r
    }
}

fn info(s: Schedule, wms: &HashMap<String, i64>, now: i64) -> ScheduleInfo {
    let last_ms = wms.get(&s.name).copied();
    let next_ms = if s.paused {
        None
    } else {
        s.next_after(now).ok().flatten()
    };
    ScheduleInfo {
        schedule: s,
        last_ms,
        next_ms,
    }
}
