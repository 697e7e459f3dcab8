//! `punctual bench` end to end against a private redis-server: every phase
//! prints one JSON line with "ok": true, and a Redis that holds other keys is
//! refused unless --force (and even then, only the bench's keys go away).
//! The same on a 3-master Redis Cluster with a topic of 3 partitions.

use std::process::{Command, Output};

use punctual_testkit::{RedisCluster, RedisServer};
use serde_json::Value;

/// Runs `punctual --redis URL bench ARGS`, without PUNCTUAL_* variables
/// from the caller's environment.
fn bench(url: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
    cmd.arg("--redis").arg(url).arg("bench").args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PUNCTUAL_") {
            cmd.env_remove(k);
        }
    }
    cmd.output().expect("run punctual bench")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The JSON lines of a run that exited 0 (panics with its output otherwise).
fn json_lines(out: &Output) -> Vec<Value> {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn every_phase_prints_an_ok_json_line_and_leaves_nothing_behind() {
    let redis = RedisServer::start();
    let out = bench(
        &redis.url(),
        &[
            "--phase",
            "all",
            "--json",
            "--n",
            "2000",
            "--rate",
            "200",
            "--secs",
            "1",
            "--serve-n",
            "200",
            "--resident-n",
            "500",
            "--handler-n",
            "300",
        ],
    );
    let lines = json_lines(&out);
    let phases: Vec<&str> = lines.iter().map(|l| l["phase"].as_str().unwrap()).collect();
    assert_eq!(
        phases,
        [
            "floor",
            "enqueue",
            "memory",
            "drain",
            "precision",
            "idle",
            "promote",
            "consume",
            "scripts",
            "calls",
            "groups",
            "serve",
            "resident",
            "handlers",
            "segments"
        ]
    );
    for l in &lines {
        assert_eq!(l["system"], "punctual", "{l}");
        assert_eq!(l["ok"], true, "{l}");
    }
    // The protocol's fields, as the protocol names them.
    let by = |p: &str| lines.iter().find(|l| l["phase"] == p).unwrap();
    for p in [
        "enqueue", "drain", "promote", "consume", "serve", "resident",
    ] {
        assert!(by(p)["jobs_per_s"].as_f64().unwrap() > 0.0, "{}", by(p));
    }
    // Correctness only (never speed): both runs handled every job once.
    let r = by("resident");
    assert_eq!(
        (r["exec_n"].as_u64(), r["resident_n"].as_u64()),
        (Some(200), Some(500)),
        "{r}"
    );
    // handlers: every kind handled every job once, or says why it was
    // skipped (an interpreter not installed).
    let h = by("handlers");
    let kinds = h["kinds"].as_object().unwrap_or_else(|| panic!("{h}"));
    let mut names: Vec<&str> = kinds.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "exec",
            "http",
            "in_process",
            "resident_node",
            "resident_php",
            "resident_python"
        ],
        "{h}"
    );
    for (name, k) in kinds {
        if let Some(why) = k.get("skipped") {
            assert!(
                name.starts_with("resident_") && why.as_str().unwrap().contains("not"),
                "{name}: {h}"
            );
            continue;
        }
        assert_eq!(k["ok"], true, "{name}: {h}");
        let n = if name == "exec" { 200 } else { 300 };
        assert_eq!(k["n"], n, "{name}: {h}");
        assert!(k["jobs_per_s"].as_f64().unwrap() > 0.0, "{name}: {h}");
        for cpu in [
            "serve_cpu_us_per_job",
            "handler_cpu_us_per_job",
            "redis_cpu_us_per_job",
        ] {
            assert!(k[cpu].as_f64().unwrap() >= 0.0, "{name}.{cpu}: {h}");
        }
    }
    assert!(kinds["http"]["requests"].as_u64().unwrap() >= 300, "{h}");
    assert_eq!(by("enqueue")["n"], 2000);
    assert_eq!(by("drain")["n"], 2000);
    assert!(by("memory")["bytes_per_job"].as_f64().unwrap() > 100.0);
    let p = by("precision");
    assert_eq!(
        (p["rate"].as_u64(), p["secs"].as_u64()),
        (Some(200), Some(1))
    );
    let l = &p["lateness_ms"];
    let ms = |k: &str| {
        l[k].as_f64()
            .unwrap_or_else(|| panic!("lateness_ms.{k}: {p}"))
    };
    assert!(ms("min") >= 0.0, "a job started early: {p}");
    assert!(ms("min") <= ms("p50") && ms("p50") <= ms("p99") && ms("p99") <= ms("max"));
    assert!(by("idle")["redis_cmds_per_s"].as_f64().is_some());
    // The floor ran every job once (its "ok", asserted above), and the
    // later phases report their ratio to it.
    let floor = by("floor");
    assert_eq!(floor["n"], 2000);
    for step in ["enqueue", "promote", "claim", "ack"] {
        assert!(
            floor["script_us_per_job"][step].as_f64().unwrap() > 0.0,
            "{floor}"
        );
    }
    let s = by("scripts");
    for k in [
        "enqueue",
        "promote",
        "claim",
        "ack",
        "path",
        "full_path",
        "claim_pool",
        "steady_full_path",
    ] {
        assert!(s["floor_ratio"][k].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["paired_floor_ratio"][k].as_f64().unwrap() > 0.0, "{s}");
    }
    // The floor measured in the phase, before and after its own steps: each
    // ratio is the phase's µs per job over that floor's (to rounding).
    assert_eq!(s["paired_floor_runs"], 2, "{s}");
    for step in ["enqueue", "promote", "claim", "ack"] {
        let f = s["paired_floor_us_per_job"][step].as_f64().unwrap();
        let mine = s["script_us_per_job"][step].as_f64().unwrap();
        let x = s["paired_floor_ratio"][step].as_f64().unwrap();
        assert!(f > 0.0, "{s}");
        assert!((x - mine / f).abs() <= 0.011 + 0.01 * x, "{step}: {s}");
    }
    // The enqueue script also with a due time per job and with given ids.
    for k in ["enqueue_distinct", "enqueue_ids16", "enqueue_ids36"] {
        assert!(s["script_us_per_job"][k].as_f64().unwrap() > 0.0, "{s}");
    }
    for p in ["enqueue", "drain", "promote", "consume"] {
        assert!(by(p)["floor_ratio"].as_f64().unwrap() > 0.0, "{}", by(p));
    }
    // calls: one job per call, every job claimed straight from the pool once
    // and acked ("ok" above), each step against the floor's same calls.
    let c = by("calls");
    assert_eq!(
        (c["n"].as_u64(), c["batch"].as_u64()),
        (Some(2000), Some(1)),
        "{c}"
    );
    for k in ["enqueue", "claim_pool", "ack"] {
        assert!(c["script_us_per_call"][k].as_f64().unwrap() > 0.0, "{c}");
    }
    for k in ["enqueue", "promote", "claim", "ack"] {
        assert!(c["floor_us_per_call"][k].as_f64().unwrap() > 0.0, "{c}");
    }
    for k in ["enqueue", "claim_pool", "ack", "steady_path"] {
        assert!(c["floor_ratio"][k].as_f64().unwrap() > 0.0, "{c}");
    }
    // groups: every case claimed each job once in its own group and acked
    // it ("ok" above), with its claim cost against groups off and the floor.
    let g = by("groups");
    let cases = ["off", "10", "1000", "2_tenants"];
    assert_eq!(g["cases"], serde_json::json!(cases), "{g}");
    for c in cases {
        for k in ["claim_us_per_job", "claim_x_off", "claim_x_floor"] {
            assert!(g[k][c].as_f64().unwrap() > 0.0, "{k}.{c}: {g}");
        }
    }
    assert_eq!(g["claim_x_off"]["off"], 1.0, "{g}");
    // Two tenants, 100,000 : 100 scaled to 2,000 jobs: the small one has 2,
    // enqueued after the flood. Without groups they come last; with groups
    // among the first.
    let small = &g["small_tenant"];
    assert_eq!(small["jobs"], 2, "{g}");
    let at = |c: &str| small["last_claimed_at"][c].as_u64().unwrap();
    assert!(at("off") > 1000 && at("2_tenants") * 10 < at("off"), "{g}");
    // Nothing of the bench is left in Redis.
    assert_eq!(redis.cli(&["DBSIZE"]).unwrap().trim(), "0");
}

#[test]
fn precision_load_and_a_pool_handle_every_job_once_and_leave_nothing_behind() {
    let redis = RedisServer::start();
    let out = bench(
        &redis.url(),
        &[
            "--phase",
            "precision-load,promote,scripts",
            "--json",
            "--n",
            "2000",
            "--secs",
            "1",
            "--load-rate",
            "300",
            "--pool",
            "3000",
        ],
    );
    let lines = json_lines(&out);
    let phases: Vec<&str> = lines.iter().map(|l| l["phase"].as_str().unwrap()).collect();
    // precision-load: the fixed rate, flat out, 50 % and 80 % of flat out.
    assert_eq!(
        phases,
        [
            "precision-load",
            "precision-load",
            "precision-load",
            "precision-load",
            "promote",
            "scripts"
        ]
    );
    for l in &lines {
        assert_eq!(l["ok"], true, "{l}");
        // The pool's jobs were there throughout, and left alone.
        assert_eq!(l["pool"], 3000, "{l}");
    }
    // With the pool's jobs, the scripts phase measures the floor before
    // loading them only.
    assert_eq!(lines[5]["paired_floor_runs"], 1, "{}", lines[5]);
    let (fixed, flat, half, most) = (&lines[0], &lines[1], &lines[2], &lines[3]);
    assert_eq!(
        (fixed["rate_from"].as_str(), fixed["rate"].as_u64()),
        (Some("fixed"), Some(300)),
        "{fixed}"
    );
    // Flat out: the producer sent for --secs as fast as Redis took the jobs,
    // each with its due time; the rate it reached is the ceiling.
    assert_eq!(flat["rate_from"], "flat-out", "{flat}");
    assert!(flat.get("target").is_none(), "{flat}");
    let ceiling = flat["achieved_rate"].as_f64().unwrap();
    assert!(ceiling > 0.0, "{flat}");
    assert!(flat["sent_secs"].as_f64().unwrap() >= 1.0, "{flat}");
    assert_eq!(flat["rate"].as_f64(), Some(ceiling), "{flat}");
    for (p, pct) in [(half, 50), (most, 80)] {
        assert_eq!(p["rate_from"], "ceiling", "{p}");
        assert_eq!(p["ceiling_jobs_per_s"].as_f64(), Some(ceiling), "{p}");
        assert_eq!(p["ceiling_pct"], pct, "{p}");
        assert_eq!(
            p["rate"].as_u64(),
            Some(((ceiling * pct as f64 / 100.0).round() as u64).max(1)),
            "{p}"
        );
    }
    for p in [fixed, flat, half, most] {
        // Never early, whatever the load.
        assert_eq!(p["early"], 0, "{p}");
        assert!(p["lateness_ms"]["min"].as_f64().unwrap() >= 0.0, "{p}");
        // The rate the producer reached: n over the seconds it took to send.
        let (sent, achieved) = (
            p["sent_secs"].as_f64().unwrap(),
            p["achieved_rate"].as_f64().unwrap(),
        );
        assert!(sent > 0.0, "{p}");
        let n = p["n"].as_f64().unwrap();
        assert!((achieved - n / sent).abs() <= 0.01 * achieved + 1.0, "{p}");
        let late = &p["late"];
        let parts: u64 = ["in_bench_stall", "in_redis_stall_only", "in_neither"]
            .iter()
            .map(|k| late[k].as_u64().unwrap())
            .sum();
        assert_eq!(late["jobs"].as_u64(), Some(parts), "{p}");
        assert!(p["probes_ms"]["bench_lag"]["max"].as_f64().is_some(), "{p}");
    }
    for p in [fixed, half, most] {
        // --secs 1: as many jobs as the rate.
        assert_eq!(p["n"], p["rate"], "{p}");
        // The speed target, counted as met only at >= 95 % of the rate.
        assert_eq!(
            (
                p["target"]["p99_ms"].as_f64(),
                p["target"]["max_ms"].as_f64()
            ),
            (Some(10.0), Some(50.0)),
            "{p}"
        );
        assert!(p["target"]["met"].is_boolean(), "{p}");
        let reached = p["achieved_rate"].as_f64().unwrap() >= 0.95 * p["rate"].as_f64().unwrap();
        assert_eq!(p["target"]["rate_reached"].as_bool(), Some(reached), "{p}");
        if !reached {
            assert_eq!(p["target"]["met"], false, "{p}");
        }
    }
    // Nothing of the bench is left in Redis, the pool included.
    assert_eq!(redis.cli(&["DBSIZE"]).unwrap().trim(), "0");
}

#[test]
fn a_resident_language_without_its_interpreter_is_skipped_loudly() {
    let redis = RedisServer::start();
    // A PATH with `true` only: no php, python3 or node.
    let bin = tempfile::tempdir().unwrap();
    let true_path = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .expect("true");
    std::os::unix::fs::symlink(true_path, bin.path().join("true")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["--redis", &redis.url(), "bench", "--json"])
        .args([
            "--phase",
            "handlers",
            "--handler-n",
            "200",
            "--serve-n",
            "50",
        ])
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let lines = json_lines(&out);
    let h = &lines[0];
    assert_eq!(h["ok"], true, "{h}");
    for (kind, program) in [
        ("resident_php", "php"),
        ("resident_python", "python3"),
        ("resident_node", "node"),
    ] {
        assert_eq!(
            h["kinds"][kind]["skipped"].as_str(),
            Some(format!("{program} not installed (not on PATH)").as_str()),
            "{h}"
        );
    }
    for kind in ["in_process", "exec", "http"] {
        assert_eq!(h["kinds"][kind]["ok"], true, "{kind}: {h}");
    }
    // Said on stderr too, not only in the JSON.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("resident_php SKIPPED: php not installed"),
        "{stderr}"
    );
    assert_eq!(redis.cli(&["DBSIZE"]).unwrap().trim(), "0");
}

/// The `calls` phase's one-job enqueue from each client: Rust's, then
/// PHP's, Python's and Node's loops (clients/*/bench), each creating its N
/// jobs, with Redis µs per call and the ratio to Rust's; a client whose
/// interpreter is missing is skipped, said in the JSON and on stderr.
#[test]
fn calls_measures_each_clients_one_job_enqueue_or_says_why_not() {
    let redis = RedisServer::start();
    let langs = ["php", "python", "node"];
    let out = bench(&redis.url(), &["--phase", "calls", "--json", "--n", "300"]);
    let lines = json_lines(&out);
    let c = &lines[0];
    assert_eq!(
        (c["phase"].as_str(), &c["ok"]),
        (Some("calls"), &Value::Bool(true)),
        "{c}"
    );
    let sides = &c["client_enqueue"];
    assert_eq!(sides["rust"]["created"], 300, "{c}");
    assert_eq!(sides["rust"]["script_calls"], 300, "{c}");
    assert!(
        sides["rust"]["redis_us_per_call"].as_f64().unwrap() > 0.0,
        "{c}"
    );
    for lang in langs {
        let s = &sides[lang];
        if let Some(why) = s["skipped"].as_str() {
            eprintln!("{lang} skipped here: {why}");
            continue;
        }
        // One script call per job, each job created once.
        assert_eq!(
            (&s["created"], &s["script_calls"]),
            (&Value::from(300), &Value::from(300)),
            "{lang}: {c}"
        );
        assert!(s["ratio_to_rust"].as_f64().unwrap() > 0.0, "{lang}: {c}");
        assert!(s["jobs_per_s"].as_f64().unwrap() > 0.0, "{lang}: {c}");
    }
    assert_eq!(redis.cli(&["DBSIZE"]).unwrap().trim(), "0");

    // Without the interpreters: each client skipped, loudly.
    let bin = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["--redis", &redis.url(), "bench", "--json"])
        .args(["--phase", "calls", "--n", "50"])
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let lines = json_lines(&out);
    let c = &lines[0];
    assert_eq!(c["ok"], true, "{c}");
    assert_eq!(c["client_enqueue"]["rust"]["created"], 50, "{c}");
    let stderr = text(&out.stderr);
    for (lang, program) in [("php", "php"), ("python", "python3"), ("node", "node")] {
        assert_eq!(
            c["client_enqueue"][lang]["skipped"].as_str(),
            Some(format!("{program} not installed (not on PATH)").as_str()),
            "{c}"
        );
        assert!(
            stderr.contains(&format!("calls: {lang} enqueue SKIPPED")),
            "{stderr}"
        );
    }
}

#[test]
fn a_redis_with_other_keys_is_refused_unless_forced() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "app:session:1", "x"]).unwrap();

    let out = bench(
        &redis.url(),
        &["--phase", "promote", "--n", "100", "--json"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        stderr.contains("app:session:1")
            && stderr.contains("deletes")
            && stderr.contains("--force"),
        "the refusal should say why and how to run anyway: {stderr}"
    );

    let out = bench(
        &redis.url(),
        &["--phase", "promote", "--n", "100", "--json", "--force"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(line["ok"], true, "{line}");
    // Only the bench's own keys were deleted.
    assert_eq!(redis.cli(&["GET", "app:session:1"]).unwrap().trim(), "x");
    assert_eq!(redis.cli(&["DBSIZE"]).unwrap().trim(), "1");
}

#[test]
fn on_a_cluster_a_partitioned_topic_uses_every_master_and_every_master_is_cleaned() {
    let cluster = RedisCluster::start();
    let masters = cluster.nodes().len();
    // A key on a master that is not the seed the bench is given: refused.
    let other = cluster.master_of("app:session:1").unwrap();
    let seed = (other + 1) % masters;
    cluster
        .node(other)
        .cli(&["SET", "app:session:1", "x"])
        .unwrap();
    let out = bench(
        &cluster.node(seed).url(),
        &["--phase", "promote", "--n", "100", "--json"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("app:session:1"), "{stderr}");
    cluster.node(other).cli(&["DEL", "app:session:1"]).unwrap();

    let out = bench(
        &cluster.seed_urls(),
        &[
            "--phase",
            "enqueue,drain,precision,promote,consume,scripts,serve",
            "--json",
            "--partitions",
            "3",
            "--consumers",
            "2",
            "--n",
            "3000",
            "--rate",
            "200",
            "--secs",
            "1",
            "--serve-n",
            "100",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stderr.contains("Redis Cluster"), "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(lines.len(), 8, "{stdout}");
    for l in &lines {
        assert_eq!(l["ok"], true, "{l}");
    }
    let drain = lines.iter().find(|l| l["phase"] == "drain").unwrap();
    assert_eq!(drain["partitions"], 3, "{drain}");
    assert_eq!(drain["consumers"], 2, "{drain}");
    // bench#0, bench#1 and bench#2 fall on the three masters of an even split.
    assert_eq!(drain["masters_used"], 3, "{drain}");
    let busy = drain["profile"]["redis_busy_by_master_pct"]
        .as_array()
        .unwrap_or_else(|| panic!("{drain}"));
    assert_eq!(busy.len(), 3, "{drain}");
    assert!(
        busy.iter().all(|b| b.as_f64().unwrap() > 0.0),
        "every master worked: {drain}"
    );
    // Nothing of the bench is left on any master.
    for i in 0..masters {
        assert_eq!(
            cluster.node(i).cli(&["DBSIZE"]).unwrap().trim(),
            "0",
            "node {i}"
        );
    }
}
