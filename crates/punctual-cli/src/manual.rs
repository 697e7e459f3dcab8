//! `punctual man DIR` and `punctual completions SHELL`: the man pages and
//! the shell completions, generated from the clap definitions in `cli`, so
//! they never drift from `--help`. Packagers run them once at build time
//! (the .deb does: `contrib/deb/build`); both are hidden from `--help`.

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::output::emit;

/// Writes the man pages into `args.dir`.
pub(crate) fn man(args: ManArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    clap_mangen::generate_to(Cli::command(), &args.dir)
        .with_context(|| format!("cannot write the man pages into {}", args.dir.display()))?;
    let n = std::fs::read_dir(&args.dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".1"))
        .count();
    emit(&format!(
        "wrote {n} man pages into {} (punctual.1 and one per command)\n",
        args.dir.display()
    ))
}

/// Prints the completion script of `args.shell` to stdout.
pub(crate) fn completions(args: CompletionsArgs) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut visible_command(), "punctual", &mut out);
    emit(&String::from_utf8_lossy(&out))
}

/// The command line without its hidden commands (`__worker`, `man`, ...),
/// which clap_complete would offer otherwise.
fn visible_command() -> clap::Command {
    let full = Cli::command();
    let mut cmd = clap::Command::new("punctual")
        .version(crate::cli::version())
        .subcommand_required(true)
        .args(full.get_arguments().cloned());
    for sub in full.get_subcommands().filter(|s| !s.is_hide_set()) {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd
}
