//! The `punctual` binary: everything is in the library (`src/lib.rs`), so a
//! Rust program can run the same commands with its own handlers
//! (`punctual_cli::main_with`).

fn main() -> std::process::ExitCode {
    punctual_cli::main()
}
