//! What the client tests need, provisioned by the tests themselves
//! (`#[path]`-included by clients.rs and client_apps.rs): redis-py in a
//! venv under target/ when `python3` lacks it, `npm ci` in clients/node when
//! its node_modules is missing, the Python client installed from its
//! directory by pip (a wheel build) and the Node client packed by `npm pack`
//! and installed from the tarball, as a user does.
//!
//! What cannot be provisioned fails the test that needs it, naming what is
//! missing: never a silent pass. `PUNCTUAL_SKIP_CLIENTS=php,python,node`
//! skips a language on purpose (printed; the test then passes).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

pub(crate) fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients")
}

/// Scratch space of this package's integration tests (target/tmp).
fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Whether the user asked to skip `lang` (PUNCTUAL_SKIP_CLIENTS): printed.
pub(crate) fn skipped(lang: &str) -> bool {
    let asked = std::env::var("PUNCTUAL_SKIP_CLIENTS").unwrap_or_default();
    let skip = asked.split(',').any(|l| l.trim() == lang);
    if skip {
        eprintln!(
            "\n==================================================\n\
             skipped on purpose: PUNCTUAL_SKIP_CLIENTS={asked} (the {lang} client's tests did not run)\n\
             ==================================================\n"
        );
    }
    skip
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn probe(program: &Path, args: &[&str], dir: &Path) -> bool {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A venv at `dir` with `packages` pip-installed; `.ready` marks one made
/// whole (a half-made one is made again).
fn venv(dir: &Path, packages: &[&str]) -> Result<(), String> {
    if dir.join(".ready").exists() {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(dir);
    run(
        Command::new("python3").args(["-m", "venv"]).arg(dir),
        "python3 -m venv (Debian: apt-get install python3-venv)",
    )?;
    run(
        Command::new(dir.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(packages),
        &format!("pip install {}", packages.join(" ")),
    )?;
    std::fs::write(dir.join(".ready"), "").map_err(|e| e.to_string())
}

/// The Python interpreter with redis-py: `python3` if it has it, else a venv
/// under target/ with redis-py pip-installed.
pub(crate) fn python() -> Result<PathBuf, String> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(|| {
        let system = PathBuf::from("python3");
        if !probe(&system, &["-c", "1"], &tmp()) {
            return Err("python3 is not installed".into());
        }
        if probe(&system, &["-c", "import redis"], &tmp()) {
            return Ok(system);
        }
        let dir = tmp().join("clients-venv");
        venv(&dir, &["redis"]).map_err(|e| {
            format!("python3 lacks redis-py and a venv with it could not be made: {e}")
        })?;
        Ok(dir.join("bin/python"))
    })
    .clone()
}

/// A venv with the Python client installed the way a user does,
/// `pip install ./clients/python` (a wheel built from the directory),
/// reinstalled on every test run so it holds the current code.
pub(crate) fn python_app_venv() -> Result<PathBuf, String> {
    static APP: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    APP.get_or_init(|| {
        let dir = tmp().join("py-app-venv");
        venv(&dir, &["redis"]).map_err(|e| format!("a venv for the app: {e}"))?;
        run(
            Command::new(dir.join("bin/pip"))
                .args([
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--force-reinstall",
                    "--no-deps",
                ])
                .arg(clients_dir().join("python")),
            "pip install ./clients/python",
        )?;
        Ok(dir)
    })
    .clone()
}

/// A venv with the Python client (as [`python_app_venv`]) and Django, for
/// the Django recipe's test.
pub(crate) fn django_venv() -> Result<PathBuf, String> {
    static DJ: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DJ.get_or_init(|| {
        let dir = tmp().join("py-django-venv");
        venv(&dir, &["redis", "django"]).map_err(|e| format!("a venv with Django: {e}"))?;
        run(
            Command::new(dir.join("bin/pip"))
                .args([
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--force-reinstall",
                    "--no-deps",
                ])
                .arg(clients_dir().join("python")),
            "pip install ./clients/python",
        )?;
        Ok(dir)
    })
    .clone()
}

/// clients/node with its dependencies (`npm ci` when node_modules is missing).
pub(crate) fn node() -> Result<(), String> {
    static NODE: OnceLock<Result<(), String>> = OnceLock::new();
    NODE.get_or_init(|| {
        let dir = clients_dir().join("node");
        if !probe(Path::new("node"), &["-e", "1"], &dir) {
            return Err("node is not installed".into());
        }
        if probe(
            Path::new("node"),
            &["-e", "require('redis'); require('ioredis')"],
            &dir,
        ) {
            return Ok(());
        }
        run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir),
            "npm ci in clients/node (needs npm and its registry)",
        )
    })
    .clone()
}

/// A directory with a package.json whose app installed the Node client as a
/// user does: `npm pack` in clients/node, then `npm install` of the tarball
/// (with ioredis, which BullMQ apps hold).
pub(crate) fn node_app_dir() -> Result<PathBuf, String> {
    static APP: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap();
    APP.get_or_init(|| {
        node()?;
        let dir = tmp().join("node-app");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("npm")
            .args(["pack", "--silent", "--pack-destination"])
            .arg(&dir)
            .current_dir(clients_dir().join("node"))
            .output()
            .map_err(|e| format!("npm pack: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "npm pack in clients/node failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let tarball = String::from_utf8_lossy(&out.stdout).trim().to_string();
        std::fs::write(
            dir.join("package.json"),
            "{\"name\": \"shop\", \"private\": true, \"version\": \"1.0.0\"}\n",
        )
        .map_err(|e| e.to_string())?;
        run(
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--no-save",
                ])
                .arg(format!("./{tarball}"))
                .arg("ioredis@5")
                .current_dir(&dir),
            &format!("npm install ./{tarball} ioredis@5"),
        )?;
        Ok(dir)
    })
    .clone()
}
