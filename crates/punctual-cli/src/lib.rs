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
mod health;
mod input;
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
    let redis_explicit = explicit("redis_url") || cli.global.config.is_some();
    // `serve` reads its config first: the log format may be set there.
    let serve_config = match &cli.command {
        Command::Serve(args) => {
            let redis = explicit("redis_url").then(|| cli.global.redis_url.clone());
            let prefix = explicit("prefix").then(|| cli.global.prefix.clone());
            match serve::cmd::load(cli.global.config.as_deref(), args, redis, prefix, &handlers) {
                Ok(cfg) => Some(cfg),
                Err(err) => {
                    eprintln!("{}", exit::report(&err));
                    return exit::classify(&err).into();
                }
            }
        }
        _ => None,
    };
    // Every other command that talks to Redis takes its Redis, prefix and
    // payload limit from the config file, when one is named.
    if cli.command.reads_config() {
        let rust: Vec<&str> = handlers.topics().collect();
        if let Err(err) = context::apply_config(&mut cli.global, explicit, &rust) {
            eprintln!("{}", exit::report(&err));
            return exit::classify(&err).into();
        }
    }
    let json_logs = match &serve_config {
        Some(cfg) => cfg.log_format == "json",
        None => std::env::var(serve::supervisor::LOG_FORMAT_ENV).is_ok_and(|f| f == "json"),
    };
    init_tracing(cli.command.default_log_level(), json_logs);
    let runtime = if service {
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
    let run = async {
        match (cli.command, serve_config) {
            (Command::Serve(_), Some(cfg)) => serve::cmd::serve(cfg).await,
            (Command::Bench(a), _) => bench::run(&ctx, a, redis_explicit).await,
            (Command::Worker(a), _) => serve::cmd::worker(a, handlers).await,
            (command, _) => dispatch(&ctx, command).await,
        }
    };
    match runtime.block_on(run) {
        Ok(()) => exit::Code::Ok.into(),
        Err(err) => {
            eprintln!("{}", exit::report(&err));
            exit::classify(&err).into()
        }
    }
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

/// Runs one command.
async fn dispatch(ctx: &Ctx, command: Command) -> anyhow::Result<()> {
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
        Command::Audit(a) => admin::audit::run(ctx, a).await,
        Command::Import(c) => admin::import::run(ctx, c).await,
        Command::Serve(_) => unreachable!("serve is run by main with its config"),
        Command::Bench(_) => unreachable!("bench is run by main (it needs --redis's source)"),
        Command::Api(a) => api::cmd::run(ctx, a).await,
        Command::Doctor(a) => doctor::run(ctx, a).await,
        Command::Ps(a) => admin::ps::run(ctx, a).await,
        Command::Demo(a) => demo::run(&ctx.global.redis_url, a).await,
        Command::Worker(_) => unreachable!("a worker is run by main (it needs the handlers)"),
        Command::Scheduler(a) => serve::cmd::scheduler(a).await,
        Command::DemoHandler => demo::handler(),
    }
}
