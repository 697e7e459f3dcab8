//! End-to-end tests of the admin commands at scale (the binary against a
//! private redis-server): the config file for admin commands, paced dead
//! replay, listing with a cursor, bulk cancel, topic deletion and the
//! `dead` enqueue status.

use std::process::{Command, Stdio};
use std::time::Duration;

use punctual::{Failed, Job, Queue};
use punctual_testkit::{free_port, RedisServer};
use serde_json::Value;

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    #[track_caller]
    fn ok(self) -> Run {
        assert_eq!(self.code, 0, "{self:?}");
        self
    }
}

/// Runs `punctual ARGS` with `env` and no other PUNCTUAL_* variable (no
/// --redis is added: tests give it or a config file).
fn punctual(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("PUNCTUAL_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run punctual");
    Run {
        code: out.status.code().expect("punctual exited by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `f` with a library queue on `url` under `prefix`.
fn with_queue<T>(url: &str, prefix: &str, f: impl AsyncFnOnce(Queue) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let q = Queue::builder(url).prefix(prefix).connect().await.unwrap();
        f(q).await
    })
}

/// Pushes jobs with these ids, claims them and fails them permanently.
/// The topic's ready set must be empty before (claims take any ready job).
async fn make_dead(q: &Queue, topic: &str, ids: &[String]) {
    for chunk in ids.chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|id| Job::new(format!("payload of {id}")).id(id.as_str()))
            .collect();
        q.enqueue_batch(topic, jobs).await.unwrap();
        let claimed = q
            .claim(topic, chunk.len(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(claimed.len(), chunk.len(), "was ready empty?");
        for d in claimed {
            let r = q
                .fail(topic, &d.id, d.token, "boom", None, true)
                .await
                .unwrap();
            assert_eq!(r, Failed::Dead);
        }
    }
}

// ---- the config file -------------------------------------------------------

#[test]
fn admin_commands_take_redis_and_prefix_from_the_config_file() {
    let server = RedisServer::start();
    let url = server.url();
    with_queue(&url, "ops", async |q| {
        q.enqueue(
            "orders",
            Job::new("x").id("o1").delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("punctual.toml");
    std::fs::write(
        &config,
        format!("redis = {url:?}\nprefix = \"ops\"\n[topics.orders]\nexec = [\"true\"]\n"),
    )
    .unwrap();
    let config = config.to_str().unwrap();

    // --config: the file's Redis and prefix.
    let out = punctual(&["--config", config, "stats", "orders", "--json"], &[]).ok();
    assert_eq!(out.json()[0]["pool"], 1, "{out:?}");
    // After the command name too, and from PUNCTUAL_CONFIG.
    let out = punctual(&["get", "orders", "o1", "--json", "-c", config], &[]).ok();
    assert_eq!(out.json()["state"], "pool");
    let out = punctual(&["topics", "--json"], &[("PUNCTUAL_CONFIG", config)]).ok();
    assert_eq!(out.json(), serde_json::json!(["orders"]));

    // An explicit flag or variable wins over the file.
    let out = punctual(
        &["--config", config, "--prefix", "other", "topics", "--json"],
        &[],
    )
    .ok();
    assert_eq!(out.json(), serde_json::json!([]));
    let out = punctual(
        &["--config", config, "topics", "--json"],
        &[("PUNCTUAL_PREFIX", "other")],
    )
    .ok();
    assert_eq!(out.json(), serde_json::json!([]));
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let out = punctual(&["--config", config, "--redis", &nowhere, "topics"], &[]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains(&nowhere), "{out:?}");
    let out = punctual(
        &["--config", config, "topics"],
        &[("PUNCTUAL_REDIS_URL", &nowhere)],
    );
    assert_eq!(out.code, 3, "{out:?}");

    // A config that cannot be read is an error, never a fallback.
    let missing = dir.path().join("nope.toml");
    let out = punctual(
        &[
            "--redis",
            &url,
            "--config",
            missing.to_str().unwrap(),
            "topics",
        ],
        &[],
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("nope.toml"), "{out:?}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "redis = \n").unwrap();
    let out = punctual(&["topics"], &[("PUNCTUAL_CONFIG", bad.to_str().unwrap())]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("bad.toml"), "{out:?}");
}
