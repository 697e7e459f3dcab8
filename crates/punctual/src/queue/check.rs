//! The invariant check through [`Queue`]: every job in exactly one state's
//! set, with its record, across partitions and the cold pool.

use std::collections::{BTreeMap, BTreeSet};

use super::{Queue, MAX_BATCH};
use crate::error::Result;
use crate::job::Violation;
use crate::partition::{partition_name, partition_of};
use crate::reply::Reply;
use crate::scripts::SCRIPTS;

/// How many cold job ids `check` gathers before it looks them up in their
/// buckets.
const COLD_BATCH: usize = 100_000;

impl Queue {
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
}
