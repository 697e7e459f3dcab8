//! `punctual push`: enqueue one job, or many from stdin with `--batch`.

use std::io::{self, BufRead, IsTerminal, Read};

use crate::forms::JobFields;
use anyhow::{Context as _, Result};
use punctual::{EnqueueOptions, EnqueueStatus, Enqueued, Job};
use serde_json::json;

use crate::context::Ctx;
use crate::exit;
use crate::input::parse_time;
use crate::output::{emit, emit_json};
use std::time::{Duration, SystemTime};

use crate::input::parse_duration;
use clap::Args;

/// The examples of `push --help`.
pub(crate) const EXAMPLES: &str = "\
Examples:
  # close order 10086 in 30 minutes, once, even if pushed twice
  punctual push orders '{\"order\":10086}' --id order:10086 --delay 30m

  # payload from stdin, due at a fixed time
  echo 'remind 42' | punctual push reminders --at 2030-01-01T09:00:00Z

  # a reminder that is pointless an hour late, for tenant acme
  punctual push reminders 'call 42' --delay 10m --expire 1h --timeout 30s --group acme

  # many jobs, one JSON object per line
  punctual push orders --batch < jobs.jsonl
  where each line looks like
  {\"payload\": {\"order\": 1}, \"delay_ms\": 60000, \"id\": \"order:1\", \"max_attempts\": 3}";

/// Arguments of `push`.
#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// The topic (no braces, '#' or spaces; at most 100 bytes).
    pub topic: String,

    /// The payload, sent as is. `-` or leaving it out reads it from stdin.
    #[arg(conflicts_with = "batch")]
    pub payload: Option<String>,

    #[command(flatten)]
    pub when: WhenArgs,

    /// The job's id (default: a generated, time-sortable one). Pushing an id
    /// that is still live in the topic is a no-op reported as "duplicate";
    /// one in the dead-letter set is reported as "dead" and exits 1 (nothing
    /// was enqueued: replay it or push with --replace).
    #[arg(long, value_name = "ID", conflicts_with = "batch")]
    pub id: Option<String>,

    /// Deliveries before the job goes to dead (default: the topic's setting, else 6).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: Option<u32>,

    /// Delays before retries, comma-separated: the n-th failure waits the
    /// n-th step and the last step repeats (default: the topic's ladder,
    /// else 0s,5s,30s,2m,10m,30m).
    #[arg(
        long,
        value_name = "D,D,...",
        value_delimiter = ',',
        value_parser = parse_duration,
        num_args = 1..
    )]
    pub backoff: Option<Vec<Duration>>,

    /// Expiry: the job may start only within this window after its due time
    /// (1ms to ten years: 30s, 1h). Past it, a claim moves it to dead with
    /// the last error "expired: ..." instead of running it; retries do not
    /// extend the window.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub expire: Option<Duration>,

    /// The handler timeout for this job (1ms to ten years), used by the
    /// worker instead of the topic's timeout.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// The job's group (a tenant, customer or shop): 1 to 64 bytes of
    /// letters, digits, _ . @ -. Groups of a topic are served fairly.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,

    /// The caller's W3C trace context (00-<trace id>-<span id>-<flags>):
    /// stored with the job, handed to each attempt's handler
    /// (TRACEPARENT), the parent of the spans serve exports.
    #[arg(long, value_name = "TRACEPARENT", env = "TRACEPARENT")]
    pub traceparent: Option<String>,

    /// The W3C tracestate that goes with --traceparent.
    #[arg(
        long,
        value_name = "TRACESTATE",
        env = "TRACESTATE",
        requires = "traceparent"
    )]
    pub tracestate: Option<String>,

    /// Replace a live job with the same id (payload, due time, attempts)
    /// instead of reporting a duplicate.
    #[arg(long)]
    pub replace: bool,

    /// Read many jobs from stdin, one JSON object per line, the same job
    /// fields as the HTTP API's enqueue takes:
    /// {"payload": ..., "delay_ms": N, "at": "RFC3339", "at_ms": N, "id":
    /// "...", "max_attempts": N, "backoff_ms": [N, ...], "expire_ms": N,
    /// "timeout_ms": N, "group": "...", "traceparent": "...", "tracestate":
    /// "..."}. Only payload is required (a field may be left out, not null);
    /// a string payload is sent as its text, any other JSON value as its
    /// JSON text. --delay/--at, --max-attempts,
    /// --backoff, --expire, --timeout, --group and --traceparent apply to lines that do not
    /// say otherwise. Every line is validated before anything is written.
    #[arg(long)]
    pub batch: bool,
}

/// Where a job is due: now, after a delay, or at a time.
#[derive(Debug, Args, Clone, Default)]
#[group(multiple = false)]
pub(crate) struct WhenArgs {
    /// Due this long from now, by Redis's clock: 250ms, 30s, 15m, 2h, 1h30m, 7days.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub delay: Option<Duration>,

    /// Due at this time (RFC 3339, e.g. 2030-01-01T09:00:00Z or
    /// 2030-01-01T10:00:00+01:00). A time in the past means due now.
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    pub at: Option<SystemTime>,
}

impl WhenArgs {
    /// The library's `When`, if one was given.
    pub(crate) fn when(&self) -> Option<punctual::When> {
        match (self.delay, self.at) {
            (Some(d), _) => Some(punctual::When::Delay(d)),
            (None, Some(t)) => Some(punctual::When::At(t)),
            (None, None) => None,
        }
    }
}

/// Runs `push`.
pub(crate) async fn run(ctx: &Ctx, args: PushArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    if args.batch {
        return batch(ctx, args).await;
    }
    let max = ctx.global.max_payload;
    let payload = match args.payload.as_deref() {
        None | Some("-") => {
            if io::stdin().is_terminal() {
                eprintln!("punctual: reading the payload from stdin; end it with Ctrl-D (or give PAYLOAD as an argument)");
            }
            read_payload(io::stdin().lock(), max)?
        }
        Some(p) => p.as_bytes().to_vec(),
    };
    check_payload_size(payload.len(), max)?;
    let mut job = with_defaults(Job::new(payload), &args);
    if let Some(id) = &args.id {
        job = job.id(id);
    }
    job.validate()?;

    let queue = ctx.queue().await?;
    let opts = EnqueueOptions::default().replace(args.replace);
    let done = queue
        .enqueue_with(&args.topic, vec![job], &opts)
        .await?
        .pop()
        .context("enqueue returned no result")?;
    if ctx.json() {
        emit_json(&done)?;
    } else {
        emit(&format!("{} {}\n", done.id, done.status))?;
    }
    if done.is_dead() {
        return Err(exit::problem(format!(
            "job {:?} is dead in topic {:?}: nothing was enqueued, so it will not run; replay it (punctual dead replay {} {}) or push with --replace",
            done.id, args.topic, args.topic, done.id
        )));
    }
    Ok(())
}

/// The options given on the command line, applied to `job` (in a batch, a
/// line's own fields override them).
fn with_defaults(mut job: Job, args: &PushArgs) -> Job {
    if let Some(when) = args.when.when() {
        job = job.when(when);
    }
    if let Some(n) = args.max_attempts {
        job = job.max_attempts(n);
    }
    if let Some(ladder) = &args.backoff {
        job = job.backoff(ladder.clone());
    }
    if let Some(d) = args.expire {
        job = job.expire(d);
    }
    if let Some(d) = args.timeout {
        job = job.timeout(d);
    }
    if let Some(g) = &args.group {
        job = job.group(g);
    }
    if let Some(tp) = &args.traceparent {
        job = job.traceparent(tp);
    }
    if let Some(ts) = &args.tracestate {
        job = job.tracestate(ts);
    }
    job
}

fn check_payload_size(len: usize, max: usize) -> Result<()> {
    if len > max {
        return Err(exit::invalid(format!(
            "payload is {len} bytes, over the {max}-byte limit (raise --max-payload, or store the data elsewhere and push a reference to it)"
        )));
    }
    Ok(())
}

/// Reads a payload from stdin, refusing one over `max` bytes without reading
/// all of it.
fn read_payload(mut input: impl Read, max: usize) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    input
        .by_ref()
        .take(max as u64 + 1)
        .read_to_end(&mut buf)
        .context("cannot read the payload from stdin")?;
    if buf.len() > max {
        return Err(exit::invalid(format!(
            "payload on stdin is over the {max}-byte limit (raise --max-payload, or store the data elsewhere and push a reference to it)"
        )));
    }
    Ok(buf)
}

/// serde_json's message without its "at line 1 column N" (every line is
/// parsed on its own, so the position is the column).
fn json_message(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&suffix) {
        Some(m) => format!("{m} (column {})", e.column()),
        None => msg,
    }
}

/// Turns one input line into a job, or says what is wrong with it.
fn parse_line(text: &str, defaults: &PushArgs, max: usize) -> Result<Job, String> {
    crate::input::no_duplicate_keys(text.as_bytes())?;
    let mut line: JobFields = serde_json::from_str(text)
        .map_err(|e| format!("{}; expected {}", json_message(&e), JobFields::SHAPE))?;
    let payload = line.payload();
    if payload.len() > max {
        return Err(format!(
            "payload is {} bytes, over the {max}-byte limit (raise --max-payload)",
            payload.len()
        ));
    }
    line.apply(with_defaults(Job::new(payload), defaults))
}

/// Reads and validates every line of `input`; the first bad line is an
/// error naming its number. Blank lines are skipped.
fn read_batch(mut input: impl BufRead, defaults: &PushArgs, max: usize) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    let mut buf = Vec::new();
    for n in 1.. {
        buf.clear();
        let read = input
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read line {n} of stdin"))?;
        if read == 0 {
            break;
        }
        let text = std::str::from_utf8(&buf)
            .map_err(|_| exit::invalid(format!("line {n}: not UTF-8 text; nothing was pushed")))?;
        if text.trim().is_empty() {
            continue;
        }
        let job = parse_line(text, defaults, max)
            .map_err(|e| exit::invalid(format!("line {n}: {e}; nothing was pushed")))?;
        jobs.push(job);
    }
    Ok(jobs)
}

/// Counts of a batch's results.
fn summary(topic: &str, results: &[Enqueued]) -> serde_json::Value {
    let count = |s| results.iter().filter(|r| r.status == s).count();
    json!({
        "topic": topic,
        "jobs": results.len(),
        "created": count(EnqueueStatus::Created),
        "duplicate": count(EnqueueStatus::Duplicate),
        "replaced": count(EnqueueStatus::Replaced),
        "dead": count(EnqueueStatus::Dead),
    })
}

async fn batch(ctx: &Ctx, args: PushArgs) -> Result<()> {
    if io::stdin().is_terminal() {
        eprintln!("punctual: reading jobs from stdin, one JSON object per line; end with Ctrl-D");
    }
    let jobs = read_batch(io::stdin().lock(), &args, ctx.global.max_payload)?;
    let results = if jobs.is_empty() {
        Vec::new()
    } else {
        let queue = ctx.queue().await?;
        let opts = EnqueueOptions::default().replace(args.replace);
        // The library splits this into script calls of 250 jobs (its
        // default enqueue chunk), pipelined.
        queue.enqueue_with(&args.topic, jobs, &opts).await?
    };
    let s = summary(&args.topic, &results);
    let dead: Vec<&str> = results
        .iter()
        .filter(|r| r.is_dead())
        .map(|r| r.id.as_str())
        .collect();
    let dead_error = || {
        let mut named = dead.iter().take(10).copied().collect::<Vec<_>>().join(", ");
        if dead.len() > 10 {
            named.push_str(&format!(", and {} more", dead.len() - 10));
        }
        exit::problem(format!(
            "{} dead in topic {:?}, so nothing was enqueued for them and they will not run: {named} (replay them with `punctual dead replay {} ID...`, or push with --replace)",
            super::plural(dead.len(), "id is", "ids are"),
            args.topic,
            args.topic
        ))
    };
    if ctx.json() {
        emit_json(&s)?;
        return if dead.is_empty() {
            Ok(())
        } else {
            Err(dead_error())
        };
    }
    let mut text = format!(
        "pushed {} to topic {:?}: {} created, {} duplicate",
        super::plural(results.len(), "job", "jobs"),
        args.topic,
        s["created"],
        s["duplicate"]
    );
    if args.replace {
        text.push_str(&format!(", {} replaced", s["replaced"]));
    }
    if !dead.is_empty() {
        text.push_str(&format!(", {} dead", dead.len()));
    }
    text.push('\n');
    emit(&text)?;
    if dead.is_empty() {
        Ok(())
    } else {
        Err(dead_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn defaults() -> PushArgs {
        match Cli::parse_from(["punctual", "push", "t", "--batch"]).command {
            Command::Push(p) => p,
            _ => unreachable!(),
        }
    }

    #[test]
    fn string_payloads_are_raw_text_and_others_json() {
        let d = defaults();
        let a = parse_line(r#"{"payload": "hi \"you\""}"#, &d, 100).unwrap();
        assert_eq!(a.payload(), br#"hi "you""#);
        let b = parse_line(r#"{"payload": {"order": 1}, "delay_ms": 5}"#, &d, 100).unwrap();
        assert_eq!(b.payload(), br#"{"order":1}"#);
        // The API's fields too: one job input for both.
        let c = r#"{"payload": 1, "at_ms": 4102444800000, "backoff_ms": [0, 250]}"#;
        let c = format!("{:?}", parse_line(c, &d, 100).unwrap());
        assert!(c.contains("250ms"), "{c}");
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        let d = defaults();
        let err = |l: &str| parse_line(l, &d, 10).unwrap_err();
        assert!(err("{").contains("EOF"), "{}", err("{"));
        assert!(err(r#"{"delay_ms": 5}"#).contains("missing field `payload`"));
        assert!(err(r#"{"payload": 1, "delay": 5}"#).contains("unknown field `delay`"));
        assert!(err(r#"{"payload": 1, "delay_ms": -5}"#).contains("negative"));
        assert!(err(r#"{"payload": 1, "delay_ms": 5, "at": "x"}"#)
            .contains("at most one of delay_ms, at and at_ms"));
        assert!(err(r#"{"payload": 1, "delay_ms": null}"#).contains("null"));
        assert!(err(r#"{"payload": 1, "at": "soon"}"#).contains("RFC 3339"));
        assert!(err(r#"{"payload": 1, "id": ""}"#).contains("may not be empty"));
        assert!(err(r#"{"payload": 1, "max_attempts": 0}"#).contains("at least 1"));
        assert!(err(r#"{"payload": "12345678901"}"#).contains("over the 10-byte limit"));
    }

    #[test]
    fn batch_errors_name_the_line_and_skip_blank_lines() {
        let d = defaults();
        let input = "{\"payload\": 1}\n\n{\"payload\": 2}\n{\"payload\": 3, \"delay_ms\": -1}\n";
        let err = read_batch(input.as_bytes(), &d, 100).unwrap_err();
        assert!(format!("{err:#}").starts_with("line 4: "), "{err:#}");
        let ok = read_batch("{\"payload\": 1}\n\n{\"payload\": 2}".as_bytes(), &d, 100).unwrap();
        assert_eq!(ok.len(), 2);
    }
}
