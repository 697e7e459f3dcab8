//! `punctual list TOPIC [STATE] [--id-prefix P] [--cursor C] [--limit N]`:
//! the ids of one state, page by page.

use anyhow::Result;
use clap::Args;
use punctual::State;
use serde_json::json;

use crate::context::Ctx;
use crate::exit;
use crate::output::{emit, emit_json, time, Table};

/// Arguments of `list`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  # the first page of waiting jobs
  punctual list orders
  # every dead job of customer 42, page by page
  punctual list orders dead --id-prefix cust:42: --limit 1000 --json
  punctual list orders dead --id-prefix cust:42: --limit 1000 --json --cursor 0-5120")]
pub(crate) struct ListArgs {
    /// The topic.
    pub topic: String,

    /// The state: pool (waiting for their due time), ready (due, waiting
    /// for a worker), running (leased) or dead.
    #[arg(default_value = "pool", value_parser = ["pool", "ready", "running", "dead"])]
    pub state: String,

    /// Only ids that start with this (matched literally).
    #[arg(long, value_name = "P", default_value = "")]
    pub id_prefix: String,

    /// Go on from this cursor (printed after each page; --json: "cursor").
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,

    /// About this many per page (1 to 1000; a small set comes whole).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub limit: u16,
}

/// Runs `list`.
pub(crate) async fn run(ctx: &Ctx, args: ListArgs) -> Result<()> {
    punctual::validate_topic(&args.topic)?;
    let state: State = args.state.parse()?;
    if let Some(c) = &args.cursor {
        if !cursor_shape(c) {
            return Err(exit::invalid(format!(
                "--cursor {c:?} is not a cursor `list` printed (like 0-5120); start again without it"
            )));
        }
    }
    let queue = ctx.queue().await?;
    let page = queue
        .list(
            &args.topic,
            state,
            &args.id_prefix,
            args.cursor.as_deref(),
            usize::from(args.limit),
        )
        .await?;
    let what = match state {
        State::Pool | State::Ready => "due_ms",
        State::Running => "lease_until_ms",
        _ => "died_ms",
    };
    if ctx.json() {
        let jobs: Vec<_> = page
            .jobs
            .iter()
            .map(|j| json!({"id": j.id, what: j.at_ms}))
            .collect();
        return emit_json(&json!({
            "topic": args.topic, "state": args.state, "jobs": jobs, "cursor": page.cursor,
        }));
    }
    let head = match state {
        State::Pool | State::Ready => "DUE",
        State::Running => "LEASE-UNTIL",
        _ => "DIED",
    };
    let mut out = String::new();
    if page.jobs.is_empty() {
        eprintln!(
            "punctual: no {} jobs{} in this page of topic {:?}",
            args.state,
            if args.id_prefix.is_empty() {
                String::new()
            } else {
                format!(" with ids starting {:?}", args.id_prefix)
            },
            args.topic
        );
    } else {
        let mut t = Table::new(&["ID", head]);
        for j in &page.jobs {
            t.row(vec![j.id.clone(), time(j.at_ms)]);
        }
        out.push_str(&t.render());
    }
    match &page.cursor {
        Some(c) => out.push_str(&format!(
            "{} shown; next page: --cursor {c}\n",
            super::plural(page.jobs.len(), "job", "jobs")
        )),
        None => out.push_str(&format!(
            "{} shown; end of the listing\n",
            super::plural(page.jobs.len(), "job", "jobs")
        )),
    }
    emit(&out)
}

/// Whether `c` looks like a cursor `list` prints: `<partition>-<ZSCAN
/// cursor>`, or in the cold pool `<partition>-c<bucket start>-<offset>`
/// (the library checks the rest).
fn cursor_shape(c: &str) -> bool {
    let Some((p, rest)) = c.split_once('-') else {
        return false;
    };
    let ok = match rest.strip_prefix('c') {
        None => rest.parse::<u64>().is_ok(),
        Some(b) => b
            .split_once('-')
            .is_some_and(|(s, o)| s.parse::<u64>().is_ok() && o.parse::<u64>().is_ok()),
    };
    ok && p.parse::<u32>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::cursor_shape;

    #[test]
    fn cursors_of_sets_and_cold_buckets_have_a_shape() {
        for c in ["0-5120", "2-0", "0-c1800000000000-0", "3-c60000-1000"] {
            assert!(cursor_shape(c), "{c}");
        }
        for c in [
            "junk",
            "0",
            "0-",
            "x-1",
            "0-c",
            "0-c60000",
            "0-c60000-x",
            "0-cx-1",
        ] {
            assert!(!cursor_shape(c), "{c}");
        }
    }
}
