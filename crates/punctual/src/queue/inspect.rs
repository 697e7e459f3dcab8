//! Reading jobs through [`Queue`]: one job, listings and peeks (counts:
//! `topics.rs`; the dead letters: `dead.rs`; the check: `check.rs`).

use std::collections::BTreeMap;

use redis::Value;

use super::cold::BUCKET_MS;
use super::{Queue, MAX_BATCH};
use crate::error::{Error, Result};
use crate::job::{JobInfo, ListPage, Listed, State, TopicStats};
use crate::keys::{validate_id, validate_topic};
use crate::partition::partition_name;
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

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
