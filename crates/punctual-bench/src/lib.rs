//! The benchmark protocol of punctual (docs/BENCHMARKS.md) against one
//! Redis or a Redis Cluster, with an in-process no-op handler: the library
//! behind `punctual bench`, which parses [`BenchArgs`] and calls [`run`].
//! The `serve`, `resident` and `handlers` phases start `serve` of the
//! running executable, so they need to run inside the `punctual` binary.
//!
//! - `target`: which Redis (the one at --redis, a cluster's masters, or a
//!   private redis-server), the foreign-key check, deleting the bench's
//!   keys, INFO (summed over a cluster's masters).
//! - `probe`: Redis CPU, commands and this process's CPU per job.
//! - `harness`: what the phases stand on: numbered payloads, the recorder
//!   of the in-process handler's calls, the in-process consumer, loading
//!   jobs and the pool, the parts of a report they share; `stats`:
//!   percentiles and rates; `report`: a phase's JSON and text lines.
//! - `phases/`: the phases, one file each. `floor`: the leanest scripts on
//!   the same layout, the yardstick every other phase's Redis time per job
//!   is divided by. `handlers`: a no-op of each handler kind under `serve`;
//!   `proctree`: serve's CPU apart from its handlers', from /proc.
//!
//! Every figure counts real handler calls: each job carries its number in
//! its payload, and a job not handled, or handled twice, makes its phase
//! report `"ok": false`.
//!
//! A short run of one phase against a private `redis-server`:
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> anyhow::Result<()> {
//! use clap::Parser;
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     bench: punctual_bench::BenchArgs,
//! }
//! let (url, _redis) = punctual_redis_server::start("bench-example-")?;
//! let cli = Cli::parse_from(["bench", "--phase", "enqueue", "--n", "2000"]);
//! punctual_bench::run(&url, true, true, cli.bench).await?; // prints one JSON line
//! # Ok(()) }
//! ```

mod harness;
mod phases;
mod probe;
mod proctree;
mod report;
mod stats;
mod target;

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use punctual::internal::redact;

pub(crate) use report::Report;
use report::{emit, segments};
use target::PREFIX;

/// A phase of the bench.
///
/// ```
/// use clap::ValueEnum;
/// let p = punctual_bench::Phase::from_str("produce", true).unwrap();
/// assert_eq!(p, punctual_bench::Phase::Enqueue);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    /// The leanest scripts doing each step's Redis work on the same layout
    /// (runs first: the later phases report their ratio to it).
    Floor,
    /// N jobs due in 1 h, with the batch API, on a topic a scheduler ticked
    /// once, so they wait in the cold pool (also the `produce` segment).
    #[value(alias = "produce")]
    Enqueue,
    /// Bytes of Redis memory per waiting job (after enqueue).
    Memory,
    /// N jobs already due; time one consumer (worker + scheduler) to the last ack.
    Drain,
    /// Lateness (handler start - due) at --rate jobs/s for --secs.
    Precision,
    /// Precision under load, four runs of --secs: at --load-rate jobs/s
    /// (20,000); the producer flat out, a due time per job, to find the
    /// rate it reaches (the ceiling); then at 50 % and at 80 % of that
    /// ceiling. Target: p99 ≤ 10 ms, max ≤ 50 ms, never early, each run
    /// counted as met only with the producer at ≥ 95 % of the rate asked
    /// (each run reports the rate it reached). Not part of `all`.
    PrecisionLoad,
    /// Redis commands per second of idle consumers (concurrency 64).
    Idle,
    /// Segment: scheduler ticks moving N due jobs from pool to ready.
    Promote,
    /// Segment: a worker alone (no scheduler) on N ready jobs: claim,
    /// handler, ack.
    Consume,
    /// Each script on the job's path alone (enqueue, tick, claim, ack),
    /// called back to back with batches of 1,000: Redis time per job, also
    /// against the floor's run in this phase right before and after.
    Scripts,
    /// One job per call (a producer that enqueues per request, a light
    /// flow): Redis µs per call of enqueue, claim from the pool and ack,
    /// against the floor's same calls measured in the phase (N, at most
    /// 2,000 jobs); then the one-job enqueue of each client, Rust, PHP,
    /// Python and Node (clients/*/bench; a missing interpreter or Redis
    /// client is reported as skipped): Redis µs per call, jobs/s and the
    /// ratio to Rust's.
    Calls,
    /// The claim script's Redis µs per job with groups off, then on
    /// (--groups counts, and two tenants 100,000 : 100 scaled to N), each
    /// against groups off and the floor's claim.
    Groups,
    /// `punctual serve` with an exec handler running `true` per job.
    Serve,
    /// `punctual serve` with a no-op exec handler (`php -r ''`) and a no-op
    /// resident handler (a PHP loop; Python without PHP), in one run.
    Resident,
    /// A no-op of each handler kind, --handler-n jobs each: in-process (the
    /// library's Worker), exec (`true`, --serve-n jobs), http (a POST to a
    /// no-op server of the bench), resident in PHP, Python and Node (the
    /// client packages' loops; a language whose interpreter is missing is
    /// reported as skipped). Per kind: jobs/s and CPU µs per job of serve's
    /// own processes (from /proc), of the handler and of Redis.
    Handlers,
    /// Every phase above but precision-load, in this order.
    All,
}

/// The order phases run in, whatever the order asked.
const ORDER: [Phase; 15] = [
    Phase::Floor,
    Phase::Enqueue,
    Phase::Memory,
    Phase::Drain,
    Phase::Precision,
    Phase::PrecisionLoad,
    Phase::Idle,
    Phase::Promote,
    Phase::Consume,
    Phase::Scripts,
    Phase::Calls,
    Phase::Groups,
    Phase::Serve,
    Phase::Resident,
    Phase::Handlers,
];

/// The phases of `all`: every one but precision-load (tens of seconds of
/// load at 20,000 jobs/s and more).
const ALL: [Phase; 14] = [
    Phase::Floor,
    Phase::Enqueue,
    Phase::Memory,
    Phase::Drain,
    Phase::Precision,
    Phase::Idle,
    Phase::Promote,
    Phase::Consume,
    Phase::Scripts,
    Phase::Calls,
    Phase::Groups,
    Phase::Serve,
    Phase::Resident,
    Phase::Handlers,
];

/// The arguments of `punctual bench`, for a clap command of the caller's.
///
/// ```
/// use clap::Parser;
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     bench: punctual_bench::BenchArgs,
/// }
/// let cli = Cli::parse_from(["bench", "--phase", "drain,idle", "--n", "5000"]);
/// assert_eq!(cli.bench.phase, [punctual_bench::Phase::Drain, punctual_bench::Phase::Idle]);
/// assert_eq!(cli.bench.n, 5000);
/// ```
#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// Phases to run, comma-separated: floor, enqueue (alias produce),
    /// memory, drain, precision, precision-load, idle, promote, consume,
    /// scripts, calls, groups, serve, resident, handlers, or all (every one
    /// but precision-load).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    pub phase: Vec<Phase>,

    /// Jobs per phase (enqueue, memory, drain, promote, consume, scripts;
    /// calls takes at most 2,000).
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..=2_000_000))]
    pub n: u64,

    /// precision: jobs enqueued per second.
    #[arg(long, value_name = "R", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub rate: u64,

    /// precision and precision-load: seconds the producer runs.
    #[arg(long, value_name = "T", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    pub secs: u64,

    /// precision-load: jobs/s of its first run (the others run flat out,
    /// then at 50 % and 80 % of the rate reached flat out).
    #[arg(long, value_name = "R", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub load_rate: u64,

    /// groups: the group counts measured, comma-separated (job i in group
    /// i mod K), besides groups off and two tenants (100,000 : 100 jobs,
    /// scaled to N).
    #[arg(long, value_name = "K,...", value_delimiter = ',', default_value = "10,1000",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub groups: Vec<u64>,

    /// Jobs waiting in the pool while the measured jobs go through: loaded
    /// (due in 1 to 31 days) after the cleaning of each of drain, consume,
    /// precision, precision-load, promote and scripts, and left alone by
    /// them. The topic is ticked once first, as `serve` does, so they wait
    /// in the cold pool (a list per minute of due time, not the `pool`
    /// sorted set). The other phases (the floor among them) run without it.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=20_000_000))]
    pub pool: u64,

    /// idle: seconds measured (the protocol says 5; the consumers' safety
    /// net polls every 10 s, so a longer window gives the long-run rate).
    #[arg(long, value_name = "T", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub idle_secs: u64,

    /// Jobs at once of each in-process consumer (drain, consume, precision).
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub concurrency: u64,

    /// Most jobs per claim of the in-process consumer (1 to 1000; the
    /// library's default, 1,000 before round 9).
    #[arg(long, value_name = "N", default_value_t = punctual::DEFAULT_CLAIM_BATCH as u64,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub claim_batch: u64,

    /// Jobs get ids of their own, this many bytes long (the job's number,
    /// zero-padded), instead of generated ones (12 bytes): what memory
    /// costs per job with a caller's ids.
    #[arg(long, value_name = "B",
          value_parser = clap::value_parser!(u64).range(8..=200))]
    pub id_bytes: Option<u64>,

    /// Most jobs per enqueue script call of the bench's producers (the
    /// library's `QueueBuilder::enqueue_chunk`, 1 to 1000): a batch of
    /// 1,000 goes in calls of this many, pipelined. Not in `scripts` and
    /// `groups`, which call with 1,000 jobs, as the floor does.
    #[arg(long, value_name = "N", default_value_t = punctual::DEFAULT_ENQUEUE_CHUNK as u64,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub enqueue_chunk: u64,

    /// Enqueue batches (of 1,000 jobs, split into calls of --enqueue-chunk)
    /// in flight at once.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub inflight: u64,

    /// serve: jobs, each running `true` in a process of its own.
    #[arg(long, value_name = "N", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub serve_n: u64,

    /// resident: jobs for the resident handler (its exec run takes
    /// --serve-n).
    #[arg(long, value_name = "N", default_value_t = 50_000,
          value_parser = clap::value_parser!(u64).range(1..=2_000_000))]
    pub resident_n: u64,

    /// handlers: jobs per handler kind (exec takes at most --serve-n).
    #[arg(long, value_name = "N", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..=2_000_000))]
    pub handler_n: u64,

    /// handlers: the kinds to run, of in_process, exec, http, php, python,
    /// node (comma-separated; default all). A kind left out is reported as
    /// skipped.
    #[arg(long, value_name = "KINDS", value_delimiter = ',',
          value_parser = ["in_process", "exec", "http", "php", "python", "node"])]
    pub handler_kinds: Vec<String>,

    /// handlers and calls: the directory of the client packages (php/,
    /// python/, node/) whose resident loops run the no-op handlers and
    /// whose enqueue loops the calls phase times; by default the
    /// clients/ directory of the source tree this binary was built from.
    #[arg(long, value_name = "DIR")]
    pub clients: Option<std::path::PathBuf>,

    /// resident and handlers: resident programs per worker process.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub resident_processes: u64,

    /// serve: worker processes and jobs at once per worker.
    #[arg(long, value_name = "W,C", default_value = "2,16", value_parser = parse_pair)]
    pub serve_workers: (usize, usize),

    /// Partitions of the bench topic (`Queue::set_partitions`, set again
    /// after every cleaning). On a Redis Cluster each partition has a slot
    /// of its own, so a hot topic can use several masters.
    #[arg(long, value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=punctual::MAX_PARTITIONS as i64))]
    pub partitions: u32,

    /// Consumers of drain, consume and precision: this many `Worker`s in
    /// this process, each on a connection of its own with --concurrency
    /// slots (plus one scheduler where the phase has one). The idle phase
    /// always measures one consumer. Two by default, as `serve` runs two
    /// worker processes: one Worker's claims wait for its connection to
    /// read the claim before (a reply of 1,000 records takes it about 1 ms),
    /// and Redis idles meanwhile (80 % busy in a drain); with two, 95 %.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub consumers: u64,

    /// Run even when the Redis holds keys that are not the bench's. The bench
    /// deletes only its own keys (under `punctual-bench:`), but other
    /// clients' traffic and data skew its figures.
    #[arg(long)]
    pub force: bool,
}

fn parse_pair(s: &str) -> std::result::Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: expected W,C (e.g. 2,16)"))?;
    let p = |x: &str| {
        x.trim()
            .parse::<usize>()
            .ok()
            .filter(|v| (1..=1000).contains(v))
            .ok_or_else(|| format!("{x:?}: expected a number from 1 to 1000"))
    };
    Ok((p(a)?, p(b)?))
}

/// The shared state of one bench run.
#[derive(Debug)]
pub(crate) struct Bench {
    pub target: target::Target,
    pub args: BenchArgs,
    bars: bool,
    /// Sets the topic's partitions again after each cleaning (with
    /// --partitions above 1).
    admin: Option<punctual::Queue>,
}

impl Bench {
    /// Deletes the bench's keys; then, with --partitions K > 1, splits the
    /// (empty) bench topic into K partitions again.
    async fn clean(&self) -> Result<()> {
        self.target.clean().await?;
        if let Some(q) = &self.admin {
            q.set_partitions(target::TOPIC, self.args.partitions)
                .await?;
        }
        Ok(())
    }

    /// A progress bar of `len` steps on stderr (hidden when stderr is not a
    /// terminal).
    fn bar(&self, len: u64, label: &str) -> ProgressBar {
        if !self.bars {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos:>8}/{len:8} {per_sec:>12} {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    }

    /// A spinner with a message, for waits of known length.
    fn spinner(&self, label: &str, msg: &str) -> ProgressBar {
        if !self.bars {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} {spinner} {elapsed} {msg}")
                .expect("a valid template"),
        );
        bar.set_prefix(label.to_string());
        bar.set_message(msg.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    }
}

/// Why a bench run stopped without an error of Redis or of the machine:
/// the caller turns it into an exit code.
///
/// ```no_run
/// # async fn f(args: punctual_bench::BenchArgs) {
/// match punctual_bench::run("redis://127.0.0.1:6379", true, false, args).await {
///     Ok(()) => {}
///     Err(e) => match e.downcast_ref::<punctual_bench::Verdict>() {
///         Some(punctual_bench::Verdict::Refused(why)) => eprintln!("refused: {why}"),
///         Some(punctual_bench::Verdict::Failed(why)) => eprintln!("failed: {why}"),
///         None => eprintln!("error: {e:#}"),
///     },
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It refused to run (a Redis holding others' keys, without --force).
    Refused(String),
    /// It ran, and a phase did not handle every job exactly once.
    Failed(String),
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Refused(m) | Verdict::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Verdict {}

/// Runs the bench against the Redis at `redis_url`, printing one line per
/// phase (JSON with `json`). `redis_explicit`: the URL was given, so no
/// private server is started when it does not answer. A [`Verdict`] in the
/// error's chain says the bench refused to run or a phase failed.
///
/// ```no_run
/// use clap::Parser;
/// # async fn f() -> anyhow::Result<()> {
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     bench: punctual_bench::BenchArgs,
/// }
/// let cli = Cli::parse_from(["bench", "--phase", "drain", "--n", "10000"]);
/// punctual_bench::run("redis://127.0.0.1:6379", true, true, cli.bench).await?;
/// # Ok(()) }
/// ```
pub async fn run(redis_url: &str, redis_explicit: bool, json: bool, args: BenchArgs) -> Result<()> {
    let mut phases: Vec<Phase> = Vec::new();
    for p in &args.phase {
        let add: &[Phase] = if *p == Phase::All {
            &ALL
        } else {
            std::slice::from_ref(p)
        };
        for p in add {
            if !phases.contains(p) {
                phases.push(*p);
            }
        }
    }
    phases.sort_by_key(|p| ORDER.iter().position(|a| a == p));

    let target = target::open(redis_url, redis_explicit, args.partitions).await?;
    if let Some(what) = target.foreign_keys().await? {
        if !args.force {
            return Err(Verdict::Refused(format!(
                "refusing to run: the Redis at {} holds keys that are not the bench's ({what}). \
                 The bench writes and deletes keys under \"{PREFIX}:\" between phases, and its \
                 figures (memory, commands per second, CPU) assume nobody else uses this Redis. \
                 Point --redis at a Redis of its own (without --redis, a private redis-server is \
                 started when none answers at the default address), or pass --force to run anyway",
                redact(&target.url)
            ))
            .into());
        }
        eprintln!(
            "punctual: warning: the Redis holds other keys ({what}); running anyway (--force): its figures may be skewed"
        );
    }
    let where_ = match &target.private {
        Some(_) => format!(
            "a private redis-server {} at {} (no Redis answered at {})",
            target.version,
            target.url,
            redact(redis_url)
        ),
        None if target.cluster => format!(
            "a Redis Cluster {} of {} masters ({}) at {}",
            target.version,
            target.masters.len(),
            target
                .masters
                .iter()
                .map(target::Master::addr)
                .collect::<Vec<_>>()
                .join(", "),
            redact(&target.url)
        ),
        None => format!("Redis {} at {}", target.version, redact(&target.url)),
    };
    let placement = target.placement().await?;
    let where_ = if args.partitions > 1 || !placement.is_empty() {
        let on: Vec<String> = placement
            .iter()
            .map(|(p, m)| format!("{p} on {m}"))
            .collect();
        format!(
            "{where_}; the topic in {}{}",
            match args.partitions {
                1 => "1 partition".to_string(),
                k => format!("{k} partitions"),
            },
            if on.is_empty() {
                String::new()
            } else {
                format!(" ({})", on.join(", "))
            }
        )
    } else {
        where_
    };
    if json {
        eprintln!("punctual bench: {where_}; keys under \"{PREFIX}:\"");
    } else {
        println!("punctual bench on {where_}; keys under \"{PREFIX}:\"");
    }

    let bars = std::io::stderr().is_terminal();
    let mut bench = Bench {
        target,
        args,
        bars,
        admin: None,
    };
    if bench.args.partitions > 1 {
        bench.admin = Some(bench.queue().await?);
    }
    bench.clean().await?;
    let mut reports: Vec<Report> = Vec::new();
    let mut enqueue_memory: Option<(Report, Report)> = None;
    let mut floor_report: Option<Report> = None;
    let outcome: Result<()> = async {
        for phase in &phases {
            let reps = match phase {
                Phase::Enqueue | Phase::Memory => {
                    if enqueue_memory.is_none() {
                        enqueue_memory = Some(phases::enqueue(&bench).await?);
                    }
                    let (e, m) = enqueue_memory.as_ref().expect("just run");
                    vec![if *phase == Phase::Enqueue { e } else { m }.clone()]
                }
                Phase::Drain => vec![phases::drain(&bench, true).await?],
                Phase::Consume => vec![phases::drain(&bench, false).await?],
                Phase::Precision => vec![phases::precision(&bench).await?],
                Phase::PrecisionLoad => phases::precision_load(&bench).await?,
                Phase::Groups => vec![phases::groups(&bench).await?],
                Phase::Idle => vec![phases::idle(&bench).await?],
                Phase::Promote => vec![phases::promote(&bench).await?],
                Phase::Scripts => vec![phases::scripts(&bench).await?],
                Phase::Calls => vec![phases::calls(&bench).await?],
                Phase::Serve => vec![phases::serve(&bench).await?],
                Phase::Resident => vec![phases::resident(&bench).await?],
                Phase::Handlers => vec![phases::handlers::handlers(&bench).await?],
                Phase::Floor => {
                    let f = phases::floor::floor(&bench).await?;
                    floor_report = Some(f.clone());
                    vec![f]
                }
                Phase::All => Vec::new(),
            };
            bench.clean().await?;
            for mut r in reps {
                if let Some(f) = &floor_report {
                    phases::floor::add_ratios(&mut r, f);
                }
                emit(&r, json);
                reports.push(r);
            }
        }
        if let Some(r) = segments(&reports) {
            emit(&r, json);
            reports.push(r);
        }
        Ok(())
    }
    .await;
    // Leave nothing behind, even after an error.
    let cleaned = bench.target.clean().await;
    outcome?;
    cleaned?;
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.phase().to_string())
        .collect();
    if !failed.is_empty() {
        return Err(Verdict::Failed(format!(
            "phase(s) {} did not handle every job exactly once (see \"ok\" and the counts)",
            failed.join(", ")
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_workers_is_a_pair() {
        assert_eq!(parse_pair("2,16"), Ok((2, 16)));
        assert!(parse_pair("2").is_err());
        assert!(parse_pair("0,16").is_err());
    }
}
