//! The command line, as clap derive definitions. `--help` is the user's
//! documentation: every command and option says what it does.
//!
//! Each command's arguments live in the module that runs it (e.g.
//! `admin::push::PushArgs` next to `admin::push::run`), the global options
//! in `context`; this file holds the list of commands with their help
//! texts. To add a command: a module with its `Args` struct and its `run`
//! function, a variant of [`Command`], and an arm in `lib.rs`'s `dispatch`
//! (the match is total: the compiler names a command without one).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// punctual: a delay queue on Redis. Run each job at its due time, at least
/// once, never early, and never lose one.
///
/// These commands enqueue and administer jobs. Every time is computed by
/// Redis (`TIME`), so the clock of the host running this command does not
/// matter for delays.
#[derive(Debug, Parser)]
#[command(name = "punctual", version = version(), max_term_width = 100)]
#[command(after_help = "\
Exit status:
  0  success
  1  the command ran but found a problem (check found violations, no such live job, ...)
  2  bad usage or invalid input (nothing was written)
  3  Redis unreachable, timed out or refused the command
  4  unexpected reply from Redis or another internal error

Logs go to stderr; set PUNCTUAL_LOG (e.g. PUNCTUAL_LOG=debug) to see more.")]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: crate::context::GlobalOpts,

    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Enqueue a job (or, with --batch, many jobs from stdin).
    #[command(after_help = crate::admin::push::EXAMPLES)]
    Push(crate::admin::push::PushArgs),

    /// Show one job: state, due time, attempts, last error, payload.
    Get(crate::admin::job::JobRef),

    /// Cancel a job, or every job whose id starts with a prefix, whatever
    /// its state (a running job is stopped in flight: its worker, on any
    /// host, is told to stop its handler, and cannot ack it afterwards).
    Cancel(crate::admin::cancel::CancelArgs),

    /// List the ids of one state page by page, with a cursor, optionally
    /// only those starting with a prefix.
    ///
    /// Each page is a bounded scan of the state's set in every partition
    /// (ZSCAN; for pool, then the cold pool's lists of jobs due
    /// `cold_after` ahead, 10 minutes by default, minute by minute), so
    /// listing a million jobs costs the same per page as listing ten. Ids
    /// within a page are sorted by their time (due, lease deadline or
    /// death); the listing as a whole is not. A job present throughout is
    /// listed at least once, except a pool job the scheduler moves out of
    /// the cold pool into the pool set after that set was scanned (within
    /// 10 minutes of its due time), which may be missed.
    List(crate::admin::list::ListArgs),

    /// Manage topics: pause and resume their claims, set their limits,
    /// delete one that holds no job.
    #[command(subcommand)]
    Topic(crate::admin::topic::TopicCommand),

    /// Give a waiting job (in pool or ready) a new due time.
    ///
    /// A running job cannot be rescheduled; a dead job must be replayed
    /// first (`punctual dead replay`).
    Reschedule(crate::admin::job::RescheduleArgs),

    /// Show sizes and counters of one topic, or of every known topic.
    ///
    /// POOL, READY, RUNNING and DEAD are the jobs in each state now; of the
    /// leased jobs, RUNNING have started and WAITING wait inside a worker
    /// for a place to start (a resident pool's queue, as the workers' last
    /// heartbeats report it; --json: `running` counts both). NEXT-DUE
    /// is when the next waiting job is due; OLDEST-READY is how long the
    /// oldest due job has waited for a worker (it grows when workers fall
    /// behind). DONE, RETRIED and DIED count since the topic began; EXPIRED
    /// counts the jobs that died because they could not start within their
    /// expiry window (push --expire; they are in DIED too). --json prints an
    /// array with every counter.
    ///
    /// With --history DURATION, per-minute figures of one topic from the
    /// history in Redis (kept 7 days; every host's schedulers and workers
    /// write it): how many jobs were enqueued, done, retried, died and
    /// reclaimed each minute, and how late jobs started (STARTED, mean,
    /// max, and how many started over 1 s late). `-` is a gap: no scheduler
    /// ran then. The last row is the current minute so far.
    #[command(
        after_help = "Examples:\n  punctual stats\n  punctual stats orders --history 1h\n  punctual stats orders --history 1d --json"
    )]
    Stats(crate::admin::stats::StatsArgs),

    /// List the known topics (every topic ever enqueued to under this prefix).
    Topics,

    /// Inspect, replay or delete dead jobs (the dead-letter set).
    #[command(subcommand)]
    Dead(crate::admin::dead::DeadCommand),

    /// Verify that every job is in exactly one state and has its record.
    ///
    /// Scans the topic page by page while it is in use; each page is checked
    /// atomically, so moving jobs are never reported falsely. Without TOPIC,
    /// also looks (SCAN of every master, at most a million keys) for topics
    /// that hold jobs but are missing from the set of known topics (a
    /// producer stopped between its enqueue and registering the topic),
    /// checks them and reports each as "unlisted topic". Also reports a
    /// group held until one of its running jobs ends with fewer of its jobs
    /// running than its max_running (nothing would release it). Exits 1
    /// when a violation is found.
    Check(crate::admin::check::CheckArgs),

    /// List punctual's Lua scripts, or print one so producers in other
    /// languages can SCRIPT LOAD it and call it with EVALSHA.
    ///
    /// The protocol of each script (KEYS, ARGV, reply) is in its header
    /// comment and in docs/PROTOCOL.md.
    Script(crate::admin::script::ScriptArgs),

    /// Show or set how many partitions a topic is split over.
    ///
    /// A topic too hot for one Redis Cluster shard can be split into K
    /// partitions (TOPIC#0 ... TOPIC#K-1, each its own hash tag, so its own
    /// slot). A job id always maps to the same partition (crc32(id) mod K), so
    /// dedup, get, cancel and replay by id keep working; stats add the
    /// partitions up. The count is kept in Redis, so every producer routes
    /// alike. Changing it is refused while the topic holds jobs; restart
    /// `punctual serve` after a change (or set `partitions` in its config).
    Partitions(crate::admin::partitions::PartitionsArgs),

    /// Show the active groups of a topic (fair sharing between tenants).
    ///
    /// Jobs pushed with `--group` are served group by group: each claim
    /// takes from the group served least so far (its virtual time), so one
    /// group's backlog does not starve another's few jobs. Lists each group
    /// with ready jobs: its indexed jobs (ready ones, plus entries of
    /// cancelled or rescheduled jobs until a claim drops them) and its
    /// virtual time, its running jobs (counted while the topic has group
    /// limits), its limits and whether they hold it back (HELD: until its
    /// next token, or until one of its running jobs ends). `(none)` holds
    /// the jobs without a group. `groups TOPIC limit GROUP` shows or sets
    /// one group's own limits (the default of every group: `topic limits
    /// --group-rate --group-max-running`).
    #[command(
        after_help = "Examples:\n  punctual groups mail\n  punctual topic limits mail --group-rate 10/s --group-max-running 2\n  punctual groups mail limit shop-17 --rate 50/s --max-running none\n  punctual groups mail limit shop-17 --clear"
    )]
    Groups(crate::admin::groups::GroupsArgs),

    /// Manage recurring schedules: cron (with optional seconds, in a time
    /// zone) or a fixed interval, each occurrence enqueued as an ordinary
    /// job by every running scheduler of the topic, exactly once.
    #[command(subcommand, after_help = crate::admin::schedule::EXAMPLES)]
    Schedule(crate::admin::schedule::ScheduleCommand),

    /// List the live punctual processes on every host: supervisors,
    /// workers, schedulers and resident programs, from the registry in
    /// Redis (each beats every `heartbeat`; a record expires 3 beats after
    /// the last).
    #[command(after_help = crate::admin::ps::EXAMPLES)]
    Ps(crate::admin::ps::PsArgs),

    /// Run the consumer service: a supervisor that spawns worker and scheduler
    /// processes and runs each job's handler (exec, resident or http) from the config.
    ///
    /// SIGTERM or SIGINT: stop restarting children, let running jobs finish
    /// (up to shutdown_timeout), then SIGKILL; a second Ctrl-C kills at once.
    /// Exit 0 after a clean drain, 1 when children had to be killed, 2 for a
    /// bad config, 3 when Redis is unreachable at start. See docs/operations/run.md, "Exit codes".
    #[command(
        after_help = "Example:\n  punctual serve --config punctual.example.toml --http 127.0.0.1:9464"
    )]
    Serve(crate::serve::cmd::ServeArgs),

    /// Serve the HTTP API and the web dashboard (without consumers).
    ///
    /// JSON routes under /api/v1 (enqueue, get, cancel, reschedule, stats,
    /// dead letters, pause/resume; see docs/openapi.yaml) and a dashboard at
    /// /. Calls that change something need `Authorization: Bearer <token>`
    /// with the token from PUNCTUAL_API_TOKEN or --token-file; without a
    /// token everything is read-only. Reads need the token too with
    /// --require-token-for-reads. Requests naming a Host other than an IP
    /// address, localhost or an --allowed-host get 421. `punctual serve
    /// --http ADDR` serves the same next to /healthz and /metrics.
    #[command(after_help = crate::api::cmd::EXAMPLES)]
    Api(crate::api::cmd::ApiArgs),

    /// Show the audit trail: who replayed, purged, cancelled, paused,
    /// resumed or imported what, and when (newest first).
    ///
    /// The CLI records `cli` and the OS user; the HTTP API records `api` and
    /// the client's address. The trail is the LIST PREFIX:audit in Redis
    /// (the newest 10,000 entries). --json prints an array of entries.
    #[command(after_help = "Examples:\n  punctual audit\n  punctual audit --limit 500 --json")]
    Audit(crate::admin::audit::AuditArgs),

    /// Move jobs into punctual from elsewhere: `import zset KEY` takes a
    /// home-made ZSET queue (JSON members, due-time scores).
    #[command(subcommand)]
    Import(crate::admin::import::ImportCommand),

    /// Check the Redis at --redis for what punctual needs: version, eviction
    /// policy, persistence, script time limit, cluster mode, latency; and
    /// every topic: jobs overdue in the pool (no scheduler alive, or too
    /// slow), ready jobs waiting too long, jobs with no live worker.
    ///
    /// Prints one verdict per line (ok, warn or FAIL) with what to change,
    /// e.g. "FAIL topic  topic orders: 12 jobs overdue by up to 7.0 s; no
    /// scheduler alive". Exits 1 when a check fails, 0 when none does
    /// (warnings included).
    Doctor(crate::doctor::DoctorArgs),

    /// Watch punctual work: push a few dozen delayed jobs and consume them
    /// with `serve`, printing each job's lateness (uses a private
    /// redis-server when none answers at --redis; removes what it wrote).
    Demo(crate::demo::DemoArgs),

    /// Measure throughput, lateness, idle load and memory (the benchmark
    /// protocol of docs/BENCHMARKS.md) with an in-process no-op handler.
    ///
    /// Runs against the Redis at --redis (one node, or a Redis Cluster: its
    /// comma-separated seeds or one node); without --redis, when none answers
    /// at the default address, a private redis-server is started. Writes only
    /// keys under "punctual-bench:" and deletes them between phases, and
    /// refuses a Redis that holds other keys unless --force. Prints progress
    /// bars on a terminal; with --json, one JSON object per phase. A phase in
    /// which a job was lost or handled twice reports "ok": false, and the
    /// command then exits 1.
    #[command(after_help = BENCH_EXAMPLES)]
    Bench(crate::bench::BenchArgs),

    /// A worker process of `serve` (internal).
    #[command(name = "__worker", hide = true)]
    Worker(crate::serve::cmd::ChildArgs),

    /// A scheduler process of `serve` (internal).
    #[command(name = "__scheduler", hide = true)]
    Scheduler(crate::serve::cmd::ChildArgs),

    /// The exec handler of `demo` (internal).
    #[command(name = "__demo-handler", hide = true)]
    DemoHandler,

    /// Write the man pages (punctual.1 and one per command) into DIR.
    #[command(
        hide = true,
        after_help = "Example:\n  punctual man target/man && man -l target/man/punctual.1"
    )]
    Man(ManArgs),

    /// Print the completion script of a shell (bash, zsh, fish) to stdout.
    #[command(
        hide = true,
        after_help = "Examples:\n  punctual completions bash > ~/.local/share/bash-completion/completions/punctual\n  punctual completions zsh > ~/.zfunc/_punctual\n  punctual completions fish > ~/.config/fish/completions/punctual.fish"
    )]
    Completions(CompletionsArgs),
}

/// The version `--version` prints: `0.3.0 (commit 1a2b3c4d5e6f)`, the
/// commit from the build (`build.rs`); the version alone when the build
/// knew none (not built from a git checkout).
pub(crate) fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| match env!("PUNCTUAL_COMMIT") {
        "" => env!("CARGO_PKG_VERSION").to_string(),
        commit => format!("{} (commit {commit})", env!("CARGO_PKG_VERSION")),
    })
}

impl Command {
    /// Whether this command runs long, as a service (multi-threaded runtime).
    pub(crate) fn is_service(&self) -> bool {
        matches!(
            self,
            Command::Serve(_)
                | Command::Worker(_)
                | Command::Scheduler(_)
                | Command::Demo(_)
                | Command::Bench(_)
                | Command::Api(_)
        )
    }

    /// Whether this command takes `redis`, `prefix` and `max_payload` from
    /// the config file (`serve` reads the whole file itself; its children
    /// get it from the supervisor; `script` never connects).
    pub(crate) fn reads_config(&self) -> bool {
        !matches!(
            self,
            Command::Serve(_)
                | Command::Worker(_)
                | Command::Scheduler(_)
                | Command::Script(_)
                | Command::DemoHandler
                | Command::Man(_)
                | Command::Completions(_)
        )
    }

    /// The log level when PUNCTUAL_LOG is not set. Admin commands only warn;
    /// long-running services will want `info`.
    pub(crate) fn default_log_level(&self) -> &'static str {
        match self {
            Command::Push(_)
            | Command::Get(_)
            | Command::Cancel(_)
            | Command::List(_)
            | Command::Topic(_)
            | Command::Reschedule(_)
            | Command::Stats(_)
            | Command::Topics
            | Command::Dead(_)
            | Command::Check(_)
            | Command::Script(_)
            | Command::Partitions(_)
            | Command::Groups(_)
            | Command::Schedule(_)
            | Command::Audit(_)
            | Command::Import(_)
            | Command::Ps(_)
            | Command::Doctor(_)
            | Command::Man(_)
            | Command::Completions(_) => "warn",
            Command::Serve(_)
            | Command::Api(_)
            | Command::Demo(_)
            | Command::Worker(_)
            | Command::Scheduler(_)
            | Command::DemoHandler => "info",
            Command::Bench(_) => "warn",
        }
    }
}

const BENCH_EXAMPLES: &str = "\
Examples:
  # every phase, one JSON line each (under 3 minutes on 2 cores)
  punctual bench --phase all --json

  # the drain phase only, with another consumer configuration
  punctual bench --phase drain --concurrency 512 --claim-batch 500

  # precision at 5,000 jobs/s for 20 s against a given Redis
  punctual bench --redis redis://127.0.0.1:6380 --phase precision --rate 5000 --secs 20

  # drain on a 3-master Redis Cluster, the topic in 3 partitions, 3 consumers
  punctual bench --redis redis://10.0.0.1:7000,redis://10.0.0.2:7000 --phase drain --partitions 3 --consumers 3";

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::time::Duration;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn negative_delay_is_an_error_not_a_flag() {
        let err =
            Cli::try_parse_from(["punctual", "push", "t", "x", "--delay", "-5s"]).unwrap_err();
        assert!(err.to_string().contains("negative"), "{err}");
    }

    #[test]
    fn backoff_is_a_comma_separated_ladder() {
        let cli =
            Cli::try_parse_from(["punctual", "push", "t", "x", "--backoff", "0s,5s,1m"]).unwrap();
        let Command::Push(p) = cli.command else {
            panic!("not push")
        };
        assert_eq!(
            p.backoff.unwrap(),
            vec![
                Duration::ZERO,
                Duration::from_secs(5),
                Duration::from_secs(60)
            ]
        );
    }
}

/// Arguments of `man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Where to write punctual.1 and one page per command
    /// (punctual-push.1, punctual-dead-replay.1, ...); created if missing.
    pub dir: PathBuf,
}

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}
