//! `punctual`: the command-line program of the punctual delay queue, as a
//! library so that a Rust program can run the same commands (above all
//! `serve`, with its supervisor) with handlers of its own: see
//! [`main_with`] and [`Handlers`].
//!
//! - `cli`: the command line (clap derive); `--help` is the user's manual.
//! - `context`: global options and the connection to Redis.
//! - `admin/`: the admin commands (push, get, stats, dead, check, ...).
//! - `input` / `output`: parsing durations and times; printing tables,
//!   times and JSON.
//! - `exit`: the exit codes and the one-line error report.
//! - `api/`: the HTTP API and the dashboard (`punctual api`, and
//!   `serve --http`).
//! - `doctor`: `punctual doctor`, checks of the Redis configuration.
//! - `manual`: `punctual man` and `punctual completions`, for packagers.
//! - `bench.rs`: `punctual bench`, the benchmark protocol (crate `punctual-bench`).

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use tracing_subscriber::EnvFilter;

mod admin;
mod api;
mod bench;
mod cli;
mod context;
mod demo;
mod doctor;
mod exit;
mod forms;
mod health;
mod input;
mod manual;
mod output;
mod serve;

use cli::{Cli, Command};
use context::Ctx;
pub use serve::rust::Handlers;

/// The `punctual` program: parses the command line and runs it.
pub fn main() -> ExitCode {
    main_with(Handlers::new())
}

/// The `punctual` program with Rust handlers: `serve` (and the worker
/// processes it re-executes, which are this same program) runs them for the
/// topics whose config table names no `exec` or `http` handler. Call it from
/// your own `main`; see the `rust_service` example.
pub fn main_with(handlers: Handlers) -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Global options given on the command line or in the environment win
    // over a config file; their defaults do not.
    let explicit = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    let service = cli.command.is_service();
    let given = Given {
        redis: explicit("redis_url").then(|| cli.global.redis_url.clone()),
        prefix: explicit("prefix").then(|| cli.global.prefix.clone()),
        redis_explicit: explicit("redis_url") || cli.global.config.is_some(),
    };
    // Every command that talks to Redis, but `serve`, takes its Redis,
    // prefix and payload limit from the config file, when one is named
    // (`serve` reads the whole file itself when it runs).
    if cli.command.reads_config() {
        let rust: Vec<&str> = handlers.topics().collect();
        if let Err(err) = context::apply_config(&mut cli.global, explicit, &rust) {
            eprintln!("{}", exit::report(&err));
            return exit::classify(&err).into();
        }
    }
    // `serve` starts its logs once it has read its config (the log format
    // may be set there); every other command here.
    if !matches!(cli.command, Command::Serve(_)) {
        let json = std::env::var(serve::child::LOG_FORMAT_ENV).is_ok_and(|f| f == "json");
        init_tracing(cli.command.default_log_level(), json);
    }
    // A worker process of `serve` with no Rust handler runs its handlers
    // elsewhere (programs, processes, HTTP): one thread, so a job's hops
    // between its tasks (claim, handler, program, ack) are no wake-ups of
    // another thread (`punctual bench --phase handlers`: see
    // docs/BENCHMARKS.md).
    let one_thread =
        matches!(cli.command, Command::Worker(_)) && handlers.topics().next().is_none();
    let runtime = if service && !one_thread {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("punctual: error: cannot start the async runtime: {e}");
            return exit::Code::Unexpected.into();
        }
    };
    let ctx = Ctx { global: cli.global };
    match runtime.block_on(dispatch(&ctx, cli.command, handlers, given)) {
        Ok(()) => exit::Code::Ok.into(),
        Err(err) => {
            eprintln!("{}", exit::report(&err));
            exit::classify(&err).into()
        }
    }
}

/// What the user gave explicitly (on the command line or in the
/// environment), as opposed to defaults: it wins over a config file.
#[derive(Debug)]
struct Given {
    /// `--redis` / `PUNCTUAL_REDIS_URL`.
    redis: Option<String>,
    /// `--prefix` / `PUNCTUAL_PREFIX`.
    prefix: Option<String>,
    /// Whether a Redis was named at all (`--redis` or a config file):
    /// without one, `bench` may start a private redis-server.
    redis_explicit: bool,
}

/// Logs to stderr, filtered by `PUNCTUAL_LOG` (e.g. `debug`,
/// `punctual=trace`), else at `default` level; JSON lines when asked.
fn init_tracing(default: &str, json: bool) {
    let filter =
        EnvFilter::try_from_env("PUNCTUAL_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        builder.json().with_current_span(true).init();
    } else {
        builder.init();
    }
}

/// Runs one command: every command has its arm here.
async fn dispatch(
    ctx: &Ctx,
    command: Command,
    handlers: Handlers,
    given: Given,
) -> anyhow::Result<()> {
    let log_level = command.default_log_level();
    match command {
        Command::Push(a) => admin::push::run(ctx, a).await,
        Command::Get(a) => admin::job::get(ctx, a).await,
        Command::Cancel(a) => admin::cancel::run(ctx, a).await,
        Command::List(a) => admin::list::run(ctx, a).await,
        Command::Topic(c) => admin::topic::run(ctx, c).await,
        Command::Reschedule(a) => admin::job::reschedule(ctx, a).await,
        Command::Stats(a) => admin::stats::stats(ctx, a).await,
        Command::Topics => admin::stats::topics(ctx).await,
        Command::Dead(c) => admin::dead::run(ctx, c).await,
        Command::Check(a) => admin::check::run(ctx, a).await,
        Command::Script(a) => admin::script::run(ctx, a),
        Command::Partitions(a) => admin::partitions::run(ctx, a).await,
        Command::Groups(a) => admin::groups::run(ctx, a).await,
        Command::Schedule(c) => admin::schedule::run(ctx, c).await,
        Command::Audit(a) => admin::audit::run(ctx, a).await,
        Command::Import(c) => admin::import::run(ctx, c).await,
        Command::Serve(a) => {
            let path = ctx.global.config.as_deref();
            let cfg = serve::cmd::load(path, &a, given.redis, given.prefix, &handlers)?;
            init_tracing(log_level, cfg.log_format == "json");
            serve::cmd::serve(cfg).await
        }
        Command::Bench(a) => bench::run(ctx, a, given.redis_explicit).await,
        Command::Api(a) => api::cmd::run(ctx, a).await,
        Command::Doctor(a) => doctor::run(ctx, a).await,
        Command::Ps(a) => admin::ps::run(ctx, a).await,
        Command::Demo(a) => demo::run(&ctx.global.redis_url, a).await,
        Command::Worker(a) => serve::cmd::worker(a, handlers).await,
        Command::Scheduler(a) => serve::cmd::scheduler(a).await,
        Command::DemoHandler => demo::handler(),
        Command::Man(a) => manual::man(a),
        Command::Completions(a) => manual::completions(a),
    }
}
