//! One run of the `punctual` binary, as a command-line user runs it: no
//! PUNCTUAL_* variable of the test's own environment reaches it, only the
//! ones a test gives.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::BIN;

/// What one run of the binary did.
#[derive(Debug)]
pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout as JSON (panics with the run when it is not).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// The run, once its exit code is 0.
    #[track_caller]
    pub(crate) fn ok(self) -> Run {
        assert_eq!(self.code, 0, "{self:?}");
        self
    }
}

/// Runs `punctual ARGS` with `env` (and no other PUNCTUAL_* variable) and
/// `stdin` as its input. No --redis is added: `args` give it, or a config
/// file does.
pub(crate) fn run_with_input(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PUNCTUAL_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run punctual");
    let mut input = child.stdin.take().expect("stdin");
    // A command that does not read stdin may exit before this is written.
    let _ = input.write_all(stdin);
    drop(input);
    let out = child.wait_with_output().expect("wait for punctual");
    Run {
        code: out.status.code().expect("punctual exited by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`run_with_input`] with no input.
pub(crate) fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    run_with_input(args, env, b"")
}

/// `punctual --redis URL ARGS` with `stdin` as its input.
pub(crate) fn punctual_at(url: &str, args: &[&str], stdin: &[u8]) -> Run {
    run_with_input(&[&["--redis", url], args].concat(), &[], stdin)
}

/// `punctual --redis URL ARGS` with no input: its exit code, stdout and
/// stderr.
pub(crate) fn punctual(url: &str, args: &[&str]) -> (i32, String, String) {
    let r = punctual_at(url, args, b"");
    (r.code, r.stdout, r.stderr)
}
