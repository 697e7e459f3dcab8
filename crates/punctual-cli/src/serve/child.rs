//! What a process of `serve` passes to the processes it starts: the
//! environment the supervisor gives its children (and no handler sees), and
//! the descriptors and parent-death signal of every program started.

use std::os::fd::{FromRawFd, OwnedFd};

use nix::sys::signal::Signal;

/// Environment variable naming the file descriptor (always
/// [`CHILD_CONFIG_FD`]) from which a child reads the effective config
/// (JSON), once, at start. A pipe, not the environment: whatever is in a
/// process's environment, its handlers can read in `/proc/$PPID/environ`.
pub(crate) const CONFIG_FD_ENV: &str = "PUNCTUAL_SERVE_CONFIG_FD";
/// Environment variable with the supervisor's pid: a child whose parent is
/// another process (the supervisor died, even before the child started
/// watching) stops.
pub(crate) const SUPERVISOR_PID_ENV: &str = "PUNCTUAL_SUPERVISOR_PID";
/// The descriptor the config pipe's read end has in a child.
pub(crate) const CHILD_CONFIG_FD: i32 = 3;
/// Environment variable naming the metrics socket for workers.
pub(crate) const METRICS_ENV: &str = "PUNCTUAL_METRICS_SOCKET";
/// Environment variable with the id a child registers under in the process
/// registry (`<supervisor id>/<role>-<index>`): the supervisor removes the
/// record, and those under it, when it reaps the child.
pub(crate) const PROCESS_ID_ENV: &str = "PUNCTUAL_PROCESS_ID";
/// Environment variable with the log format for children.
pub(crate) const LOG_FORMAT_ENV: &str = "PUNCTUAL_CHILD_LOG_FORMAT";
/// Secrets punctual reads from the environment: the supervisor keeps them
/// out of its children's environment (the config pipe carries what they
/// need), so a handler can find them neither in its own environment nor in
/// its parent's.
pub(crate) const SECRET_ENV: [&str; 2] = ["PUNCTUAL_REDIS_URL", "PUNCTUAL_API_TOKEN"];
/// What no handler sees: what the supervisor passes to its children, and
/// the secrets punctual itself reads from the environment.
pub(crate) const INTERNAL_ENV: [&str; 7] = [
    CONFIG_FD_ENV,
    SUPERVISOR_PID_ENV,
    PROCESS_ID_ENV,
    METRICS_ENV,
    LOG_FORMAT_ENV,
    SECRET_ENV[0],
    SECRET_ENV[1],
];

/// Makes each `(fd, target)` pair's fd the child's `target` (dup2 in the
/// child) and gives it PR_SET_PDEATHSIG. The fds must be above 9 in the
/// parent and CLOEXEC there (see [`high_fd`]), so no other child inherits
/// them and dup2 cannot clobber one with another.
#[allow(unsafe_code)]
pub(crate) fn wire_fds(cmd: &mut tokio::process::Command, fds: Vec<(i32, i32)>) {
    die_with_parent(cmd);
    // SAFETY: runs in the child between fork and exec; dup2(2) is
    // async-signal-safe and nothing is allocated (the Vec was built before).
    unsafe {
        cmd.pre_exec(move || {
            for &(fd, target) in &fds {
                if nix::libc::dup2(fd, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// A duplicate of `fd` numbered 10 or more, close-on-exec.
#[allow(unsafe_code)]
pub(crate) fn high_fd(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    let raw = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10))?;
    // SAFETY: fcntl just returned this new descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Makes the child get SIGKILL when this worker process dies, even by
/// SIGKILL: a handler never outlives the worker that runs it.
#[allow(unsafe_code)]
pub(crate) fn die_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes the prctl(2) system call, which is async-signal-safe, and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}
