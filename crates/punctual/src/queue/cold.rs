//! Reading the cold pool (docs/PROTOCOL.md "The cold pool"): the buckets of
//! one topic in order of start, and the live cold jobs of a bucket a page at
//! a time, for listings, `peek` and `check`.

use std::collections::{BTreeMap, BTreeSet};

use super::{Queue, MAX_BATCH};
use crate::error::Result;
use crate::job::Listed;
use crate::keys::TopicKeys;
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// The width of a cold bucket, in ms.
pub(super) const BUCKET_MS: i64 = 60_000;

impl Queue {
    /// The start of the first cold bucket of a topic (a physical name)
    /// after `after` (`None`: the first of all), in order of start.
    pub(super) async fn next_cold_bucket(
        &self,
        keys: &TopicKeys,
        after: Option<i64>,
    ) -> Result<Option<i64>> {
        let min = after.map_or_else(|| "-inf".to_string(), |s| format!("({s}"));
        let starts: Vec<(String, f64)> = self
            .cmd(
                redis::cmd("ZRANGE")
                    .arg(keys.cold())
                    .arg(min)
                    .arg("+inf")
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(1)
                    .arg("WITHSCORES"),
            )
            .await?;
        Ok(starts.first().map(|(_, s)| *s as i64))
    }

    /// One call of the `cold_page` script: the live cold jobs among the
    /// entries `offset..offset + count` of the bucket `start` of `topic` (a
    /// physical name) whose ids start with `prefix`, with their due times,
    /// and the offset of the next page (`None`: the bucket ends here).
    pub(super) async fn cold_page(
        &self,
        topic: &str,
        start: i64,
        offset: u64,
        count: usize,
        prefix: &str,
    ) -> Result<(Option<u64>, Vec<Listed>)> {
        let v = self
            .run(&SCRIPTS.cold_page, topic, |inv| {
                inv.arg(start).arg(offset).arg(count).arg(prefix);
            })
            .await?;
        let mut r = Reply::new("cold_page", v)?;
        let next = r.int()?;
        let mut jobs = Vec::new();
        while !r.is_empty() {
            let id = r.string()?;
            let at_ms = r.int()?;
            jobs.push(Listed { id, at_ms });
        }
        Ok((u64::try_from(next).ok(), jobs))
    }

    /// The first `count` cold jobs of `topic` (a physical name) by due
    /// time: the buckets from the first one until they hold `count`, each
    /// read whole (its entries are in no order), each id once. None of a
    /// bucket that starts after `until` (the caller has `count` jobs due by
    /// then).
    pub(super) async fn peek_cold(
        &self,
        topic: &str,
        count: usize,
        until: Option<i64>,
    ) -> Result<Vec<Listed>> {
        let keys = self.keys(topic);
        let mut out: Vec<Listed> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut bucket = self.next_cold_bucket(&keys, None).await?;
        while let Some(start) = bucket.filter(|s| until.is_none_or(|u| *s <= u)) {
            let mut offset = 0;
            loop {
                let (next, jobs) = self.cold_page(topic, start, offset, MAX_BATCH, "").await?;
                out.extend(jobs.into_iter().filter(|j| seen.insert(j.id.clone())));
                if out.len() > count {
                    // Keep memory bounded in a large bucket: a dropped job
                    // is later than `count` others.
                    out.sort_by_key(|j| j.at_ms);
                    out.truncate(count);
                }
                match next {
                    Some(o) => offset = o,
                    None => break,
                }
            }
            if out.len() >= count {
                break;
            }
            bucket = self.next_cold_bucket(&keys, Some(start)).await?;
        }
        Ok(out)
    }

    /// Of the jobs that the check script called cold, by bucket start, the
    /// ones missing from their bucket: each bucket is read with `LRANGE` in
    /// pages of 1000; an id not seen there is looked up with `LPOS` (the
    /// list may have shifted under the pages while a scheduler moved it)
    /// and then checked again, and reported only when the check still
    /// calls it cold in that bucket (it was not moved meanwhile).
    pub(super) async fn cold_missing(
        &self,
        topic: &str,
        cold: BTreeMap<i64, BTreeSet<String>>,
    ) -> Result<Vec<(String, String)>> {
        let keys = self.keys(topic);
        let mut out = Vec::new();
        for (start, mut ids) in cold {
            let key = keys.cold_bucket(start);
            let mut at = 0usize;
            while !ids.is_empty() {
                let page: Vec<String> = self
                    .cmd(
                        redis::cmd("LRANGE")
                            .arg(&key)
                            .arg(at)
                            .arg(at + MAX_BATCH - 1),
                    )
                    .await?;
                for id in &page {
                    ids.remove(id);
                }
                if page.len() < MAX_BATCH {
                    break;
                }
                at += MAX_BATCH;
            }
            let mut missing = Vec::new();
            for id in ids {
                let pos: Option<i64> = self.cmd(redis::cmd("LPOS").arg(&key).arg(&id)).await?;
                if pos.is_none() {
                    missing.push(id);
                }
            }
            let problem = format!("cold {start}");
            for page in missing.chunks(MAX_BATCH) {
                for (id, p) in self.check_ids(topic, page).await? {
                    if p == problem {
                        out.push((id, format!("cold, but not in its bucket {key}")));
                    }
                }
            }
        }
        Ok(out)
    }

    /// The cold buckets of `topic` (a physical name) that start below meta
    /// `cold_at` (at most 100), as problems: no job is placed below
    /// `cold_at`, and it passes a bucket only once the bucket is empty, so
    /// such a bucket's jobs are no longer in the pool. `cold_at` may go
    /// down (a tick after `cold_after` was lowered), and a bucket made
    /// between two values is sound: so `cold_at` is read again after the
    /// buckets, and only those below both readings count. (Reads, not a
    /// `MULTI`: Redis refuses to queue commands while it is over
    /// `maxmemory`, and `check` must work then.)
    pub(super) async fn cold_below(&self, topic: &str) -> Result<Vec<(String, String)>> {
        let keys = self.keys(topic);
        let cold_at: Option<String> = self
            .cmd(redis::cmd("HGET").arg(keys.meta()).arg("cold_at"))
            .await?;
        let Some(cold_at) = cold_at.and_then(|c| c.parse::<i64>().ok()) else {
            return Ok(Vec::new());
        };
        let starts: Vec<(String, f64)> = self
            .cmd(
                redis::cmd("ZRANGE")
                    .arg(keys.cold())
                    .arg("-inf")
                    .arg(format!("({cold_at}"))
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(100)
                    .arg("WITHSCORES"),
            )
            .await?;
        let again: Option<String> = self
            .cmd(redis::cmd("HGET").arg(keys.meta()).arg("cold_at"))
            .await?;
        let bound = match again.and_then(|c| c.parse::<i64>().ok()) {
            Some(again) => again.min(cold_at),
            None => return Ok(Vec::new()),
        };
        Ok(starts
            .iter()
            .filter(|(_, s)| (*s as i64) < bound)
            .map(|(_, s)| {
                let s = *s as i64;
                (
                    keys.cold_bucket(s),
                    format!(
                        "cold bucket below meta cold_at {cold_at}: its jobs are not in the pool"
                    ),
                )
            })
            .collect())
    }
}
