//! `punctual import zset`: moves the members of a home-made ZSET queue
//! (members are JSON, scores are due times) into a topic, safely.
//!
//! Each member becomes a job due at its score (absolute time), with the
//! member's text as payload and its id field as job id. A member is removed
//! from the ZSET (`ZREM` of exactly that member) only after punctual's
//! enqueue of it returned, so a crash at any point loses nothing; a rerun
//! finds what a crash left behind live in punctual already (the id is a
//! duplicate and the live job's payload is this member) and only removes
//! it; a member whose id is live with another payload stays and is
//! reported. Members that are not JSON, lack the id
//! field, or have an unusable score stay where they are and are reported.

use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use punctual::{EnqueueStatus, Job, Queue};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value as RValue};
use serde_json::{json, Value};

use crate::context::Ctx;
use crate::exit;
use crate::output::{emit, emit_json, one_line};

/// A score at or above this is read as milliseconds by `--scores auto`
/// (1e11 s is the year 5138; 1e11 ms is March 1973).
const MS_THRESHOLD: f64 = 1e11;

/// How many bad members the report names.
const NAMED: usize = 10;

/// `import` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
    /// Move the members of a ZSET queue (JSON members, due-time scores)
    /// into a topic.
    ///
    /// Each member becomes a job due at its score (an absolute time), with
    /// the member's text as payload and the value of --id-field as job id.
    /// A member is removed from KEY only after punctual accepted it, so the
    /// import can be killed at any point and run again: nothing is lost and
    /// nothing doubled (a member whose id is live in the topic already, with
    /// this member as payload, is only removed; with another payload, or
    /// when the id is dead in the topic, it is left and reported). Members that are not JSON, lack the id field or have
    /// an unusable score stay in KEY and are reported (exit 1). Stop the
    /// old consumer first; the old producer may keep writing (run the
    /// import again to move what it added).
    #[command(after_help = "\
Examples:
  # say what would happen, change nothing
  punctual import zset delayed:orders --topic orders --id-field uuid --dry-run
  # then move them
  punctual import zset delayed:orders --topic orders --id-field uuid")]
    Zset(ZsetArgs),
}

/// How to read the scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scores {
    /// Per member: a score of 1e11 or more is milliseconds, else seconds.
    Auto,
    /// Epoch seconds (fractions allowed).
    S,
    /// Epoch milliseconds.
    Ms,
}

/// Arguments of `import zset`.
#[derive(Debug, Args)]
pub(crate) struct ZsetArgs {
    /// The ZSET to import from (any key, not one of punctual's).
    pub key: String,

    /// The topic the jobs go to.
    #[arg(long, value_name = "TOPIC")]
    pub topic: String,

    /// The field of each member's JSON object holding its unique id (a
    /// string or an integer), which becomes the job id.
    #[arg(long, value_name = "FIELD")]
    pub id_field: String,

    /// How the scores are due times: auto (per member: 1e11 or more is
    /// milliseconds, else seconds; right for every date from 1973 to 5138),
    /// s (epoch seconds) or ms (epoch milliseconds).
    #[arg(long, value_name = "UNIT", value_enum, default_value_t = Scores::Auto)]
    pub scores: Scores,

    /// Say what would be imported and which members are bad; change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Members per round trip (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub batch: u16,

    /// Deliveries before a job goes to dead (default: the topic's setting).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: Option<u32>,
}

/// A connection for commands on the source key: the node, or a cluster.
#[derive(Clone)]
enum Source {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Source {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, RValue> {
        match self {
            Source::Single(c) => c.req_packed_command(cmd),
            Source::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<RValue>> {
        match self {
            Source::Single(c) => c.req_packed_commands(cmd, offset, count),
            Source::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Source::Single(c) => c.get_db(),
            Source::Cluster(c) => c.get_db(),
        }
    }
}

async fn source(ctx: &Ctx, queue: &Queue) -> Result<Source> {
    let url = &ctx.global.redis_url;
    let what = || format!("cannot reach Redis at {}", punctual::redact(url));
    if queue.is_cluster() {
        let client =
            redis::cluster::ClusterClient::new(punctual::split_seeds(url)).with_context(what)?;
        Ok(Source::Cluster(
            client.get_async_connection().await.with_context(what)?,
        ))
    } else {
        let client = redis::Client::open(url.as_str()).with_context(what)?;
        Ok(Source::Single(
            client
                .get_multiplexed_async_connection()
                .await
                .with_context(what)?,
        ))
    }
}

/// Runs an `import` subcommand.
pub(crate) async fn run(ctx: &Ctx, cmd: ImportCommand) -> Result<()> {
    match cmd {
        ImportCommand::Zset(a) => zset(ctx, a).await,
    }
}

/// A member that stays in the ZSET, and why.
struct Bad {
    member: String,
    reason: String,
}

/// What a run did (or, dry, would do).
#[derive(Default)]
struct Report {
    /// New jobs (dry run: members that would be imported).
    imported: usize,
    /// Members whose id was live in the topic already.
    already: usize,
    /// Members removed from the ZSET.
    removed: usize,
    /// Scores read as seconds and as milliseconds.
    as_s: usize,
    as_ms: usize,
    bad: Vec<Bad>,
}

/// The job of one member, or why there is none.
fn job_of(
    member: &[u8],
    score: f64,
    args: &ZsetArgs,
    max_payload: usize,
    report: &mut Report,
) -> Result<Job, String> {
    let v: Value = serde_json::from_slice(member).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(o) = &v else {
        return Err("not a JSON object".into());
    };
    let id = match o.get(&args.id_field) {
        None | Some(Value::Null) => return Err(format!("no {:?} field", args.id_field)),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
        Some(other) => {
            return Err(format!(
                "{:?} is {other}, not a string or an integer",
                args.id_field
            ))
        }
    };
    if member.len() > max_payload {
        return Err(format!(
            "{} bytes: over the payload limit of {max_payload} (--max-payload)",
            member.len()
        ));
    }
    if !score.is_finite() || score < 0.0 {
        return Err(format!("score {score} is not a due time"));
    }
    let (ms, in_ms) = match args.scores {
        Scores::S => {
            if score >= MS_THRESHOLD {
                return Err(format!(
                    "score {score} read as seconds is after the year 5000: are the scores milliseconds (--scores ms)?"
                ));
            }
            (score * 1000.0, false)
        }
        Scores::Ms => {
            if score < MS_THRESHOLD {
                return Err(format!(
                    "score {score} read as milliseconds is a time in 1970-1973: are the scores seconds (--scores s or auto)?"
                ));
            }
            (score, true)
        }
        Scores::Auto if score >= MS_THRESHOLD => (score, true),
        Scores::Auto => (score * 1000.0, false),
    };
    let mut job = Job::new(member.to_vec())
        .id(id)
        .at(UNIX_EPOCH + Duration::from_millis(ms.round() as u64));
    if let Some(m) = args.max_attempts {
        job = job.max_attempts(m);
    }
    job.validate().map_err(|e| e.to_string())?;
    if in_ms {
        report.as_ms += 1;
    } else {
        report.as_s += 1;
    }
    Ok(job)
}

async fn zset(ctx: &Ctx, args: ZsetArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let queue = ctx.queue().await?;
    let mut src = source(ctx, &queue).await?;
    let kind: String = redis::cmd("TYPE")
        .arg(&args.key)
        .query_async(&mut src)
        .await?;
    match kind.as_str() {
        "zset" => {}
        "none" => {
            return Err(exit::problem(format!(
                "there is no key {:?} (check the name, --redis and the database number in the URL)",
                args.key
            )))
        }
        other => {
            return Err(exit::problem(format!(
                "{:?} is a {other}, not a ZSET: this command imports sorted sets whose scores are due times",
                args.key
            )))
        }
    }
    let mut report = Report::default();
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, items): (u64, Vec<(Vec<u8>, f64)>) = redis::cmd("ZSCAN")
            .arg(&args.key)
            .arg(cursor)
            .arg("COUNT")
            .arg(args.batch)
            .query_async(&mut src)
            .await?;
        let mut members = Vec::new();
        let mut jobs = Vec::new();
        for (member, score) in items {
            // ZSCAN may return a member twice.
            if !seen.insert(member.clone()) {
                continue;
            }
            match job_of(&member, score, &args, queue.max_payload(), &mut report) {
                Ok(job) => {
                    jobs.push(job);
                    members.push(member);
                }
                Err(reason) => report.bad.push(Bad {
                    member: one_line(&String::from_utf8_lossy(&member), 80),
                    reason,
                }),
            }
        }
        if args.dry_run {
            report.imported += jobs.len();
        } else if !jobs.is_empty() {
            let results = queue.enqueue_batch(&args.topic, jobs).await?;
            // Only now, and only what punctual holds, leaves the ZSET.
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(&args.key);
            let mut removing = 0;
            for (r, m) in results.iter().zip(&members) {
                if r.status == EnqueueStatus::Dead {
                    // Not imported: the id is in punctual's dead set, so
                    // this job would never run. The member stays.
                    report.bad.push(Bad {
                        member: one_line(&String::from_utf8_lossy(m), 80),
                        reason: format!(
                            "id {:?} is dead in topic {:?}: replay or purge it (punctual dead replay/purge), then run the import again",
                            r.id, args.topic
                        ),
                    });
                    continue;
                }
                if r.status == EnqueueStatus::Duplicate {
                    // Live already: this very member (imported before a
                    // crash), or another member with the same id, which
                    // must not vanish.
                    let live = queue.get(&args.topic, &r.id).await?;
                    let reason = match live {
                        Some(info) if info.payload == *m => {
                            report.already += 1;
                            None
                        }
                        Some(_) => Some(format!(
                            "id {:?} is live in topic {:?} with another payload (a second member with this id?): cancel that job or change this member's id",
                            r.id, args.topic
                        )),
                        None => Some(format!(
                            "id {:?} was live in topic {:?} a moment ago and is gone now: run the import again",
                            r.id, args.topic
                        )),
                    };
                    if let Some(reason) = reason {
                        report.bad.push(Bad {
                            member: one_line(&String::from_utf8_lossy(m), 80),
                            reason,
                        });
                        continue;
                    }
                } else {
                    report.imported += 1;
                }
                zrem.arg(m);
                removing += 1;
            }
            if removing > 0 {
                let n: usize = zrem.query_async(&mut src).await?;
                report.removed += n;
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    if !args.dry_run {
        let detail = json!({
            "key": args.key, "imported": report.imported, "already": report.already,
            "removed": report.removed, "left": report.bad.len(),
        });
        super::audit::record(
            &queue,
            super::audit::cli_entry("import", &args.topic, detail),
        )
        .await;
    }
    print_report(ctx, &args, &report)?;
    if !report.bad.is_empty() {
        let mut msg = format!(
            "{} left in {:?} (fix or remove them, then run the import again)",
            super::plural(report.bad.len(), "member was", "members were"),
            args.key
        );
        for b in report.bad.iter().take(NAMED) {
            msg.push_str(&format!("; {}: {}", b.member, b.reason));
        }
        if report.bad.len() > NAMED {
            msg.push_str(&format!("; and {} more", report.bad.len() - NAMED));
        }
        return Err(exit::problem(msg));
    }
    Ok(())
}

fn print_report(ctx: &Ctx, args: &ZsetArgs, r: &Report) -> Result<()> {
    if ctx.json() {
        return emit_json(&json!({
            "key": args.key, "topic": args.topic, "dry_run": args.dry_run,
            "imported": r.imported, "already": r.already, "removed": r.removed,
            "scores_seconds": r.as_s, "scores_ms": r.as_ms,
            "bad": r.bad.iter().map(|b| json!({"member": b.member, "reason": b.reason})).collect::<Vec<_>>(),
        }));
    }
    let scores = format!(
        "scores read as seconds: {}, as milliseconds: {}",
        r.as_s, r.as_ms
    );
    if args.dry_run {
        emit(&format!(
            "dry run: would import {} members of {:?} into topic {:?} ({scores}); {} would stay; nothing was changed\n",
            r.imported,
            args.key,
            args.topic,
            r.bad.len()
        ))
    } else {
        emit(&format!(
            "imported {} members of {:?} into topic {:?} ({} already there); removed {} from {:?} ({scores})\n",
            r.imported, args.key, args.topic, r.already, r.removed, args.key
        ))
    }
}
