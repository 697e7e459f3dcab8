//! The deploy files in contrib/, each checked by the real tool that reads
//! them: the systemd unit by `systemd-analyze verify`, the Prometheus alert
//! rules by `promtool check rules` and unit-tested by `promtool test rules`.
//!
//! Without the tool the test is skipped with a loud note, unless CI is set:
//! then it fails (`.ci/run` installs `prometheus` for promtool and
//! `systemd` for systemd-analyze).

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;
use support::output_text;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tool's path, or `None` (skip) when it is missing outside CI.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => Some(p),
        None if std::env::var_os("CI").is_some() => {
            panic!("{name} is missing and CI is set: install Debian's {package} (.ci/run does)")
        }
        None => {
            eprintln!(
                "SKIPPED: {name} is not installed (Debian package {package}); this check runs in CI"
            );
            None
        }
    }
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let Some(analyze) = tool("systemd-analyze", "systemd") else {
        return;
    };
    let unit = root().join("contrib/systemd/punctual.service");
    assert!(unit.is_file(), "{} is missing", unit.display());
    // verify checks that ExecStart's program exists: point it at the
    // binary under test, in a copy of the unit.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/punctual serve"), "{text}");
    let copy = dir.path().join("punctual.service");
    std::fs::write(&copy, text.replace("/usr/bin/punctual", support::BIN)).unwrap();
    // Without systemd as PID 1 (a container), verify still loads and lints
    // the unit file offline; --man=no: no man pages to look up.
    let out = Command::new(&analyze)
        .args(["verify", "--man=no"])
        .arg(&copy)
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{text}"
    );
    // It exits 0 on some warnings: none may be about our unit.
    assert!(
        !text.contains("punctual.service"),
        "systemd-analyze verify warned about the unit:\n{text}"
    );

    // A unit with a typo must fail: the check can fail.
    let bad = dir.path().join("bad.service");
    std::fs::write(&bad, "[Service]\nExecStart=relative/path\nTyppo=1\n").unwrap();
    let out = Command::new(&analyze)
        .args(["verify", "--man=no"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(
        !out.status.success() || output_text(&out).contains("bad.service"),
        "a broken unit passed:\n{}",
        output_text(&out)
    );
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = tool("promtool", "prometheus") else {
        return;
    };
    let dir = root().join("contrib/prometheus");
    let rules = dir.join("punctual-alerts.yml");
    let tests = dir.join("punctual-alerts.test.yml");
    assert!(rules.is_file(), "{} is missing", rules.display());
    assert!(tests.is_file(), "{} is missing", tests.display());

    let out = Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules:\n{}",
        output_text(&out)
    );

    // The quick start's Prometheus config, which loads the rules.
    let out = Command::new(&promtool)
        .args(["check", "config"])
        .arg(dir.join("prometheus.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check config:\n{}",
        output_text(&out)
    );

    let out = Command::new(&promtool)
        .args(["test", "rules"])
        .arg(&tests)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules:\n{}",
        output_text(&out)
    );

    // Each alert the operations guide names is defined and tested.
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let tests_text = std::fs::read_to_string(&tests).unwrap();
    for alert in [
        "PunctualJobsOverdue",
        "PunctualNoScheduler",
        "PunctualJobsDying",
        "PunctualChildRestarting",
        "PunctualResidentRestarting",
        "PunctualReadyBacklog",
    ] {
        assert!(
            rules_text.contains(&format!("alert: {alert}")),
            "{alert} not in the rules"
        );
        assert!(
            tests_text.contains(&format!("alertname: {alert}")),
            "{alert} not tested"
        );
    }
}
