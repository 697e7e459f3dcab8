//! The [`Queue`]'s side of the registry: register a process (and beat for
//! it), read Redis's clock, list who is alive, remove a record.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::record::{
    index_key, record_key, validate_process_id, Gauge, ProcessInfo, BEATS_TO_LIVE,
};
use super::Registration;
use crate::error::{Error, Result};
use crate::queue::Queue;

/// Index entries older than this are trimmed by every beat (their records
/// expired long before).
const INDEX_KEEP_MS: i64 = 3_600_000;
/// Every this many beats, a beat also rewrites the index entry (and trims
/// the index); the others only rewrite the record.
const INDEX_EVERY: u64 = 12;

impl Queue {
    /// Registers a process and beats for it every `period` until the
    /// returned handle is stopped (record removed) or dropped (record left
    /// to expire). A failed beat is logged and tried again next period.
    /// Needs a tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::registry::{ProcessInfo, Role};
    /// let info = ProcessInfo::new(Role::Worker, ["orders"]);
    /// let registration = queue.register_process(info, Duration::from_secs(2))?;
    /// # punctual_testkit::eventually(Duration::from_secs(5), "the first beat", async || {
    /// #     !queue.processes().await.unwrap().is_empty()
    /// # })
    /// # .await;
    /// let me = &queue.processes().await?[0];
    /// assert_eq!(me.id, registration.id());
    /// assert_eq!(me.beat_period_ms, 2_000);
    /// assert!(me.beat_ms >= me.started_ms);
    /// registration.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn register_process(&self, info: ProcessInfo, period: Duration) -> Result<Registration> {
        self.register_gauged(info, period, None)
    }

    /// [`Queue::register_process`], with `waiting` read before each beat.
    pub(super) fn register_gauged(
        &self,
        mut info: ProcessInfo,
        period: Duration,
        waiting: Option<Gauge>,
    ) -> Result<Registration> {
        validate_process_id(&info.id)?;
        if period < Duration::from_millis(100) {
            return Err(Error::invalid("the heartbeat must be at least 100ms"));
        }
        info.beat_period_ms = period.as_millis() as u64;
        let stop = CancellationToken::new();
        let queue = self.clone();
        let id = info.id.clone();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut warned = false;
            let mut clock = None;
            let mut beats: u64 = 0;
            loop {
                if let Some(gauge) = &waiting {
                    info.waiting = gauge();
                }
                match queue.beat(&mut info, &mut clock, beats).await {
                    Ok(()) => {
                        warned = false;
                        beats += 1;
                    }
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!(id = %info.id, error = %e, "registry beat failed; trying again every beat");
                    }
                    Err(_) => {}
                }
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(period) => {}
                }
            }
        });
        Ok(Registration {
            id,
            queue: self.clone(),
            stop,
            task,
        })
    }

    /// Redis's clock, epoch ms (what the registry's times are measured
    /// with).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// let now = queue.redis_now_ms().await?;
    /// assert!(now > 1_700_000_000_000); // epoch ms, after November 2023
    /// # Ok(()) }
    /// ```
    pub async fn redis_now_ms(&self) -> Result<i64> {
        let (secs, micros): (i64, i64) = self.cmd(&redis::cmd("TIME")).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Writes beat number `n` of `info`. Times are Redis's clock: read
    /// once (`TIME`, kept in `clock` with the local instant) and advanced
    /// by the local monotonic clock, so a beat is one command, `SET .. XX`,
    /// which keeps an idle process's load on Redis at 1 command per beat.
    /// The first beat, every [`INDEX_EVERY`]th, and one whose record had
    /// expired (the process was stopped, or Redis lost it) also write the
    /// index entry and trim the index.
    async fn beat(
        &self,
        info: &mut ProcessInfo,
        clock: &mut Option<(i64, std::time::Instant)>,
        n: u64,
    ) -> Result<()> {
        let (base, at) = match *clock {
            Some(c) => c,
            None => {
                let c = (self.redis_now_ms().await?, std::time::Instant::now());
                *clock = Some(c);
                c
            }
        };
        let now = base + at.elapsed().as_millis() as i64;
        if info.started_ms == 0 {
            info.started_ms = now;
        }
        info.beat_ms = now;
        let json = serde_json::to_string(info).expect("a process record serializes");
        let ttl = info.beat_period_ms * BEATS_TO_LIVE as u64;
        let key = record_key(self.prefix(), &info.id);
        if n > 0 && !n.is_multiple_of(INDEX_EVERY) {
            let kept: Option<String> = self
                .cmd(
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&json)
                        .arg("PX")
                        .arg(ttl)
                        .arg("XX"),
                )
                .await?;
            if kept.is_some() {
                return Ok(());
            }
        }
        let index = index_key(self.prefix());
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(&key)
            .arg(json)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("ZADD")
            .arg(&index)
            .arg(now)
            .arg(&info.id)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(&index)
            .arg("-inf")
            .arg(now - INDEX_KEEP_MS)
            .ignore();
        let mut conn = self.conn();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(Error::Redis)
    }

    /// Every live process in the registry, by role, then id. Index entries
    /// whose record expired are removed.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let now = queue.redis_now_ms().await?;
    /// for p in queue.processes().await? {
    ///     println!(
    ///         "{} {} on {} (pid {}), topics {:?}, last beat {} ms ago",
    ///         p.role, p.id, p.host, p.pid, p.topics, now - p.beat_ms
    ///     );
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        let index = index_key(self.prefix());
        let ids: Vec<String> = self
            .cmd(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))
            .await?;
        let mut out = Vec::new();
        let mut stale = Vec::new();
        for chunk in ids.chunks(500) {
            let keys: Vec<String> = chunk
                .iter()
                .map(|id| record_key(self.prefix(), id))
                .collect();
            let vals: Vec<Option<String>> = self.cmd(redis::cmd("MGET").arg(&keys)).await?;
            for (id, v) in chunk.iter().zip(vals) {
                match v.and_then(|s| serde_json::from_str::<ProcessInfo>(&s).ok()) {
                    Some(p) => out.push(p),
                    None => stale.push(id.clone()),
                }
            }
        }
        if !stale.is_empty() {
            self.cmd::<i64>(redis::cmd("ZREM").arg(&index).arg(&stale))
                .await?;
        }
        out.sort_by(|a, b| (a.role, &a.id).cmp(&(b.role, &b.id)));
        Ok(out)
    }

    /// Removes the record of process `id` and of every process under
    /// `<id>/` (a supervisor's reaped child and its resident programs).
    /// Returns how many records were removed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> punctual::Result<()> {
    /// # let redis = punctual_testkit::RedisServer::start();
    /// # let queue = punctual::Queue::connect(redis.url()).await?;
    /// use std::time::Duration;
    /// use punctual::registry::{ProcessInfo, Role};
    /// let info = ProcessInfo::new(Role::Worker, ["orders"]).with_id("billing-7/worker-0");
    /// let registration = queue.register_process(info, Duration::from_secs(1))?;
    /// # punctual_testkit::eventually(Duration::from_secs(5), "the first beat", async || {
    /// #     !queue.processes().await.unwrap().is_empty()
    /// # })
    /// # .await;
    /// drop(registration); // stops beating; the record would live 3 s more
    /// assert_eq!(queue.deregister_process("billing-7").await?, 1); // gone now
    /// assert!(queue.processes().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn deregister_process(&self, id: &str) -> Result<usize> {
        validate_process_id(id)?;
        let index = index_key(self.prefix());
        let ids: Vec<String> = self
            .cmd(redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1))
            .await?;
        let under = format!("{id}/");
        let mut gone: Vec<String> = ids.into_iter().filter(|i| i.starts_with(&under)).collect();
        gone.push(id.to_string());
        let keys: Vec<String> = gone.iter().map(|i| record_key(self.prefix(), i)).collect();
        let n: usize = self.cmd(redis::cmd("DEL").arg(&keys)).await?;
        self.cmd::<i64>(redis::cmd("ZREM").arg(&index).arg(&gone))
            .await?;
        Ok(n)
    }
}
