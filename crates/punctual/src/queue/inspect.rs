//! Reading state through [`Queue`]: one job, listings, counts, the dead
//! letters, the invariant check.

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use super::cold::BUCKET_MS;
use super::{Queue, MAX_BATCH};
use crate::error::{Error, Result};
use crate::job::{JobInfo, ListPage, Listed, State, TopicStats, Violation};
use crate::keys::{topics_key, validate_id, validate_topic};
use crate::partition::{partition_name, partition_of};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// The set of known topics, read by [`Queue::list_topics`].
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// let topics = queue.list_topics().await?;
/// for topic in &topics.valid {
///     println!("{topic}: {} dead", queue.stats(topic).await?.dead);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct Topics {
    /// The valid topic names, sorted.
    pub valid: Vec<String>,
    /// Names in the set that are not valid topics, sorted.
    pub skipped: Vec<SkippedTopic>,
}

/// A name in the set of known topics that is not a valid topic.
///
/// ```no_run
/// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
/// for punctual::SkippedTopic { name, reason, .. } in queue.list_topics().await?.skipped {
///     eprintln!("{name} is in the topic set but is not a topic: {reason}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SkippedTopic {
    /// The name, escaped for printing (bytes that are not UTF-8 as `\xNN`,
    /// invisible and control characters as `\u{..}`).
    pub name: String,
    /// Why it is not a valid topic.
    pub reason: String,
}

impl Queue {
    /// One job by id, or `None` when no such job is live.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// match queue.get("orders", "close:10086").await? {
    ///     Some(job) => println!("{} attempts, in {}", job.attempts, job.state),
    ///     None => println!("done, cancelled, or never enqueued"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, topic: &str, id: &str) -> Result<Option<JobInfo>> {
        validate_topic(topic)?;
        validate_id(id)?;
        let physical = self.route(topic, id).await?;
        let v = self
            .run(&SCRIPTS.get, &physical, |inv| {
                inv.arg(id);
            })
            .await?;
        if v == Value::Nil {
            return Ok(None);
        }
        let mut r = Reply::new("get", v)?;
        let state_name = r.string()?;
        let state: State = state_name
            .parse()
            .map_err(|_| Error::protocol("get", format!("unknown state {state_name:?}")))?;
        let score = r.int()?;
        let attempts = r.int()? as u32;
        let max_attempts = r.int()? as u32;
        let _token = r.int()?;
        let due_ms = r.int()?;
        let created_ms = r.int()?;
        let _backoff = r.string()?;
        let err = r.string()?;
        let payload = r.bytes()?;
        let now_ms = r.int()?;
        let opts = crate::options::parse_field(&r.bytes()?).unwrap_or_default();
        Ok(Some(JobInfo {
            id: id.to_string(),
            state,
            attempts,
            max_attempts,
            due_ms,
            created_ms,
            state_since_ms: matches!(state, State::Running | State::Dead).then_some(score),
            last_error: (!err.is_empty()).then_some(err),
            payload,
            now_ms,
            deadline_ms: opts.deadline_ms,
            timeout_ms: opts.timeout_ms,
            group: opts.group,
            traceparent: opts.traceparent,
            tracestate: opts.tracestate,
        }))
    }

    /// Lists the ids of one state (pool, ready, running or dead) that start
    /// with `id_prefix` (`""`: every id), a page at a time: pass `None`
    /// first, then the returned cursor until it is `None`. At scale: each
    /// page is one or a few `ZSCAN ... MATCH` calls per partition, so a page
    /// costs about `count` entries whatever the set's size, and the
    /// listing visits every partition of a partitioned topic. For
    /// [`State::Pool`], each partition's `pool` set is followed by its cold
    /// pool: the buckets in order of start, read with the `cold_page`
    /// script (docs/PROTOCOL.md "The cold pool"), each cold job with its
    /// due time. As with
    /// `ZSCAN`, a job present throughout the listing is returned at least
    /// once (possibly twice); jobs that move meanwhile may be missed or seen
    /// twice, and so may a cold job the scheduler moves into `pool` after
    /// `pool` was scanned (a job that stays in its bucket is not skipped:
    /// the move pops the bucket's tail, the listing reads from its head); pages are sorted by score, the whole listing is not. A page
    /// holds about `count` ids (1 to 1000; a small set is returned whole).
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let mut cursor = None;
    /// loop {
    ///     let page = queue
    ///         .list("orders", punctual::State::Pool, "order:", cursor.as_deref(), 500)
    ///         .await?;
    ///     for punctual::Listed { id, at_ms: due_ms, .. } in &page.jobs {
    ///         println!("{id} due at {due_ms}");
    ///     }
    ///     match page.cursor {
    ///         Some(c) => cursor = Some(c),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(
        &self,
        topic: &str,
        state: State,
        id_prefix: &str,
        cursor: Option<&str>,
        count: usize,
    ) -> Result<ListPage> {
        validate_topic(topic)?;
        if count == 0 || count > MAX_BATCH {
            return Err(Error::invalid("list pages hold 1 to 1000 jobs"));
        }
        if id_prefix.len() > crate::keys::MAX_ID_LEN {
            return Err(Error::invalid("an id prefix is at most 200 bytes"));
        }
        if !matches!(
            state,
            State::Pool | State::Ready | State::Running | State::Dead
        ) {
            return Err(Error::invalid(format!(
                "cannot list {state} jobs: give pool, ready, running or dead"
            )));
        }
        let k = self.partitions(topic).await?;
        let (mut part, mut at) = match cursor {
            None => (0, At::Scan(0)),
            Some(c) => parse_cursor(c, k, state).ok_or_else(|| {
                Error::invalid(format!(
                    "cursor {c:?} is not one this listing returned (start again without a cursor)"
                ))
            })?,
        };
        let mut pattern = String::with_capacity(id_prefix.len() * 2 + 1);
        for c in id_prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push('*');
        let mut jobs: Vec<Listed> = Vec::new();
        loop {
            let name = partition_name(topic, part, k);
            let keys = self.keys(&name);
            let want = (count - jobs.len().min(count)).max(10);
            let next = match at {
                At::Scan(z) => {
                    let key = match state {
                        State::Pool => keys.pool(),
                        State::Ready => keys.ready(),
                        State::Running => keys.running(),
                        _ => keys.dead(),
                    };
                    let (next, items): (u64, Vec<(Vec<u8>, f64)>) = self
                        .cmd(
                            redis::cmd("ZSCAN")
                                .arg(key)
                                .arg(z)
                                .arg("MATCH")
                                .arg(&pattern)
                                .arg("COUNT")
                                .arg(want),
                        )
                        .await?;
                    jobs.extend(items.into_iter().map(|(id, s)| Listed {
                        id: String::from_utf8_lossy(&id).into_owned(),
                        at_ms: s as i64,
                    }));
                    match (next, state) {
                        (0, State::Pool) => self
                            .next_cold_bucket(&keys, None)
                            .await?
                            .map(|start| At::Cold { start, offset: 0 }),
                        (0, _) => None,
                        (z, _) => Some(At::Scan(z)),
                    }
                }
                At::Cold { start, offset } => {
                    let (next, items) = self
                        .cold_page(&name, start, offset, want, id_prefix)
                        .await?;
                    jobs.extend(items);
                    match next {
                        Some(offset) => Some(At::Cold { start, offset }),
                        None => self
                            .next_cold_bucket(&keys, Some(start))
                            .await?
                            .map(|start| At::Cold { start, offset: 0 }),
                    }
                }
            };
            at = match next {
                Some(at) => at,
                None => {
                    part += 1;
                    if part >= k {
                        jobs.sort_by_key(|j| j.at_ms);
                        return Ok(ListPage { jobs, cursor: None });
                    }
                    At::Scan(0)
                }
            };
            if jobs.len() >= count {
                jobs.sort_by_key(|j| j.at_ms);
                let cursor = match at {
                    At::Scan(z) => format!("{part}-{z}"),
                    At::Cold { start, offset } => format!("{part}-c{start}-{offset}"),
                };
                return Ok(ListPage {
                    jobs,
                    cursor: Some(cursor),
                });
            }
        }
    }

    /// Sizes and counters of a topic.
    /// For a partitioned topic, the partitions add up: sizes and counters
    /// summed, the earliest next due time, the longest ready wait and
    /// overdue age.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let s = queue.stats("orders").await?;
    /// if let Some(ms) = s.oldest_ready_ms {
    ///     println!("the oldest ready job has waited {ms} ms for a worker");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn stats(&self, topic: &str) -> Result<TopicStats> {
        let names = self.partition_names(topic).await?;
        let parts: Vec<TopicStats> =
            futures::future::try_join_all(names.iter().map(|p| self.stats_of(p))).await?;
        let mut total = TopicStats {
            topic: topic.to_string(),
            partitions: names.len() as u32,
            ..TopicStats::default()
        };
        for s in parts {
            total.pool += s.pool;
            total.ready += s.ready;
            total.running += s.running;
            total.dead += s.dead;
            total.paused |= s.paused;
            total.next_due_in_ms = match (total.next_due_in_ms, s.next_due_in_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            total.oldest_ready_ms = total.oldest_ready_ms.max(s.oldest_ready_ms);
            total.overdue += s.overdue;
            total.overdue_ms = total.overdue_ms.max(s.overdue_ms);
            for (k, v) in s.counters {
                *total.counters.entry(k).or_default() += v;
            }
            total.limits = super::limits::add(total.limits, s.limits);
            total.limited = match (total.limited, s.limited) {
                (Some(crate::Limited::MaxRunning), _) => Some(crate::Limited::MaxRunning),
                (a, b) => b.or(a),
            };
        }
        // The registry is advisory: stats do not fail for it.
        if total.running > 0 {
            let waiting: u64 = match self.processes().await {
                Ok(ps) => ps.iter().filter_map(|p| p.waiting.get(topic)).sum(),
                Err(e) => {
                    tracing::debug!(error = %e, "stats: the registry could not be read; waiting jobs counted as running");
                    0
                }
            };
            total.waiting = waiting.min(total.running);
        }
        Ok(total)
    }

    /// Stats of one partition (or unpartitioned topic).
    pub(super) async fn stats_of(&self, topic: &str) -> Result<TopicStats> {
        let v = self.run(&SCRIPTS.stats, topic, |_| {}).await?;
        let mut r = Reply::new("stats", v)?;
        let (pool, ready, running, dead) = (r.int()?, r.int()?, r.int()?, r.int()?);
        let paused = r.int()? == 1;
        let next = r.int()?;
        let oldest = r.int()?;
        let mut c = r.array()?;
        let mut counters = BTreeMap::new();
        while !c.is_empty() {
            let name = c.string()?;
            counters.insert(name, c.int()?.max(0) as u64);
        }
        let overdue = r.int()?;
        let overdue_ms = r.int()?;
        let rate = r.string()?;
        let burst = r.int()?;
        let max_running = r.int()?;
        let limited = r.string()?;
        let limits = super::limits::from_fields(
            Some(rate.as_str()).filter(|r| !r.is_empty()),
            u32::try_from(burst).ok(),
            u32::try_from(max_running).ok(),
        );
        Ok(TopicStats {
            topic: topic.to_string(),
            partitions: 1,
            pool: pool as u64,
            ready: ready as u64,
            running: running as u64,
            waiting: 0,
            dead: dead as u64,
            paused,
            next_due_in_ms: (next >= 0).then_some(next),
            oldest_ready_ms: (oldest >= 0).then_some(oldest),
            overdue: overdue.max(0) as u64,
            overdue_ms: (overdue_ms >= 0).then_some(overdue_ms),
            counters,
            limits,
            limited: crate::Limited::from_wire(&limited),
        })
    }

    /// The known topics (every topic that was ever enqueued to), sorted.
    /// Names in the set that are not valid topics (anyone may `SADD` it) are
    /// left out and logged (once per name and process);
    /// [`Queue::list_topics`] reports them.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// for topic in queue.topics().await? {
    ///     let s = queue.stats(&topic).await?;
    ///     println!("{topic}: {} pool, {} ready", s.pool, s.ready);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn topics(&self) -> Result<Vec<String>> {
        let listed = self.list_topics().await?;
        let mut logged = self.inner.skipped_logged.lock().unwrap();
        for s in &listed.skipped {
            if logged.insert(s.name.clone()) {
                tracing::warn!(topic = %s.name, reason = %s.reason, "skipped an invalid name in the set of known topics");
            }
        }
        Ok(listed.valid)
    }

    /// The known topics, sorted, and the names in the set of known topics
    /// that are not valid topic names (not UTF-8, or refused by
    /// [`crate::validate_topic`]): one bad name never hides the others.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let topics = queue.list_topics().await?;
    /// for s in &topics.skipped {
    ///     eprintln!("skipped {}: {}", s.name, s.reason);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_topics(&self) -> Result<Topics> {
        let names: Vec<Vec<u8>> = self
            .cmd(redis::cmd("SMEMBERS").arg(topics_key(&self.inner.prefix)))
            .await?;
        let mut out = Topics::default();
        for raw in names {
            match String::from_utf8(raw) {
                Ok(name) => match validate_topic(&name) {
                    Ok(()) => out.valid.push(name),
                    Err(e) => out.skipped.push(SkippedTopic {
                        name: name.escape_debug().to_string(),
                        reason: e.to_string(),
                    }),
                },
                Err(e) => out.skipped.push(SkippedTopic {
                    name: e.as_bytes().escape_ascii().to_string(),
                    reason: "not valid UTF-8".into(),
                }),
            }
        }
        out.valid.sort();
        out.skipped.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// A page of dead jobs, most recent death first: `count` (1 to 1000)
    /// jobs after skipping `offset`.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// for job in queue.dead_list("orders", 0, 20).await? {
    ///     println!("{}: {}", job.id, job.last_error.as_deref().unwrap_or("-"));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn dead_list(
        &self,
        topic: &str,
        offset: usize,
        count: usize,
    ) -> Result<Vec<JobInfo>> {
        validate_topic(topic)?;
        if count == 0 || count > MAX_BATCH {
            return Err(Error::invalid("dead list pages hold 1 to 1000 jobs"));
        }
        let names = self.partition_names(topic).await?;
        if names.len() == 1 {
            return self.dead_page(topic, offset, count).await;
        }
        // Partitioned: the newest offset+count of each, merged by time of death.
        let want = offset + count;
        let mut all = Vec::new();
        for p in &names {
            let mut at = 0;
            while at < want {
                let page = self.dead_page(p, at, (want - at).min(MAX_BATCH)).await?;
                let n = page.len();
                all.extend(page);
                if n == 0 {
                    break;
                }
                at += n;
            }
        }
        all.sort_by_key(|j| std::cmp::Reverse(j.state_since_ms));
        Ok(all.into_iter().skip(offset).take(count).collect())
    }

    async fn dead_page(&self, topic: &str, offset: usize, count: usize) -> Result<Vec<JobInfo>> {
        let v = self
            .run(&SCRIPTS.dead_list, topic, |inv| {
                inv.arg(offset).arg(count);
            })
            .await?;
        let mut r = Reply::new("dead_list", v)?;
        let mut out = Vec::new();
        while !r.is_empty() {
            let id = r.string()?;
            let died = r.int()?;
            let attempts = r.int()? as u32;
            let max_attempts = r.int()? as u32;
            let due_ms = r.int()?;
            let created_ms = r.int()?;
            let err = r.string()?;
            let payload = r.bytes()?;
            let opts = crate::options::parse_field(&r.bytes()?).unwrap_or_default();
            out.push(JobInfo {
                id,
                state: State::Dead,
                attempts,
                max_attempts,
                due_ms,
                created_ms,
                state_since_ms: Some(died),
                last_error: (!err.is_empty()).then_some(err),
                payload,
                now_ms: 0,
                deadline_ms: opts.deadline_ms,
                timeout_ms: opts.timeout_ms,
                group: opts.group,
                traceparent: opts.traceparent,
                tracestate: opts.tracestate,
            });
        }
        Ok(out)
    }

    /// Verifies the one-state invariant on a live topic: every job id is in
    /// exactly one of pool, ready, running, dead, and has a record exactly
    /// then, and has an attempts entry only then. Scans the four sets, the
    /// records, the attempts hash and the set of retried ids in pages; each page is checked
    /// atomically, so jobs moving meanwhile are never reported falsely. A
    /// job in the cold pool must have an entry in its bucket: the buckets
    /// of the cold jobs found are read, and a cold job missing from its
    /// bucket is reported (after a second look, so a job moved meanwhile is
    /// not), as is a cold bucket that starts below meta `cold_at`. For
    /// a partitioned topic, every partition is checked, and every id must be
    /// in the partition its id maps to. A group held until one of its running
    /// jobs ends while fewer of its jobs run than its max_running (nothing
    /// would release it) is reported with an empty id.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// let violations = queue.check("orders").await?;
    /// assert!(violations.is_empty(), "broken invariants: {violations:?}");
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, topic: &str) -> Result<Vec<Violation>> {
        let k = self.partitions(topic).await?;
        let mut out = Vec::new();
        for p in 0..k {
            out.extend(self.check_partition(topic, p, k).await?);
        }
        Ok(out)
    }

    /// One call of the check script on up to 1000 ids: the (id, problem)
    /// pairs it reports.
    pub(super) async fn check_ids<I: redis::ToRedisArgs + Sync>(
        &self,
        topic: &str,
        ids: &[I],
    ) -> Result<Vec<(String, String)>> {
        let v = self
            .run(&SCRIPTS.check, topic, |inv| {
                inv.arg(ids);
            })
            .await?;
        let mut r = Reply::new("check", v)?;
        let mut out = Vec::new();
        while !r.is_empty() {
            let id = r.string()?;
            out.push((id, r.string()?));
        }
        Ok(out)
    }

    async fn check_partition(&self, logical: &str, part: u32, k: u32) -> Result<Vec<Violation>> {
        let topic = &partition_name(logical, part, k);
        let keys = self.keys(topic);
        let mut found: BTreeMap<String, String> = BTreeMap::new();
        // The cold jobs found, by bucket start, looked up in their buckets
        // after the scans, or whenever they reach COLD_BATCH ids (memory
        // stays bounded; a bucket may then be read more than once).
        let mut cold: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
        let mut cold_ids = 0;
        let scans = [
            ("HSCAN", keys.jobs().to_string()),
            ("ZSCAN", keys.pool().to_string()),
            ("ZSCAN", keys.ready().to_string()),
            ("ZSCAN", keys.running().to_string()),
            ("ZSCAN", keys.dead().to_string()),
            ("HSCAN", keys.attempts().to_string()),
            ("SSCAN", keys.retried()),
        ];
        for (scan, key) in &scans {
            let mut cursor: u64 = 0;
            loop {
                let (next, items): (u64, Vec<Vec<u8>>) = self
                    .cmd(redis::cmd(scan).arg(key).arg(cursor).arg("COUNT").arg(500))
                    .await?;
                // HSCAN and ZSCAN return member, value pairs: keep the
                // members. SSCAN returns members.
                let step = if *scan == "SSCAN" { 1 } else { 2 };
                let ids: Vec<&[u8]> = items.iter().step_by(step).map(|v| &v[..]).collect();
                for id in &ids {
                    let id = String::from_utf8_lossy(id);
                    let home = partition_of(&id, k);
                    if home != part {
                        found.insert(
                            id.into_owned(),
                            format!("in partition {part}, but its id maps to partition {home}"),
                        );
                    }
                }
                for page in ids.chunks(MAX_BATCH) {
                    for (id, problem) in self.check_ids(topic, page).await? {
                        // A cold job (not a problem by itself): it must be
                        // in its bucket, looked up below.
                        match problem.strip_prefix("cold ").map(str::parse::<i64>) {
                            Some(Ok(start)) => {
                                cold.entry(start).or_default().insert(id);
                                cold_ids += 1;
                            }
                            _ => {
                                found.insert(id, problem);
                            }
                        }
                    }
                }
                if cold_ids >= COLD_BATCH {
                    for (id, problem) in self.cold_missing(topic, std::mem::take(&mut cold)).await?
                    {
                        found.entry(id).or_insert(problem);
                    }
                    cold_ids = 0;
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        for (id, problem) in self.cold_missing(topic, cold).await? {
            found.entry(id).or_insert(problem);
        }
        for (key, problem) in self.cold_below(topic).await? {
            found.insert(key, problem);
        }
        let mut out: Vec<Violation> = found
            .into_iter()
            .map(|(id, problem)| Violation {
                topic: topic.to_string(),
                id,
                problem,
            })
            .collect();
        // The held groups (the check script with no ids): a group held
        // until a running job ends with fewer running than its max_running.
        let v = self.run(&SCRIPTS.check, topic, |_| {}).await?;
        let mut r = Reply::new("check", v)?;
        while !r.is_empty() {
            let group = r.string()?;
            out.push(Violation {
                topic: topic.to_string(),
                id: String::new(),
                problem: format!(
                    "group {group:?} {}; any change of the group limits returns every held group (e.g. `punctual groups {logical} limit {group} --max-running N`)",
                    r.string()?
                ),
            });
        }
        Ok(out)
    }

    /// The first `count` (1 to 1000) ids of one state, in score order, with
    /// their scores in epoch ms: for [`State::Pool`] and [`State::Ready`]
    /// the next due jobs and their due times, for [`State::Running`] the
    /// leases that expire next, for [`State::Dead`] the oldest deaths. A
    /// partitioned topic's partitions are merged. Read-only: one `ZRANGE`
    /// per partition; for the pool, also the cold buckets from the first
    /// until they hold `count` jobs (each read whole, by `cold_page`).
    /// For dashboards; use [`Queue::get`] for a job's record.
    ///
    /// ```no_run
    /// # async fn demo(queue: punctual::Queue) -> punctual::Result<()> {
    /// for punctual::Listed { id, at_ms: due_ms, .. } in queue.peek("orders", punctual::State::Pool, 10).await? {
    ///     println!("{id} is due at {due_ms}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn peek(&self, topic: &str, state: State, count: usize) -> Result<Vec<Listed>> {
        validate_topic(topic)?;
        if count == 0 || count > MAX_BATCH {
            return Err(Error::invalid("peek shows 1 to 1000 jobs"));
        }
        if !matches!(
            state,
            State::Pool | State::Ready | State::Running | State::Dead
        ) {
            return Err(Error::invalid(format!(
                "cannot peek at {state} jobs: give pool, ready, running or dead"
            )));
        }
        let mut all: Vec<Listed> = Vec::new();
        for name in self.partition_names(topic).await? {
            let keys = self.keys(&name);
            let key = match state {
                State::Pool => keys.pool(),
                State::Ready => keys.ready(),
                State::Running => keys.running(),
                _ => keys.dead(),
            };
            let items: Vec<(Vec<u8>, f64)> = self
                .cmd(
                    redis::cmd("ZRANGE")
                        .arg(key)
                        .arg(0)
                        .arg(count - 1)
                        .arg("WITHSCORES"),
                )
                .await?;
            // With `count` jobs in pool, a cold job due after the last of
            // them cannot be among the first `count`.
            let last = (items.len() == count).then(|| items[count - 1].1 as i64);
            all.extend(items.into_iter().map(|(id, s)| Listed {
                id: String::from_utf8_lossy(&id).into_owned(),
                at_ms: s as i64,
            }));
            if state == State::Pool {
                all.extend(self.peek_cold(&name, count, last).await?);
            }
        }
        all.sort_by_key(|j| j.at_ms);
        all.truncate(count);
        Ok(all)
    }
}

/// How many cold job ids `check` gathers before it looks them up in their
/// buckets.
const COLD_BATCH: usize = 100_000;

/// Where a listing goes on in one partition: a `ZSCAN` cursor over the
/// state's set, or (pool only, after `pool`) an offset into a cold bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Scan(u64),
    Cold { start: i64, offset: u64 },
}

/// A cursor of [`Queue::list`]: `<partition>-<ZSCAN cursor>`, or for the
/// pool `<partition>-c<bucket start>-<offset>`; `None` when it is not one
/// (of a partition past `k`, or of a bucket for another state).
fn parse_cursor(c: &str, k: u32, state: State) -> Option<(u32, At)> {
    let (p, rest) = c.split_once('-')?;
    let p: u32 = p.parse().ok()?;
    if p >= k {
        return None;
    }
    let at = match rest.strip_prefix('c') {
        None => At::Scan(rest.parse().ok()?),
        Some(bucket) => {
            let (start, offset) = bucket.split_once('-')?;
            let start: i64 = start.parse().ok()?;
            if state != State::Pool || start < 0 || start % BUCKET_MS != 0 {
                return None;
            }
            At::Cold {
                start,
                offset: offset.parse().ok()?,
            }
        }
    };
    Some((p, at))
}
