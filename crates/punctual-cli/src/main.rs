//! The `punctual` binary: everything is in the library (`src/lib.rs`), so a
//! Rust program can run the same commands with its own handlers
//! (`punctual_cli::main_with`).

/// mimalloc instead of the system allocator: a worker allocates and frees
/// a few small buffers per job (the claim reply's strings, the job, its
/// task): under callgrind, glibc's malloc and free were 26% of the
/// instructions of `bench --phase consume`, and mimalloc took the total
/// down by 22% (the history of docs/BENCHMARKS.md). The library leaves the choice to the
/// program that embeds it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    punctual_cli::main()
}
