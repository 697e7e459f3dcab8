//! The `precision` and `precision-load` phases: lateness (handler start
//! minus due), with two probes telling where it comes from.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use punctual::Job;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::harness::{
    counts, fill_pool, is_zero, payload, status, with_pool, Consumer, Counts, Layout, Recorder,
    CHUNK,
};
use crate::probe::{round, Profile, Snapshot};
use crate::stats::{Percentiles, Spread};
use crate::target::TOPIC;
use crate::{Bench, Report};

/// `precision`: consumers running; --rate jobs/s for --secs, each due in
/// [100, 2000] ms; lateness = handler start - due.
pub(crate) async fn precision(b: &Bench) -> Result<Report> {
    precision_at(b, "precision", Flow::Rate(b.args.rate), None).await
}

/// Targets of precision under load, ms: p99 ≤ 10 ms, max ≤ 50 ms, never
/// early, each run counted only with the producer at ≥ 95 % of its rate.
const LOAD_P99_MS: f64 = 10.0;
const LOAD_MAX_MS: f64 = 50.0;
/// The shares of the ceiling the target is measured at, %.
const CEILING_PCTS: [u64; 2] = [50, 80];
/// Jobs per second the flat-out run can hold at most, and jobs in all (its
/// recorder's size).
const FLAT_OUT_MAX_RATE: u64 = 400_000;
const FLAT_OUT_MAX_JOBS: u64 = 5_000_000;

/// `precision-load`: the precision phase at --load-rate jobs/s; then the
/// producer flat out for --secs (its ceiling: the rate it reaches with a
/// due time per job); then at 50 % and at 80 % of that ceiling. One line
/// each; every run but the flat-out one with the target (p99 ≤ 10 ms,
/// max ≤ 50 ms, never early, the producer at ≥ 95 % of the rate).
pub(crate) async fn precision_load(b: &Bench) -> Result<Vec<Report>> {
    let fixed = precision_at(
        b,
        "precision-load",
        Flow::Rate(b.args.load_rate),
        Some(LoadRate {
            rate_from: "fixed",
            ceiling_jobs_per_s: None,
            ceiling_pct: None,
        }),
    )
    .await?;
    b.clean().await?;
    let flat = precision_at(
        b,
        "precision-load",
        Flow::FlatOut,
        Some(LoadRate {
            rate_from: "flat-out",
            ceiling_jobs_per_s: None,
            ceiling_pct: None,
        }),
    )
    .await?;
    b.clean().await?;
    let ceiling = flat
        .get("achieved_rate")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let mut out = vec![fixed, flat];
    for pct in CEILING_PCTS {
        let rate = ((ceiling * pct as f64 / 100.0).round() as u64).clamp(1, 1_000_000);
        out.push(
            precision_at(
                b,
                "precision-load",
                Flow::Rate(rate),
                Some(LoadRate {
                    rate_from: "ceiling",
                    ceiling_jobs_per_s: Some(ceiling),
                    ceiling_pct: Some(pct),
                }),
            )
            .await?,
        );
        b.clean().await?;
    }
    Ok(out)
}

/// How a precision-load run got its rate.
#[derive(Serialize)]
struct LoadRate {
    /// "fixed" (--load-rate), "flat-out" (the ceiling's own run) or
    /// "ceiling" (a share of the flat-out run's rate).
    rate_from: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ceiling_jobs_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ceiling_pct: Option<u64>,
}

/// The producer of a precision run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// This many jobs per second (a batch every 10 ms), for --secs.
    Rate(u64),
    /// Batches of 1,000 back to back, each awaited, for --secs: the rate
    /// the producer reaches with a due time per job.
    FlatOut,
}

/// A probe sample: when it ended (local ms since the run's start) and how
/// long it was stuck, µs.
type Sample = (f64, i64);

/// Two probes running through a precision run, to tell where lateness
/// comes from. `lag`: how late a 1-ms timer of the bench's own runtime
/// fires (the producer and the consumers run on it: a late timer is a
/// process that had no core, or a runtime kept busy). `rtt`: the round
/// trip of a PING every 5 ms (Redis busy with a script or waiting for a
/// core, or the bench late to read the reply).
struct Probes {
    stop: CancellationToken,
    lag: JoinHandle<Vec<Sample>>,
    rtt: JoinHandle<Vec<Sample>>,
}

/// A probe sample longer than this is a stall.
const STALL_US: i64 = 5_000;

impl Probes {
    fn start(b: &Bench, t0: Instant) -> Probes {
        let stop = CancellationToken::new();
        let s = stop.clone();
        let lag = tokio::spawn(async move {
            let mut out = Vec::new();
            let tick = Duration::from_millis(1);
            while !s.is_cancelled() {
                let t = Instant::now();
                tokio::time::sleep(tick).await;
                let over = t.elapsed().saturating_sub(tick);
                out.push((t0.elapsed().as_secs_f64() * 1e3, over.as_micros() as i64));
            }
            out
        });
        let s = stop.clone();
        let mut conn = b.target.masters[0].node.conn();
        let rtt = tokio::spawn(async move {
            let mut out = Vec::new();
            let mut every = tokio::time::interval(Duration::from_millis(5));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !s.is_cancelled() {
                every.tick().await;
                let t = Instant::now();
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                if pong.is_err() {
                    break;
                }
                out.push((
                    t0.elapsed().as_secs_f64() * 1e3,
                    t.elapsed().as_micros() as i64,
                ));
            }
            out
        });
        Probes { stop, lag, rtt }
    }

    async fn stop(self) -> Result<(Vec<Sample>, Vec<Sample>)> {
        self.stop.cancel();
        Ok((self.lag.await?, self.rtt.await?))
    }
}

/// The stalls among `samples` as disjoint intervals of local ms, sorted.
fn stalls(samples: &[Sample]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.1 > STALL_US)
        .map(|&(end, us)| (end - us as f64 / 1e3, end))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (a, z) in v {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(z),
            _ => merged.push((a, z)),
        }
    }
    merged
}

/// Whether [from, to] (local ms) meets one of `stalls`.
fn meets(stalls: &[(f64, f64)], from: f64, to: f64) -> bool {
    let i = stalls.partition_point(|s| s.1 < from);
    stalls.get(i).is_some_and(|s| s.0 <= to)
}

/// The jobs later than [`LOAD_P99_MS`], and what their wait met: a stall of
/// the bench's runtime (`lag`), else a slow PING only (Redis's side), else
/// neither (the path itself: scheduler, wake-up, claim).
#[derive(Serialize)]
struct Late {
    over_ms: f64,
    jobs: u64,
    in_bench_stall: u64,
    in_redis_stall_only: u64,
    in_neither: u64,
}

/// The probes' spread, ms.
#[derive(Serialize)]
struct ProbesMs {
    bench_lag: Percentiles,
    bench_stalls: u64,
    redis_rtt: Percentiles,
    redis_stalls: u64,
}

/// The precision phase with `flow` for --secs; `load`: a run of
/// precision-load, with its target (but for the flat-out run).
async fn precision_at(
    b: &Bench,
    phase: &str,
    flow: Flow,
    load: Option<LoadRate>,
) -> Result<Report> {
    let secs = b.args.secs;
    let cap = match flow {
        Flow::Rate(rate) => rate * secs,
        Flow::FlatOut => (FLAT_OUT_MAX_RATE * secs).min(FLAT_OUT_MAX_JOBS),
    };
    let pool = fill_pool(b).await?;
    let rec = Recorder::new(cap, true);
    let producer = b.queue().await?;
    let conns = Consumer::connect(b, b.args.consumers, true).await?;
    let consumer = Consumer::start(conns, rec.clone(), b.consumer_config());
    b.wait_listening(b.args.consumers, true, phase).await?;
    let bar = b.bar(cap, phase);
    let before = Snapshot::take(&b.target).await?;
    // Redis's clock at the start, to place due times on the local clock.
    let redis_t0_ms = b.target.now_ms().await? as f64;
    let t0 = Instant::now();
    let probes = Probes::start(b, t0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(20_000);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    let run_for = Duration::from_secs(secs);
    loop {
        let due = match flow {
            Flow::Rate(rate) => {
                if sent >= cap {
                    break;
                }
                tick.tick().await;
                ((t0.elapsed().as_secs_f64() * rate as f64) as u64).min(cap)
            }
            Flow::FlatOut => {
                if sent >= cap || t0.elapsed() >= run_for {
                    break;
                }
                (sent + CHUNK).min(cap)
            }
        };
        if due > sent {
            let jobs: Vec<Job> = (sent..due)
                .map(|i| {
                    let delay = Duration::from_millis(rng.random_range(100..=2000));
                    Job::new(payload(i)).delay(delay)
                })
                .collect();
            producer
                .enqueue_batch(TOPIC, jobs)
                .await
                .context("precision: enqueue failed")?;
            sent = due;
        }
        bar.set_position(rec.handled());
    }
    let total = sent;
    rec.expect(total);
    bar.set_length(total);
    // How long the producer took to send them all: longer than --secs when
    // Redis could not take them at this rate (each call awaited in turn).
    let sent_secs = t0.elapsed().as_secs_f64();
    let achieved = (total as f64 / sent_secs.max(1e-9)).round();
    let rate = match flow {
        Flow::Rate(rate) => rate,
        Flow::FlatOut => achieved as u64,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let all = rec.wait_all(&bar, deadline).await;
    let acked = all && b.wait_acked(deadline, pool).await?;
    let elapsed = t0.elapsed();
    let after = Snapshot::take(&b.target).await?;
    let (lag, rtt) = probes.stop().await?;
    bar.finish_and_clear();
    consumer.stop().await?;
    let tally = rec.tally();
    let sets = b.target.sets().await?;
    let records = b.target.records().await?;
    let ok = acked && tally.exact(total) && sets == [pool, 0, 0, 0] && records == pool;
    let samples = rec
        .lateness
        .as_ref()
        .map(|l| std::mem::take(&mut *l.lock().unwrap()))
        .unwrap_or_default();
    let late = Spread::of(samples.iter().map(|s| s.0).collect());
    let at_claim = Spread::of(samples.iter().map(|s| s.1).collect());
    let to_start = Spread::of(samples.iter().map(|s| s.0 - s.1).collect());
    let early = samples.iter().filter(|s| s.0 < 0).count() as u64;
    let profile = after.profile(&before, tally.handled, elapsed);

    // Where the late jobs' waits went.
    let (bench_stalls, redis_stalls) = (stalls(&lag), stalls(&rtt));
    let over_us = (LOAD_P99_MS * 1000.0) as i64;
    let mut lates = Late {
        over_ms: LOAD_P99_MS,
        jobs: 0,
        in_bench_stall: 0,
        in_redis_stall_only: 0,
        in_neither: 0,
    };
    for s in samples.iter().filter(|s| s.0 > over_us) {
        lates.jobs += 1;
        let due = s.2 as f64 - redis_t0_ms;
        let started = due + s.0 as f64 / 1e3;
        if meets(&bench_stalls, due, started) {
            lates.in_bench_stall += 1;
        } else if meets(&redis_stalls, due, started) {
            lates.in_redis_stall_only += 1;
        } else {
            lates.in_neither += 1;
        }
    }
    let probes_ms = ProbesMs {
        bench_lag: Spread::of(lag.iter().map(|s| s.1).collect()).percentiles(),
        bench_stalls: bench_stalls.len() as u64,
        redis_rtt: Spread::of(rtt.iter().map(|s| s.1).collect()).percentiles(),
        redis_stalls: redis_stalls.len() as u64,
    };

    #[derive(Serialize)]
    struct Parts {
        due_to_claim: Percentiles,
        claim_to_start: Percentiles,
    }
    /// The target of precision under load, and whether the run met it.
    #[derive(Serialize)]
    struct Target {
        p99_ms: f64,
        max_ms: f64,
        never_early: bool,
        /// The producer sent at ≥ 95 % of the rate (else the run did not
        /// test that rate).
        rate_reached: bool,
        met: bool,
    }
    #[derive(Serialize)]
    struct Precision {
        rate: u64,
        secs: u64,
        n: u64,
        /// The rate the producer reached: n over the time it took to send
        /// them all (the jobs/s Redis took).
        achieved_rate: f64,
        sent_secs: f64,
        #[serde(flatten)]
        load: Option<LoadRate>,
        lateness_ms: Percentiles,
        early: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        target: Option<Target>,
        parts_ms: Parts,
        late: Late,
        probes_ms: ProbesMs,
        #[serde(skip_serializing_if = "Option::is_none")]
        consumers: Option<u64>,
        #[serde(skip_serializing_if = "is_zero")]
        pool: u64,
        #[serde(flatten)]
        layout: Layout,
        ok: bool,
        #[serde(flatten)]
        counts: Option<Counts>,
        profile: Profile,
    }
    let pct = late.percentiles();
    let rate_reached = achieved >= 0.95 * rate as f64;
    let target = (load.is_some() && flow != Flow::FlatOut).then_some(Target {
        p99_ms: LOAD_P99_MS,
        max_ms: LOAD_MAX_MS,
        never_early: true,
        rate_reached,
        met: ok && early == 0 && rate_reached && pct.p99 <= LOAD_P99_MS && pct.max <= LOAD_MAX_MS,
    });
    let met = target.as_ref().map(|t| t.met);
    let late_text = format!(
        "{} jobs later than {LOAD_P99_MS} ms: {} met a stall of the bench's runtime, {} a slow PING only, {} neither; bench timer lag p99 {} ms ({} stalls > {} ms), PING p99 {} ms ({} stalls)",
        lates.jobs,
        lates.in_bench_stall,
        lates.in_redis_stall_only,
        lates.in_neither,
        probes_ms.bench_lag.p99,
        probes_ms.bench_stalls,
        STALL_US / 1000,
        probes_ms.redis_rtt.p99,
        probes_ms.redis_stalls,
    );
    let mut r = Report::of(
        phase,
        &Precision {
            rate,
            secs,
            n: total,
            achieved_rate: achieved,
            sent_secs: round(sent_secs, 3),
            load,
            lateness_ms: pct,
            early,
            target,
            parts_ms: Parts {
                due_to_claim: at_claim.percentiles(),
                claim_to_start: to_start.percentiles(),
            },
            late: lates,
            probes_ms,
            consumers: (b.args.consumers > 1).then_some(b.args.consumers),
            pool,
            layout: b.layout(),
            ok,
            counts: (!ok).then(|| counts(&tally, sets, records)),
            profile: profile.clone(),
        },
    );
    r.text = format!(
        "{:<10} {total} jobs at {rate}/s for {secs} s (sent in {sent_secs:.1} s: {achieved:.0}/s), due in 100..2000 ms{}: lateness {}; {early} started early{}  {}\n           due -> claim (Redis clock) {}; claim -> handler start (local) {}\n           {late_text}\n{}",
        phase,
        with_pool(pool),
        late.text(),
        match met {
            Some(true) => format!("; target (p99 ≤ {LOAD_P99_MS} ms, max ≤ {LOAD_MAX_MS} ms, never early) met"),
            Some(false) => format!(
                "; target (p99 ≤ {LOAD_P99_MS} ms, max ≤ {LOAD_MAX_MS} ms, never early{}) NOT met",
                if rate_reached { "" } else { ", at the rate: not reached" }
            ),
            None => String::new(),
        },
        status(ok),
        at_claim.text(),
        to_start.text(),
        profile.text()
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_merge_and_a_wait_meets_one_only_when_they_overlap() {
        // (end ms, stuck µs): 3 ms and 12 ms long are below and above 5 ms.
        let samples = [(10.0, 3_000), (30.0, 12_000), (35.0, 8_000), (100.0, 6_000)];
        let s = stalls(&samples);
        // 18..30 and 27..35 merge; 94..100 stays apart; the 3-ms one is none.
        assert_eq!(s, vec![(18.0, 35.0), (94.0, 100.0)]);
        assert!(meets(&s, 0.0, 18.0));
        assert!(meets(&s, 20.0, 21.0));
        assert!(meets(&s, 35.0, 40.0));
        assert!(!meets(&s, 36.0, 93.9));
        assert!(meets(&s, 50.0, 200.0));
        assert!(!meets(&s, 101.0, 300.0));
        assert!(!meets(&[], 0.0, 1e9));
    }
}
