//! The `groups` phase.

use std::time::Duration;

use anyhow::{Context, Result};
use punctual::{raw, EnqueueStatus, Job, Queue};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::harness::{order_id, payload, status, Layout, CHUNK};
use crate::probe::{round, Snapshot};
use crate::target::TOPIC;
use crate::{Bench, Report};

/// A case of the groups phase: how its N jobs are spread over groups.
#[derive(Debug, Clone, Copy)]
enum GroupCase {
    /// No group: the topic never switches groups on.
    Off,
    /// Job i in group `g<i mod K>`.
    Even(u64),
    /// Two tenants: jobs 0..big in group `big`, then the rest in `small`
    /// (100,000 : 100 scaled to N): the flood first, the small one after.
    Tenants { big: u64 },
}

impl GroupCase {
    /// The case's name in the phase's line.
    fn name(&self) -> String {
        match self {
            GroupCase::Off => "off".into(),
            GroupCase::Even(k) => k.to_string(),
            GroupCase::Tenants { .. } => "2_tenants".into(),
        }
    }

    fn group_of(&self, i: u64) -> Option<String> {
        match self {
            GroupCase::Off => None,
            GroupCase::Even(k) => Some(format!("g{}", i % k)),
            GroupCase::Tenants { big } if i < *big => Some("big".into()),
            GroupCase::Tenants { .. } => Some("small".into()),
        }
    }
}

/// What one case of the groups phase measured.
struct GroupRun {
    enqueue_us: f64,
    claim_us: f64,
    ack_us: f64,
    /// 1-based position, in claim order, of the last job numbered at or
    /// above `big` (the small tenant's jobs).
    last_small: u64,
    /// What went wrong (empty when every job was claimed once and acked).
    problems: Vec<String>,
}

/// One case: N jobs due now enqueued (their groups indexed on the way to
/// ready), all claimed, then all acked, one call of 1,000 at a time,
/// nothing else running; Redis µs per job inside each script (EVALSHA's
/// commandstats). Every job must be claimed once, in its own group, and
/// acked.
async fn groups_case(b: &Bench, q: &Queue, case: GroupCase, big: u64) -> Result<GroupRun> {
    let n = b.args.n;
    let us = |before: &Snapshot, after: &Snapshot, jobs: u64| {
        round(after.scripts_since(before).1 as f64 / jobs.max(1) as f64, 2)
    };
    let mut problems = Vec::new();
    let before = Snapshot::take(&b.target).await?;
    let mut created = 0u64;
    for s in (0..n).step_by(CHUNK as usize) {
        let jobs: Vec<Job> = (s..(s + CHUNK).min(n))
            .map(|i| match case.group_of(i) {
                Some(g) => Job::new(payload(i)).group(g),
                None => Job::new(payload(i)),
            })
            .collect();
        created += q
            .enqueue_batch(TOPIC, jobs)
            .await
            .context("groups: enqueue failed")?
            .iter()
            .filter(|e| e.status == EnqueueStatus::Created)
            .count() as u64;
    }
    let after = Snapshot::take(&b.target).await?;
    let enqueue_us = us(&before, &after, n);
    if created != n {
        problems.push(format!("{created} of {n} created"));
    }

    let mut seen = vec![0u32; n as usize];
    let (mut strays, mut wrong_group, mut position, mut last_small) = (0u64, 0u64, 0u64, 0u64);
    let mut held: Vec<Vec<raw::Lease>> = vec![Vec::new(); b.target.parts.len()];
    let before = Snapshot::take(&b.target).await?;
    for (physical, held) in b.target.parts.iter().zip(held.iter_mut()) {
        let part = physical.parse()?;
        loop {
            let got = raw::claim(q, &part, CHUNK as usize, Duration::from_secs(60)).await?;
            if got.is_empty() {
                break;
            }
            for d in &got {
                position += 1;
                match order_id(&d.payload) {
                    Some(i) if (i as u64) < n => {
                        seen[i] += 1;
                        if d.group != case.group_of(i as u64) {
                            wrong_group += 1;
                        }
                        if i as u64 >= big {
                            last_small = position;
                        }
                    }
                    _ => strays += 1,
                }
                held.push(d.lease());
            }
        }
    }
    let after = Snapshot::take(&b.target).await?;
    let claimed: u64 = held.iter().map(|h| h.len() as u64).sum();
    let claim_us = us(&before, &after, claimed);
    let lost = seen.iter().filter(|c| **c == 0).count();
    let doubled = seen.iter().filter(|c| **c > 1).count();
    if claimed != n || lost > 0 || doubled > 0 || strays > 0 {
        problems.push(format!(
            "claimed {claimed}: {lost} never, {doubled} twice, {strays} strays"
        ));
    }
    if wrong_group > 0 {
        problems.push(format!("{wrong_group} claimed with another group"));
    }
    let groups_left = b.target.queue.groups(TOPIC).await?.len();
    if groups_left > 0 {
        problems.push(format!("{groups_left} groups still indexed"));
    }

    let before = Snapshot::take(&b.target).await?;
    let mut acked = 0u64;
    for (physical, held) in b.target.parts.iter().zip(&held) {
        let part = physical.parse()?;
        for leases in held.chunks(CHUNK as usize) {
            acked += raw::ack(q, &part, leases)
                .await?
                .iter()
                .filter(|ok| **ok)
                .count() as u64;
        }
    }
    let after = Snapshot::take(&b.target).await?;
    let ack_us = us(&before, &after, acked);
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    if acked != n || sets != [0; 4] || records != 0 {
        problems.push(format!(
            "acked {acked}; left pool/ready/running/dead {sets:?}, {records} records"
        ));
    }
    Ok(GroupRun {
        enqueue_us,
        claim_us,
        ack_us,
        last_small,
        problems,
    })
}

/// `groups`: the claim's Redis µs per job with groups off, then with
/// --groups counts of groups (jobs spread evenly), then two tenants
/// (100,000 : 100 jobs, scaled to N; the small tenant's jobs enqueued after
/// the flood), each against groups off (and against the floor's claim, when
/// the floor ran). Also enqueue and ack per job, and where in the claim
/// order the small tenant's last job came, groups off and on.
pub(crate) async fn groups(b: &Bench) -> Result<Report> {
    let n = b.args.n;
    let small = ((n as f64 * 100.0 / 100_100.0).round() as u64).clamp(1, n);
    let big = n - small;
    let mut cases = vec![GroupCase::Off];
    cases.extend(b.args.groups.iter().map(|k| GroupCase::Even(*k)));
    cases.push(GroupCase::Tenants { big });
    // Calls of 1,000, one at a time, as the floor's.
    let q = b.queue_chunked(CHUNK as usize).await?;
    let bar = b.bar(cases.len() as u64, "groups");
    let (mut enqueue, mut claim, mut ack, mut x_off) =
        (Map::new(), Map::new(), Map::new(), Map::new());
    let mut last_small = Map::new();
    let mut problems = Map::new();
    let mut off_us = 0.0;
    let mut names = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        if c > 0 {
            b.clean().await?;
        }
        let name = case.name();
        let run = groups_case(b, &q, *case, big).await?;
        if matches!(case, GroupCase::Off) {
            off_us = run.claim_us;
        }
        if matches!(case, GroupCase::Off | GroupCase::Tenants { .. }) {
            last_small.insert(name.clone(), json!(run.last_small));
        }
        enqueue.insert(name.clone(), json!(run.enqueue_us));
        claim.insert(name.clone(), json!(run.claim_us));
        ack.insert(name.clone(), json!(run.ack_us));
        if off_us > 0.0 {
            x_off.insert(name.clone(), json!(round(run.claim_us / off_us, 2)));
        }
        if !run.problems.is_empty() {
            problems.insert(name.clone(), json!(run.problems.join("; ")));
        }
        names.push(name);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let ok = problems.is_empty();
    #[derive(Serialize)]
    struct SmallTenant<'a> {
        jobs: u64,
        /// Its last job's place in the claim order, groups off and on.
        last_claimed_at: &'a Map<String, Value>,
    }
    #[derive(Serialize)]
    struct Groups<'a> {
        n: u64,
        batch: u64,
        cases: &'a [String],
        claim_us_per_job: &'a Map<String, Value>,
        claim_x_off: &'a Map<String, Value>,
        enqueue_us_per_job: &'a Map<String, Value>,
        ack_us_per_job: &'a Map<String, Value>,
        small_tenant: SmallTenant<'a>,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(skip_serializing_if = "Map::is_empty")]
        problems: &'a Map<String, Value>,
    }
    let mut r = Report::of(
        "groups",
        &Groups {
            n,
            batch: CHUNK,
            cases: &names,
            claim_us_per_job: &claim,
            claim_x_off: &x_off,
            enqueue_us_per_job: &enqueue,
            ack_us_per_job: &ack,
            small_tenant: SmallTenant {
                jobs: small,
                last_claimed_at: &last_small,
            },
            layout: b.layout(),
            ok,
            problems: &problems,
        },
    );
    let f = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let each: Vec<String> = names
        .iter()
        .map(|k| {
            let label = match k.as_str() {
                "off" => "off".to_string(),
                "2_tenants" => format!("2 tenants {big} : {small}"),
                g => format!("{g} groups"),
            };
            format!("{label} {} ({}x)", f(&claim, k), f(&x_off, k))
        })
        .collect();
    r.text = format!(
        "{:<10} claim, Redis µs per job (batches of {CHUNK}, {n} jobs): {}; the small tenant's last job claimed {} of {n} with groups off, {} with groups on  {}",
        "groups",
        each.join(", "),
        f(&last_small, "off"),
        f(&last_small, "2_tenants"),
        status(ok)
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_cases_spread_the_jobs_as_named() {
        assert_eq!(GroupCase::Off.group_of(7), None);
        assert_eq!(GroupCase::Even(10).group_of(17).as_deref(), Some("g7"));
        let t = GroupCase::Tenants { big: 3 };
        assert_eq!(t.group_of(2).as_deref(), Some("big"));
        assert_eq!(t.group_of(3).as_deref(), Some("small"));
        assert_eq!(
            [GroupCase::Off, GroupCase::Even(1000), t].map(|c| c.name()),
            ["off", "1000", "2_tenants"]
        );
        for g in ["g7", "big", "small"] {
            punctual::validate_group(g).unwrap();
        }
    }
}
