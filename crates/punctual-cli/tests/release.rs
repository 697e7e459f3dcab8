//! What ships with a release: one version for the workspace and the three
//! client packages (and the changelog's newest release), `--version` naming
//! the commit, and the man pages and shell completions the .deb installs,
//! generated from the clap definitions by the real binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_punctual");
/// The workspace version (`[workspace.package]` in Cargo.toml).
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn json_version(path: &str) -> String {
    let v: Value = serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    v["version"]
        .as_str()
        .unwrap_or_else(|| panic!("{path} has no \"version\""))
        .to_string()
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run punctual");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_workspace_and_every_client_package_carry_one_version() {
    let pyproject: toml::Table = read("clients/python/pyproject.toml").parse().unwrap();
    let python = pyproject["project"]["version"]
        .as_str()
        .unwrap()
        .to_string();
    let init = read("clients/python/punctual/__init__.py");
    let python_dunder = init
        .lines()
        .find_map(|l| l.strip_prefix("__version__ = "))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("__version__ in clients/python/punctual/__init__.py");
    let lock: Value = serde_json::from_str(&read("clients/node/package-lock.json")).unwrap();
    let found = [
        (
            "clients/php/composer.json",
            json_version("clients/php/composer.json"),
        ),
        ("clients/python/pyproject.toml", python),
        ("clients/python/punctual/__init__.py", python_dunder),
        (
            "clients/node/package.json",
            json_version("clients/node/package.json"),
        ),
        (
            "clients/node/package-lock.json",
            lock["version"].as_str().unwrap_or("").to_string(),
        ),
        (
            "clients/node/package-lock.json (packages[\"\"])",
            lock["packages"][""]["version"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        ),
    ];
    for (file, version) in found {
        assert_eq!(
            version, VERSION,
            "{file} says {version}, the workspace (Cargo.toml) {VERSION}: set them alike"
        );
    }
    // The changelog's newest release is this one.
    let changelog = read("CHANGELOG.md");
    let newest = changelog
        .lines()
        .find(|l| l.starts_with("## [") && !l.starts_with("## [Unreleased]"))
        .expect("a release heading in CHANGELOG.md");
    assert!(
        newest.starts_with(&format!("## [{VERSION}]")),
        "CHANGELOG.md's newest release is {newest:?}, the workspace is {VERSION}"
    );
    // And the Debian changelog's newest entry packages it.
    let debian = read("contrib/deb/changelog");
    let first = debian.lines().next().unwrap_or("");
    assert!(
        first.starts_with(&format!("punctual ({VERSION}-")),
        "contrib/deb/changelog's newest entry is {first:?}, the workspace is {VERSION}: add an entry"
    );
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let (ok, out, err) = run(&["--version"]);
    assert!(ok, "{out}{err}");
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(commit) => assert_eq!(out.trim(), format!("punctual {VERSION} (commit {commit})")),
        // Not a git checkout (a source tarball): the version alone.
        None => assert_eq!(out.trim(), format!("punctual {VERSION}")),
    }
}

#[test]
fn man_pages_cover_every_command_and_none_internal() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man1");
    let (ok, out, err) = run(&["man", out_dir.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for page in [
        "punctual.1",
        "punctual-push.1",
        "punctual-serve.1",
        "punctual-dead-replay.1",
        "punctual-topic-pause.1",
    ] {
        assert!(names.iter().any(|n| n == page), "no {page} in {names:?}");
    }
    assert!(
        !names
            .iter()
            .any(|n| n.contains("__") || n.contains("-man") || n.contains("completions")),
        "internal commands have no page: {names:?}"
    );
    let main = std::fs::read_to_string(out_dir.join("punctual.1")).unwrap();
    assert!(
        main.starts_with(".ie \\n(.g .ds Aq") || main.contains(".TH punctual 1"),
        "{main}"
    );
    assert!(
        main.contains(&format!("v{VERSION}")),
        "the version is in the page"
    );
    assert!(main.contains("push"), "the commands are listed");
    assert!(
        out.contains(&format!("wrote {} man pages", names.len())),
        "{out}"
    );
}

#[test]
fn completions_for_bash_zsh_and_fish_know_the_commands_not_the_internal_ones() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef punctual"),
        ("fish", "complete -c punctual"),
    ] {
        let (ok, out, err) = run(&["completions", shell]);
        assert!(ok, "{shell}: {out}{err}");
        assert!(out.contains(marker), "{shell}: {out}");
        assert!(out.contains("reschedule"), "{shell} completes the commands");
        assert!(
            !out.contains("__worker"),
            "{shell} offers an internal command"
        );
    }
    let (ok, _, err) = run(&["completions", "tcsh"]);
    assert!(!ok, "an unknown shell is refused");
    assert!(err.contains("bash"), "and the known ones named: {err}");
}
