//! `punctual doctor` against private redis-servers configured badly and well.

use std::process::{Command, Output};

use punctual_testkit::RedisServer;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_punctual");

fn doctor(redis: &RedisServer, extra: &[&str]) -> Output {
    Command::new(BIN)
        .args(["--redis", &redis.url(), "doctor"])
        .args(extra)
        .output()
        .unwrap()
}

/// The verdict printed for `check`: `ok`, `warn` or `FAIL`, and its line.
fn verdict<'a>(stdout: &'a str, check: &str) -> (&'a str, &'a str) {
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(check))
        .unwrap_or_else(|| panic!("no line for {check} in:\n{stdout}"));
    (line.split_whitespace().next().unwrap(), line)
}

fn json_checks(redis: &RedisServer, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let out = doctor(redis, &args);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (out.status.code(), v)
}

fn status_of(v: &Value, check: &str) -> String {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == check)
        .unwrap_or_else(|| panic!("no {check} in {v}"))["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn an_evicting_redis_without_aof_fails_with_what_to_change() {
    // The test kit's servers run with appendonly no and save "".
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let out = doctor(&redis, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");

    let (status, line) = verdict(&stdout, "maxmemory-policy");
    assert_eq!(status, "FAIL", "{line}");
    assert!(
        line.contains("allkeys-lru") && line.contains("silently deletes"),
        "{line}"
    );
    assert!(
        line.contains("Fix: set `maxmemory-policy noeviction`"),
        "{line}"
    );

    let (status, line) = verdict(&stdout, "persistence");
    assert_eq!(status, "FAIL", "{line}");
    assert!(
        line.contains("AOF is off") && line.contains("loses every job"),
        "{line}"
    );
    assert!(
        line.contains("appendonly yes") && line.contains("appendfsync always"),
        "{line}"
    );

    for ok in ["version", "script-time-limit", "cluster", "role"] {
        assert_eq!(verdict(&stdout, ok).0, "ok", "{stdout}");
    }
    assert!(stdout.contains("2 check(s) failed"), "{stdout}");
    assert!(stderr.contains("2 of 9 checks failed"), "{stderr}");

    let (code, v) = json_checks(&redis, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(v["failed"], 2);
    assert_eq!(status_of(&v, "maxmemory-policy"), "fail");
    assert_eq!(status_of(&v, "persistence"), "fail");
}

#[test]
fn a_well_configured_redis_passes() {
    let redis = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--maxmemory",
        "256mb",
        "--maxmemory-policy",
        "noeviction",
    ]);
    let out = doctor(&redis, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for check in [
        "version",
        "role",
        "maxmemory-policy",
        "memory",
        "persistence",
        "script-time-limit",
        "cluster",
    ] {
        let (status, line) = verdict(&stdout, check);
        assert_eq!(status, "ok", "{line}");
    }
    assert!(verdict(&stdout, "persistence")
        .1
        .contains("appendfsync always"));
    // Latency depends on the machine's load: never a failure on loopback.
    assert_ne!(verdict(&stdout, "latency").0, "FAIL", "{stdout}");
    assert!(verdict(&stdout, "latency").1.contains("over 50 PINGs"));
}

#[test]
fn appendfsync_everysec_warns_with_what_always_costs() {
    let redis = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--maxmemory-policy",
        "noeviction",
    ]);
    let out = doctor(&redis, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "warnings do not fail: {stdout}");
    let (status, line) = verdict(&stdout, "persistence");
    assert_eq!(status, "warn", "{line}");
    assert!(line.contains("everysec") && line.contains("1 s"), "{line}");
    assert!(
        line.contains("appendfsync always") && line.contains("waits for the disk"),
        "{line}"
    );
    // No maxmemory: a warning too.
    assert_eq!(verdict(&stdout, "memory").0, "warn");
}

#[test]
fn a_script_time_limit_below_the_promote_batch_fails() {
    let redis = RedisServer::start_with(&[
        "--busy-reply-threshold",
        "50",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--maxmemory-policy",
        "noeviction",
    ]);
    let out = doctor(&redis, &["--promote-batch", "1000"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let (status, line) = verdict(&stdout, "script-time-limit");
    assert_eq!(status, "FAIL", "{line}");
    assert!(
        line.contains("busy-reply-threshold 50 ms") && line.contains("raise busy-reply-threshold"),
        "{line}"
    );
    // With the default batch of 200 the same limit is enough.
    let out = doctor(&redis, &[]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_replica_and_a_cluster_without_slots_fail() {
    let primary = RedisServer::start();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let (code, v) = json_checks(&replica, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(status_of(&v, "role"), "fail");

    // A cluster node that serves no slots: cluster_state is fail.
    let node = RedisServer::start_with(&["--cluster-enabled", "yes"]);
    let (code, v) = json_checks(&node, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(status_of(&v, "cluster"), "fail");
    assert_eq!(status_of(&json_checks(&primary, &[]).1, "cluster"), "ok");
}

#[test]
fn an_unreachable_redis_exits_3_with_a_hint() {
    let port = punctual_testkit::free_port();
    let out = Command::new(BIN)
        .args(["--redis", &format!("redis://127.0.0.1:{port}"), "doctor"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach Redis") && err.contains("is redis-server running?"),
        "{err}"
    );
}
