//! `punctual demo` end to end on a private redis-server and on a Redis
//! Cluster: its jobs run, and it removes every key it wrote (on every
//! master) and nothing else.

use std::process::Command;

use punctual_testkit::{RedisCluster, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_punctual");

fn demo(url: &str) -> String {
    let out = Command::new(BIN)
        .args([
            "--redis",
            url,
            "demo",
            "--jobs",
            "6",
            "--max-delay",
            "1s",
            "--workers",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Done: 6/6 jobs ran"), "{stdout}");
    stdout
}

fn keys(server: &RedisServer) -> Vec<String> {
    let mut k: Vec<String> = server
        .cli(&["--scan"])
        .unwrap()
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect();
    k.sort();
    k
}

#[test]
fn the_demo_leaves_only_the_keys_it_found() {
    let server = RedisServer::start();
    server.cli(&["SET", "mine", "1"]).unwrap();
    demo(&server.url());
    assert_eq!(keys(&server), vec!["mine".to_string()]);
}

#[test]
fn on_a_cluster_the_demo_cleans_every_master() {
    let c = RedisCluster::start();
    demo(&c.urls()[0]);
    for node in c.nodes() {
        assert_eq!(keys(node), Vec::<String>::new(), "node {}", node.port());
    }
}
