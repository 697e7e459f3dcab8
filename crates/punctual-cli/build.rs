//! Names the commit in `punctual --version`: sets `PUNCTUAL_COMMIT` to the
//! short hash of the checkout's HEAD (`git rev-parse`), or to what the
//! environment variable `PUNCTUAL_COMMIT` says (a build from a tarball can
//! set it). Outside a git checkout and without the variable, it is empty
//! and `--version` prints the version alone.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PUNCTUAL_COMMIT");
    let commit = match std::env::var("PUNCTUAL_COMMIT") {
        Ok(c) => c.trim().to_string(),
        Err(_) => git_commit().unwrap_or_default(),
    };
    println!("cargo:rustc-env=PUNCTUAL_COMMIT={commit}");
}

/// `git rev-parse --short=12 HEAD`, with the files that change when HEAD
/// moves watched so that a new commit rebuilds; `None` when git or the
/// checkout is missing.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (!s.is_empty()).then_some(s)
    };
    let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD itself (a checkout, or a commit on a detached HEAD), the branch
    // it points to, and packed-refs (where a branch's ref may live). In a
    // worktree, branches live in the common directory. Only files that
    // exist: cargo reruns a build script whose watched file is missing
    // every time.
    let mut watch = Vec::new();
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        watch.push(PathBuf::from(dir).join("HEAD"));
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        // Relative to the directory git ran in, this one.
        let common = std::env::current_dir().ok()?.join(common);
        watch.push(common.join("packed-refs"));
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(common.join(branch));
        }
    }
    for path in watch.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(hash)
}
