//! `punctual import zset`: moves the members of a home-made ZSET queue
//! (members are JSON, scores are due times) into a topic, safely.
//!
//! Each member becomes a job due at its score (absolute time), with the
//! member's text as payload and its id field (or an id template filled from
//! its fields) as job id. A member is removed from the ZSET (`ZREM` of
//! exactly that member) only after punctual's enqueue of it returned, so a
//! crash at any point loses nothing. Nothing is doubled by a rerun either,
//! even when the jobs a crashed run enqueued have run and been acked
//! meanwhile:
//!
//! - each member in flight is noted in a journal (a HASH in the source
//!   key's slot, `journal_key`) before its enqueue, after its id's mark
//!   (below) was dropped; its entry leaves with it, in one `MULTI` with
//!   the `ZREM`;
//! - the enqueue marks each job it creates in `P:{T}:fired`, in the same
//!   script, and creates no job whose id is marked there
//!   (`EnqueueOptions::mark`); the marks are dropped once their members
//!   left the ZSET;
//! - so a member a rerun finds noted whose id is marked was enqueued by the
//!   stopped run: it is only removed, even if its job has run since.
//!
//! A member whose id is live with another payload, or dead, stays and is
//! reported. Members that are not JSON, lack the id field, or have an
//! unusable score stay where they are and are reported. Marks older than
//! 7 days may be trimmed by any marked enqueue: a rerun more than 7 days
//! after an interruption may enqueue again the jobs that run enqueued and
//! that have run since.

use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use punctual::{EnqueueOptions, EnqueueStatus, Job, Queue};
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
    /// the member's text as payload and the value of --id-field (or the id
    /// --id-template makes of its fields) as job id.
    /// A member is removed from KEY only after punctual accepted it, so the
    /// import can be killed at any point and run again within 7 days:
    /// nothing is lost and nothing doubled, even if the jobs the killed run
    /// enqueued have run since. Each member in flight is noted in the hash
    /// KEY:punctual-import ({KEY}:punctual-import on a cluster when KEY has
    /// no hash tag) until its ZREM, and the job made of it is marked in the
    /// topic (P:{T}:fired) until then; marks older than 7 days may be
    /// trimmed, so a rerun after more than 7 days may enqueue those jobs
    /// again. A member whose
    /// id is live in the topic already, with this member as payload, is
    /// only removed; with another payload, or when the id is dead in the
    /// topic, it is left and reported. Members that are not JSON, lack the
    /// id field or have an unusable score stay in KEY and are reported
    /// (exit 1). Stop the old consumer first; the old producer may keep
    /// writing (run the import again to move what it added).
    #[command(after_help = "\
Examples:
  # say what would happen, change nothing
  punctual import zset delayed:orders --topic orders --id-field uuid --dry-run
  # then move them
  punctual import zset delayed:orders --topic orders --id-field uuid
  # ids as the new producer writes them: {\"order_id\":100001} -> order:100001
  punctual import zset delayed:orders --topic orders --id-template 'order:{order_id}'")]
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
    #[arg(
        long,
        value_name = "FIELD",
        required_unless_present = "id_template",
        conflicts_with = "id_template"
    )]
    pub id_field: Option<String>,

    /// The job id made from each member's fields, so that imported ids
    /// match what the new producer writes: each {FIELD} is replaced by the
    /// value of that top-level field (a string or an integer), e.g.
    /// 'order:{order_id}' makes order:100001 of {"order_id":100001}. Other
    /// text is kept as is; braces are only for fields.
    #[arg(long, value_name = "TEMPLATE", value_parser = parse_template)]
    pub id_template: Option<Template>,

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

/// An id template: literal text and `{field}` placeholders, in order.
#[derive(Debug, Clone)]
pub(crate) struct Template(Vec<Part>);

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Field(String),
}

fn parse_template(s: &str) -> Result<Template, String> {
    let mut parts = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                parts.push(Part::Text(rest.to_string()));
                break;
            }
            Some(i) if rest.as_bytes()[i] == b'}' => {
                return Err(format!(
                    "a '}}' without '{{' in {s:?}: write each field as {{FIELD}}, e.g. 'order:{{order_id}}'"
                ))
            }
            Some(i) => {
                if i > 0 {
                    parts.push(Part::Text(rest[..i].to_string()));
                }
                let after = &rest[i + 1..];
                let Some(end) = after.find('}') else {
                    return Err(format!(
                        "a '{{' without '}}' in {s:?}: write each field as {{FIELD}}, e.g. 'order:{{order_id}}'"
                    ));
                };
                let field = &after[..end];
                if field.is_empty() || field.contains('{') {
                    return Err(format!(
                        "{{{field}}} in {s:?} is not a field name: write each field as {{FIELD}}, e.g. 'order:{{order_id}}'"
                    ));
                }
                parts.push(Part::Field(field.to_string()));
                rest = &after[end + 1..];
            }
        }
    }
    if !parts.iter().any(|p| matches!(p, Part::Field(_))) {
        return Err(format!(
            "{s:?} names no field, so every member would get the same id: write each field as {{FIELD}}, e.g. 'order:{{order_id}}'"
        ));
    }
    Ok(Template(parts))
}

/// A field's value as id text: a string or an integer.
fn id_value(o: &serde_json::Map<String, Value>, field: &str) -> Result<String, String> {
    match o.get(field) {
        None | Some(Value::Null) => Err(format!("no {field:?} field")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        Some(other) => Err(format!("{field:?} is {other}, not a string or an integer")),
    }
}

/// The journal of the members in flight: a HASH member -> the fired mark
/// their id had before their enqueue (`-`: none), named after the source
/// key and in its cluster slot, so that the `ZREM` of a member and the
/// `HDEL` of its entry go in one `MULTI`. `None` when no such name exists
/// (on a cluster, a key with braces but no hash tag).
fn journal_key(key: &str, cluster: bool) -> Option<String> {
    // A key with a hash tag keeps it with a suffix.
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return Some(format!("{key}:punctual-import"));
            }
        }
    }
    if !key.contains(['{', '}']) {
        return Some(if cluster {
            format!("{{{key}}}:punctual-import")
        } else {
            format!("{key}:punctual-import")
        });
    }
    (!cluster).then(|| format!("{key}:punctual-import"))
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
    let what = || format!("cannot reach Redis at {}", punctual::internal::redact(url));
    if queue.is_cluster() {
        let client = redis::cluster::ClusterClient::new(punctual::internal::split_seeds(url))
            .with_context(what)?;
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
) -> Result<(Job, String), String> {
    let v: Value = serde_json::from_slice(member).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(o) = &v else {
        return Err("not a JSON object".into());
    };
    let id = match (&args.id_template, &args.id_field) {
        (Some(Template(parts)), _) => {
            let mut id = String::new();
            for p in parts {
                match p {
                    Part::Text(t) => id.push_str(t),
                    Part::Field(f) => id.push_str(&id_value(o, f)?),
                }
            }
            id
        }
        (None, Some(field)) => id_value(o, field)?,
        (None, None) => return Err("no --id-field or --id-template".into()),
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
        .id(id.clone())
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
    Ok((job, id))
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
    let journal = journal_key(&args.key, queue.is_cluster()).ok_or_else(|| {
        exit::problem(format!(
            "{:?} has braces but no hash tag, so no key of its cluster slot can be named for the import's journal: rename it (RENAME to a name without braces, or with a {{tag}}) and run the import again",
            args.key
        ))
    })?;
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
        let mut ids = Vec::new();
        for (member, score) in items {
            // ZSCAN may return a member twice.
            if !seen.insert(member.clone()) {
                continue;
            }
            match job_of(&member, score, &args, queue.max_payload(), &mut report) {
                Ok((job, id)) => {
                    jobs.push(job);
                    ids.push(id);
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
            let batch = Batch { jobs, ids, members };
            import_batch(&queue, &mut src, &args, &journal, batch, &mut report).await?;
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
        crate::forms::record(
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

/// What to do with a member whose id has a job in the topic (live or dead)
/// or had one: `Ok(true)` only remove it (this very member is there),
/// `Err(reason)` leave it and report, `Ok(false)` no job: import it.
fn against_live(
    info: Option<punctual::JobInfo>,
    member: &[u8],
    id: &str,
    topic: &str,
) -> Result<bool, String> {
    match info {
        None => Ok(false),
        Some(info) if info.state == punctual::State::Dead => Err(format!(
            "id {id:?} is dead in topic {topic:?}: replay or purge it (punctual dead replay/purge), then run the import again"
        )),
        Some(info) if info.payload == member => Ok(true),
        Some(_) => Err(format!(
            "id {id:?} is live in topic {topic:?} with another payload (a second member with this id?): cancel that job or change this member's id"
        )),
    }
}

/// One batch of good members: their jobs and the jobs' ids, in order.
struct Batch {
    jobs: Vec<Job>,
    ids: Vec<String>,
    members: Vec<Vec<u8>>,
}

/// Imports one batch (see the module's comment): the journal, the
/// marked enqueue, then the `ZREM` of what punctual holds with the `HDEL`
/// of the batch's journal entries in one `MULTI`, and the marks dropped.
async fn import_batch(
    queue: &Queue,
    src: &mut Source,
    args: &ZsetArgs,
    journal: &str,
    batch: Batch,
    report: &mut Report,
) -> Result<()> {
    let topic = &args.topic;
    let Batch { jobs, ids, members } = batch;
    // 1. The members a stopped run noted in flight: their id's mark, if
    //    any, was made by that run's enqueue.
    let mut get = redis::cmd("HMGET");
    get.arg(journal).arg(&members);
    let noted: Vec<Option<String>> = get.query_async(src).await?;
    let in_flight: HashSet<&str> = (0..ids.len())
        .filter(|&i| noted[i].is_some())
        .map(|i| ids[i].as_str())
        .collect();
    // 2. The others: their ids' marks (left by a member imported before
    //    with this id) are dropped, then they are noted. An id a noted
    //    member has keeps its mark.
    let fresh: Vec<usize> = (0..ids.len()).filter(|&i| noted[i].is_none()).collect();
    let unmark: Vec<String> = fresh
        .iter()
        .map(|&i| ids[i].clone())
        .filter(|id| !in_flight.contains(id.as_str()))
        .collect();
    if !unmark.is_empty() {
        queue.unmark(topic, &unmark).await?;
    }
    if !fresh.is_empty() {
        let mut note = redis::cmd("HSET");
        note.arg(journal);
        for &i in &fresh {
            note.arg(&members[i]).arg("1");
        }
        let _: usize = note.query_async(src).await?;
    }
    // 3. The marked enqueue: each job created is marked in the same script,
    //    and no marked id is created.
    let opts = EnqueueOptions::default().mark(true);
    let results = queue.enqueue_with(topic, jobs, &opts).await?;
    // 4. What each status means for its member.
    let mut remove: Vec<&[u8]> = Vec::new();
    let mut gone: Vec<String> = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let m = &members[i][..];
        let reason = match r.status {
            EnqueueStatus::Created | EnqueueStatus::Replaced => {
                report.imported += 1;
                None
            }
            _ => match against_live(queue.get(topic, &r.id).await?, m, &r.id, topic) {
                Ok(true) => {
                    report.already += 1;
                    None
                }
                Err(reason) => Some(reason),
                // Marked since it was noted: the stopped run enqueued it,
                // and its job has run since.
                Ok(false) if r.status == EnqueueStatus::FiredBefore && noted[i].is_some() => {
                    report.already += 1;
                    None
                }
                Ok(false) => Some(format!(
                    "id {:?} was enqueued in topic {topic:?} a moment ago (another member with this id?) and is gone now: run the import again",
                    r.id
                )),
            },
        };
        match reason {
            None => {
                remove.push(m);
                gone.push(r.id.clone());
            }
            Some(reason) => report.bad.push(Bad {
                member: one_line(&String::from_utf8_lossy(m), 80),
                reason,
            }),
        }
    }
    // 5. Only now, and only what punctual holds, leaves the ZSET, with the
    //    batch's journal entries (those of the members left too: a rerun
    //    notes them afresh).
    let mut tx = redis::pipe();
    tx.atomic();
    if !remove.is_empty() {
        tx.cmd("ZREM").arg(&args.key).arg(&remove);
    }
    tx.cmd("HDEL").arg(journal).arg(&members).ignore();
    if remove.is_empty() {
        let () = tx.query_async(src).await?;
    } else {
        let (n,): (usize,) = tx.query_async(src).await?;
        report.removed += n;
    }
    // 6. The marks of the members gone are needed no more (a stop before
    //    this leaves them to the 7-day trim, or to the next import of the
    //    id, which drops them first).
    if !gone.is_empty() {
        queue.unmark(topic, &gone).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_is_in_the_source_keys_slot() {
        assert_eq!(journal_key("q", false).unwrap(), "q:punctual-import");
        assert_eq!(journal_key("q", true).unwrap(), "{q}:punctual-import");
        assert_eq!(journal_key("a{t}b", true).unwrap(), "a{t}b:punctual-import");
        // Braces but no hash tag: the whole key is hashed, and no name with
        // a suffix is sure to share its slot.
        assert!(journal_key("a{}b", true).is_none());
        assert!(journal_key("a}b", true).is_none());
        assert_eq!(journal_key("a}b", false).unwrap(), "a}b:punctual-import");
    }

    #[test]
    fn templates_are_text_and_fields() {
        let t = parse_template("order:{order_id}@{shop}").unwrap();
        assert_eq!(t.0.len(), 4);
        for bad in ["order", "order:{", "order:}", "{}", "{a{b}"] {
            assert!(parse_template(bad).is_err(), "{bad}");
        }
    }
}
