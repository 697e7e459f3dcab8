//! End-to-end tests of the `punctual` binary against a private redis-server.

mod support;

use std::time::Duration;

use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{Job, Queue};
use punctual_testkit::{free_port, RedisServer};
use serde_json::Value;
use support::{punctual_at, Run};

/// A private Redis and the binary pointed at it.
struct Env {
    server: RedisServer,
}

impl Env {
    fn new() -> Env {
        Env {
            server: RedisServer::start(),
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        punctual_at(&self.server.url(), args, b"")
    }

    fn run_stdin(&self, args: &[&str], stdin: &str) -> Run {
        punctual_at(&self.server.url(), args, stdin.as_bytes())
    }

    fn dbsize(&self) -> i64 {
        self.server
            .cli(&["DBSIZE"])
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Pushes a job and returns its id.
    fn push(&self, args: &[&str]) -> String {
        let mut all = vec!["push"];
        all.extend_from_slice(args);
        let out = self.run(&all).ok();
        out.stdout.split_whitespace().next().unwrap().to_string()
    }

    fn get(&self, topic: &str, id: &str) -> Value {
        self.run(&["get", topic, id, "--json"]).ok().json()
    }

    /// Runs `f` with a library queue on this server.
    fn with_queue<T>(&self, f: impl AsyncFnOnce(Queue) -> T) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let q = Queue::connect(self.server.url()).await.unwrap();
            f(q).await
        })
    }

    /// Pushes jobs with these ids, claims them and fails them permanently.
    /// The topic's ready set must be empty before (claims take any ready job).
    fn make_dead(&self, topic: &str, ids: &[&str]) {
        self.with_queue(async |q| {
            for id in ids {
                let job = Job::new(format!("payload of {id}")).id(*id);
                q.enqueue(topic, job).await.unwrap();
            }
            let claimed = raw::claim(
                &q,
                &topic.parse().unwrap(),
                ids.len(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
            let mut got: Vec<&str> = claimed.iter().map(|d| d.id.as_str()).collect();
            got.sort();
            let mut want = ids.to_vec();
            want.sort();
            assert_eq!(got, want, "claimed other jobs: was ready empty?");
            for d in claimed {
                let r = raw::fail(
                    &q,
                    &topic.parse().unwrap(),
                    &d.lease(),
                    "boom: card declined",
                    FailKind::Permanent,
                )
                .await
                .unwrap();
                assert_eq!(r, Failed::Dead);
            }
        })
    }
}

// ---- push ----------------------------------------------------------------

#[test]
fn push_payload_argument_prints_id_and_created() {
    let env = Env::new();
    let out = env.run(&["push", "orders", "hello"]).ok();
    let words: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(words.len(), 2, "{out:?}");
    assert_eq!(words[1], "created");
    let job = env.get("orders", words[0]);
    assert_eq!(job["payload"], "hello");
    assert_eq!(job["state"], "ready");
}

#[test]
fn push_reads_stdin_when_payload_is_absent_or_dash() {
    let env = Env::new();
    let out = env
        .run_stdin(&["push", "orders", "--id", "a"], "from stdin\n")
        .ok();
    assert_eq!(out.stdout, "a created\n");
    assert_eq!(env.get("orders", "a")["payload"], "from stdin\n");
    env.run_stdin(&["push", "orders", "-", "--id", "b"], "dash")
        .ok();
    assert_eq!(env.get("orders", "b")["payload"], "dash");
}

#[test]
fn push_delay_and_at_put_the_job_in_pool_at_its_due_time() {
    let env = Env::new();
    env.push(&["orders", "x", "--id", "d", "--delay", "30s"]);
    let job = env.get("orders", "d");
    assert_eq!(job["state"], "pool");
    let wait = job["due_ms"].as_i64().unwrap() - job["now_ms"].as_i64().unwrap();
    assert!((29_000..=30_001).contains(&wait), "due in {wait} ms");

    env.push(&[
        "orders",
        "x",
        "--id",
        "t",
        "--at",
        "2031-02-03T04:05:06.789Z",
    ]);
    let job = env.get("orders", "t");
    assert_eq!(job["state"], "pool");
    assert_eq!(job["due"], "2031-02-03T04:05:06.789Z");

    let text = env.run(&["get", "orders", "d"]).ok().stdout;
    assert!(text.contains("state:       pool"), "{text}");
    assert!(text.contains("(in 2"), "{text}");
}

#[test]
fn push_of_a_live_id_is_duplicate_unless_replace() {
    let env = Env::new();
    let first = env
        .run(&["push", "orders", "v1", "--id", "order:1", "--json"])
        .ok()
        .json();
    assert_eq!(
        first,
        serde_json::json!({"id": "order:1", "status": "created"})
    );
    let again = env.run(&["push", "orders", "v2", "--id", "order:1"]).ok();
    assert_eq!(again.stdout, "order:1 duplicate\n");
    assert_eq!(env.get("orders", "order:1")["payload"], "v1");
    let replaced = env
        .run(&[
            "push",
            "orders",
            "v3",
            "--id",
            "order:1",
            "--replace",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(replaced["status"], "replaced");
    assert_eq!(env.get("orders", "order:1")["payload"], "v3");
}

#[test]
fn push_max_attempts_and_backoff_are_stored() {
    let env = Env::new();
    env.push(&[
        "orders",
        "x",
        "--id",
        "m",
        "--max-attempts",
        "2",
        "--backoff",
        "1s,5s",
    ]);
    assert_eq!(env.get("orders", "m")["max_attempts"], 2);
}

#[test]
fn push_batch_enqueues_every_line() {
    let env = Env::new();
    let input = concat!(
        "{\"payload\": \"raw text\", \"id\": \"b1\"}\n",
        "\n",
        "{\"payload\": {\"order\": 2}, \"id\": \"b2\", \"delay_ms\": 60000, \"max_attempts\": 3}\n",
        "{\"payload\": \"again\", \"id\": \"b1\"}\n",
        "{\"payload\": [1, 2], \"at\": \"2031-01-01T00:00:00Z\"}\n",
    );
    let summary = env
        .run_stdin(&["push", "orders", "--batch", "--json"], input)
        .ok()
        .json();
    assert_eq!(
        summary,
        serde_json::json!({"topic": "orders", "jobs": 4, "created": 3, "duplicate": 1, "replaced": 0, "dead": 0})
    );
    assert_eq!(env.get("orders", "b1")["payload"], "raw text");
    let b2 = env.get("orders", "b2");
    assert_eq!(b2["payload"], r#"{"order":2}"#);
    assert_eq!(b2["state"], "pool");
    assert_eq!(b2["max_attempts"], 3);

    let text = env.run_stdin(&["push", "orders", "--batch"], input).ok();
    assert_eq!(
        text.stdout,
        "pushed 4 jobs to topic \"orders\": 1 created, 3 duplicate\n"
    );
}

#[test]
fn push_batch_with_a_bad_line_writes_nothing() {
    let env = Env::new();
    let input = concat!(
        "{\"payload\": 1}\n",
        "{\"payload\": 2}\n",
        "{\"payload\": 3, \"delay_ms\": -5}\n",
        "{\"payload\": 4}\n",
    );
    let out = env.run_stdin(&["push", "orders", "--batch"], input);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.starts_with("punctual: error: line 3: "),
        "{out:?}"
    );
    assert!(out.stderr.contains("negative"), "{out:?}");
    assert_eq!(env.dbsize(), 0);

    let out = env.run_stdin(&["push", "orders", "--batch"], "{\"payload\": 1}\n{oops\n");
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("line 2: "), "{out:?}");
    assert_eq!(env.dbsize(), 0);
}

// ---- get, cancel, reschedule ------------------------------------------------

#[test]
fn get_shows_binary_payloads_escaped_and_as_hex() {
    let env = Env::new();
    env.with_queue(async |q| {
        q.enqueue("bin", Job::new(vec![0xff, 0x00, b'a']).id("b"))
            .await
            .unwrap();
    });
    let text = env.run(&["get", "bin", "b"]).ok().stdout;
    assert!(
        text.contains(r"payload:     \xff\x00a  (3 bytes)"),
        "{text}"
    );
    let json = env.get("bin", "b");
    assert_eq!(json["payload_hex"], "ff0061");
    assert_eq!(json["payload"], Value::Null);
}

#[test]
fn get_and_cancel_of_an_id_that_is_not_live_exit_1() {
    let env = Env::new();
    env.push(&["orders", "x", "--id", "here"]);
    for cmd in ["get", "cancel"] {
        let out = env.run(&[cmd, "orders", "gone"]);
        assert_eq!(out.code, 1, "{out:?}");
        assert!(out.stderr.contains(r#"no live job "gone""#), "{out:?}");
    }
}

#[test]
fn cancel_removes_the_job() {
    let env = Env::new();
    env.push(&["orders", "x", "--id", "c", "--delay", "1h"]);
    let out = env.run(&["cancel", "orders", "c"]).ok();
    assert_eq!(out.stdout, "cancelled c while waiting (was pool)\n");
    assert_eq!(env.run(&["get", "orders", "c"]).code, 1);
}

#[test]
fn reschedule_moves_a_waiting_job() {
    let env = Env::new();
    env.push(&["orders", "x", "--id", "r", "--delay", "1h"]);
    let out = env
        .run(&["reschedule", "orders", "r", "--delay", "0s"])
        .ok();
    assert!(
        out.stdout.starts_with("rescheduled r (was pool): due "),
        "{out:?}"
    );
    assert_eq!(env.get("orders", "r")["state"], "ready");
    let out = env
        .run(&[
            "reschedule",
            "orders",
            "r",
            "--at",
            "2032-01-01T00:00:00Z",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(out["was"], "ready");
    assert_eq!(out["state"], "pool");
    assert_eq!(out["due"], "2032-01-01T00:00:00.000Z");
}

#[test]
fn reschedule_of_a_running_or_dead_job_explains_and_exits_1() {
    let env = Env::new();
    env.make_dead("orders", &["dead"]);
    env.push(&["orders", "x", "--id", "run"]);
    env.with_queue(async |q| {
        raw::claim(&q, &"orders".parse().unwrap(), 1, Duration::from_secs(60))
            .await
            .unwrap();
    });
    let out = env.run(&["reschedule", "orders", "run", "--delay", "1m"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("is running"), "{out:?}");

    let out = env.run(&["reschedule", "orders", "dead", "--delay", "1m"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("punctual dead replay orders dead"),
        "{out:?}"
    );
    assert_eq!(env.get("orders", "dead")["state"], "dead");
}

// ---- stats, topics ---------------------------------------------------------

#[test]
fn stats_and_topics_report_every_topic() {
    let env = Env::new();
    env.push(&["orders", "x", "--delay", "1h"]);
    env.push(&["orders", "y"]);
    env.make_dead("mail", &["m1"]);
    env.push(&["mail", "z"]);

    let topics = env.run(&["topics", "--json"]).ok().json();
    assert_eq!(topics, serde_json::json!(["mail", "orders"]));
    assert_eq!(env.run(&["topics"]).ok().stdout, "mail\norders\n");

    let all = env.run(&["stats", "--json"]).ok().json();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["topic"], "mail");
    assert_eq!(all[0]["ready"], 1);
    assert_eq!(all[0]["dead"], 1);
    assert_eq!(all[0]["counters"]["dead"], 1);
    assert_eq!(all[1]["topic"], "orders");
    assert_eq!(all[1]["pool"], 1);
    assert_eq!(all[1]["ready"], 1);

    let one = env.run(&["stats", "orders", "--json"]).ok().json();
    assert_eq!(one.as_array().unwrap().len(), 1);

    let table = env.run(&["stats"]).ok().stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("TOPIC"), "{table}");
    assert!(lines[2].starts_with("orders  1     1 "), "{table}");
}

/// Adds names to the set of known topics as another language's producer
/// could: any bytes.
fn sadd_topics(server: &RedisServer, names: &[&[u8]]) {
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let added: i64 = redis::cmd("SADD")
        .arg("punctual:topics")
        .arg(names)
        .query(&mut con)
        .unwrap();
    assert_eq!(added as usize, names.len());
}

#[test]
fn a_bad_name_in_the_topic_set_is_skipped_with_a_warning() {
    let env = Env::new();
    env.push(&["orders", "x"]);
    sadd_topics(
        &env.server,
        &[b"bad\xff", b"a{b}", "or\u{202e}ders".as_bytes()],
    );

    let run = env.run(&["topics"]).ok();
    assert_eq!(run.stdout, "orders\n");
    assert_eq!(run.stderr.matches("warning: skipped").count(), 3, "{run:?}");
    assert!(run.stderr.contains(r#""bad\xff""#), "{run:?}");
    assert!(run.stderr.contains("not valid UTF-8"), "{run:?}");
    assert!(run.stderr.contains("braces"), "{run:?}");
    assert!(run.stderr.contains("U+202E"), "{run:?}");
    let json = env.run(&["topics", "--json"]).ok().json();
    assert_eq!(json, serde_json::json!(["orders"]));

    let all = env.run(&["stats", "--json"]).ok();
    assert!(all.stderr.contains("warning: skipped"), "{all:?}");
    let all = all.json();
    assert_eq!(all.as_array().unwrap().len(), 1);
    assert_eq!(all[0]["topic"], "orders");

    let check = env.run(&["check"]).ok();
    assert!(check.stderr.contains("warning: skipped"), "{check:?}");
}

#[test]
fn prefix_separates_queues() {
    let env = Env::new();
    env.push(&["--prefix", "other", "orders", "x"]);
    assert_eq!(
        env.run(&["topics", "--json"]).ok().json(),
        serde_json::json!([])
    );
    let other = env
        .run(&["--prefix", "other", "topics", "--json"])
        .ok()
        .json();
    assert_eq!(other, serde_json::json!(["orders"]));
}

// ---- dead ------------------------------------------------------------------

#[test]
fn dead_list_replay_and_purge() {
    let env = Env::new();
    env.make_dead("orders", &["d1", "d2", "d3", "d4"]);

    let list = env.run(&["dead", "list", "orders", "--json"]).ok().json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 4);
    assert_eq!(list[0]["last_error"], "boom: card declined");
    assert_eq!(list[0]["attempts"], 1);

    let page = env
        .run(&["dead", "list", "orders", "--limit", "3"])
        .ok()
        .stdout;
    assert!(page.starts_with("ID "), "{page}");
    assert!(page.contains("boom: card declined"), "{page}");
    assert!(page.contains("dead jobs 1-3 of 4"), "{page}");
    assert!(page.contains("--offset 3"), "{page}");

    let out = env.run(&["dead", "replay", "orders", "d1"]).ok();
    assert!(out.stdout.starts_with("replayed 1 dead job "), "{out:?}");
    let d1 = env.get("orders", "d1");
    assert_eq!(d1["state"], "ready");
    assert_eq!(d1["attempts"], 0);

    let out = env.run(&["dead", "replay", "orders", "d2", "d1", "--json"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.json()["ids"], serde_json::json!(["d2"]));
    assert!(out.stderr.contains("1 of 2 ids were not dead"), "{out:?}");
    assert!(out.stderr.contains("d1"), "{out:?}");

    let out = env
        .run(&["dead", "replay", "orders", "--oldest", "1", "--json"])
        .ok();
    assert_eq!(out.json()["replayed"], 1);

    let out = env.run(&["dead", "purge", "orders", "--all"]).ok();
    assert_eq!(out.stdout, "purged 1 dead job of topic \"orders\"\n");
    assert_eq!(
        env.run(&["dead", "list", "orders", "--json"]).ok().json(),
        serde_json::json!([])
    );

    let out = env.run(&["dead", "purge", "orders", "d1"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        env.get("orders", "d1")["state"],
        "ready",
        "purge touches dead jobs only"
    );

    // orders has ready jobs now: make more dead ones in another topic.
    env.make_dead("later", &["d5", "d6"]);
    let out = env
        .run(&["dead", "replay", "later", "--all", "--json"])
        .ok();
    assert_eq!(out.json()["replayed"], 2);
    env.make_dead("other", &["d7"]);
    let out = env.run(&["dead", "purge", "other", "d7", "--json"]).ok();
    assert_eq!(out.json()["purged"], 1);
}

#[test]
fn dead_commands_need_a_selection() {
    let env = Env::new();
    for args in [
        &["dead", "replay", "orders"][..],
        &["dead", "purge", "orders"],
        &["dead", "replay", "orders", "x", "--all"],
        &["dead", "list", "orders", "--limit", "1001"],
        &["dead", "list", "orders", "--limit", "0"],
    ] {
        let out = env.run(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
    }
}

// ---- check -----------------------------------------------------------------

#[test]
fn check_exits_0_on_a_clean_topic_and_1_on_a_violation() {
    let env = Env::new();
    env.push(&["orders", "x", "--id", "j1"]);
    env.push(&["orders", "y", "--id", "j2", "--delay", "1h"]);
    let out = env.run(&["check"]).ok();
    assert_eq!(out.stdout, "checked 1 topic: no violations\n");
    env.run(&["check", "orders"]).ok();

    // j1 is ready; put it in pool too.
    env.server
        .cli(&["ZADD", "punctual:{orders}:pool", "1", "j1"])
        .unwrap();
    let out = env.run(&["check"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("orders  j1  in pool,ready"), "{out:?}");
    assert!(out.stderr.contains("found 1 violation"), "{out:?}");

    let out = env.run(&["check", "orders", "--json"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.json()["violations"],
        serde_json::json!([{"topic": "orders", "id": "j1", "problem": "in pool,ready"}])
    );
}

/// A producer that stops between its enqueue and the SADD to the set of
/// known topics leaves a topic with jobs that `topics` does not list:
/// `check` (all topics) finds it by its keys, as its logical name (not its
/// partitions), checks it and exits 1 naming it.
#[test]
fn check_reports_a_topic_with_jobs_missing_from_the_topic_set() {
    let env = Env::new();
    env.push(&["listed", "x"]);
    env.push(&["orphan", "x", "--id", "o1", "--delay", "1h"]);
    env.with_queue(async |q| {
        q.set_partitions("split", 3).await.unwrap();
        for i in 0..6 {
            q.enqueue("split", Job::new("p").id(format!("s{i}")))
                .await
                .unwrap();
        }
        // Settings alone (no job) are not a topic with jobs.
        q.set_topic_defaults("settings-only", Some(3), None)
            .await
            .unwrap();
    });
    // As if the producers had stopped before their SADD.
    env.server
        .cli(&[
            "SREM",
            "punctual:topics",
            "orphan",
            "split",
            "settings-only",
        ])
        .unwrap();
    // Keys of another prefix are not ours.
    env.server
        .cli(&["ZADD", "other:{stranger}:ready", "1", "j"])
        .unwrap();
    assert_eq!(env.run(&["topics"]).ok().stdout.trim(), "listed");

    let out = env.run(&["check"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stdout.contains("orphan") && out.stdout.contains("unlisted topic"),
        "{out:?}"
    );
    assert!(
        !out.stdout.contains("stranger") && !out.stdout.contains("settings-only"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("split#"), "{out:?}");
    let json = env.run(&["check", "--json"]).json();
    let unlisted: Vec<&str> = json["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["problem"].as_str().unwrap().starts_with("unlisted topic"))
        .map(|v| v["topic"].as_str().unwrap())
        .collect();
    assert_eq!(unlisted, ["orphan", "split"], "{json}");
    assert_eq!(
        json["topics"],
        serde_json::json!(["listed", "orphan", "split"])
    );

    // Listed again (the next enqueue registers it), it is no problem.
    env.push(&["orphan", "y"]);
    env.server
        .cli(&["SADD", "punctual:topics", "split"])
        .unwrap();
    let out = env.run(&["check"]).ok();
    assert_eq!(out.stdout, "checked 3 topics: no violations\n");
}

// ---- bad input, unreachable Redis, scripts -----------------------------------

#[test]
fn bad_input_exits_2_with_a_message_and_writes_nothing() {
    let env = Env::new();
    env.push(&["orders", "x", "--id", "keep"]);
    let before = env.dbsize();
    let big = "x".repeat(11);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["push", "a{b}", "x"], "braces"),
        (
            vec!["push", "orders", "x", "--id", ""],
            "ids may not be empty",
        ),
        (
            vec!["--max-payload", "10", "push", "orders", &big],
            "over the 10-byte limit",
        ),
        (vec!["push", "orders", "x", "--delay", "-5s"], "negative"),
        (
            vec!["push", "orders", "x", "--delay", "5x"],
            "unknown time unit",
        ),
        (
            vec!["push", "orders", "x", "--at", "not-a-time"],
            "RFC 3339",
        ),
        (
            vec![
                "push",
                "orders",
                "x",
                "--delay",
                "1s",
                "--at",
                "2030-01-01T00:00:00Z",
            ],
            "cannot be used with",
        ),
        (
            vec!["push", "orders", "x", "--max-attempts", "0"],
            "--max-attempts",
        ),
        (vec!["get", "a{b}", "x"], "braces"),
        (vec!["cancel", "orders", ""], "ids may not be empty"),
        (
            vec!["reschedule", "orders", "keep", "--delay", "-5s"],
            "negative",
        ),
        (vec!["stats", "a b"], "spaces"),
        (vec!["script", "nope"], "unknown script"),
    ];
    for (args, said) in cases {
        let out = env.run(&args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(said),
            "{args:?} should say {said:?}: {out:?}"
        );
        assert_eq!(env.dbsize(), before, "{args:?} wrote something");
    }
    // Over the limit on stdin too.
    let out = env.run_stdin(&["--max-payload", "10", "push", "orders"], &big);
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(env.dbsize(), before);
    assert_eq!(env.get("orders", "keep")["payload"], "x");
}

#[test]
fn unreachable_redis_exits_3_naming_the_url() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    for args in [&["push", "orders", "x"][..], &["stats"], &["check"]] {
        let out = punctual_at(&url, args, b"");
        assert_eq!(out.code, 3, "{out:?}");
        assert!(
            out.stderr
                .starts_with("punctual: error: cannot reach Redis at "),
            "{out:?}"
        );
        assert!(out.stderr.contains(&url), "{out:?}");
        assert!(out.stderr.contains("is redis-server running?"), "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    }
}

#[test]
fn redis_that_does_not_answer_exits_3() {
    let env = Env::new();
    env.server.pause();
    let out = env.run(&["stats"]);
    env.server.resume();
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("timed out"), "{out:?}");
    assert!(out.stderr.contains("is redis-server running?"), "{out:?}");
}

#[test]
fn bad_input_is_reported_before_connecting() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let out = punctual_at(&url, &["push", "a{b}", "x"], b"");
    assert_eq!(out.code, 2, "{out:?}");
}

#[test]
fn script_prints_the_exact_lua_without_redis() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let out = punctual_at(&url, &["script", "enqueue"], b"").ok();
    assert!(out.stdout.starts_with("#!lua"), "{out:?}");
    assert_eq!(
        out.stdout,
        punctual::internal::script_source("enqueue").unwrap()
    );

    let list = punctual_at(&url, &["script"], b"").ok().stdout;
    for name in punctual::internal::script_names() {
        assert!(
            list.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name}: {list}"
        );
    }
}

#[test]
fn script_sha_is_the_one_redis_computes() {
    let env = Env::new();
    let json = env.run(&["script", "enqueue", "--json"]).ok().json();
    let source = json["source"].as_str().unwrap();
    let sha = env.server.cli(&["SCRIPT", "LOAD", source]).unwrap();
    assert_eq!(json["sha1"], sha.trim());
}

#[test]
fn push_help_has_an_example() {
    let out = punctual_at("redis://unused", &["push", "--help"], b"").ok();
    assert!(out.stdout.contains("Examples:"), "{out:?}");
    assert!(out.stdout.contains("--batch"), "{out:?}");
}

/// Waits, if needed, until Redis's clock has at least `need` seconds left in
/// its minute; returns that minute (epoch ms / 60,000).
fn fresh_minute(server: &RedisServer, need: i64) -> i64 {
    let now = || {
        let t = server.cli(&["TIME"]).unwrap();
        let mut it = t.split_whitespace().map(|v| v.parse::<i64>().unwrap());
        it.next().unwrap() * 1000 + it.next().unwrap() / 1000
    };
    let left = 60_000 - now() % 60_000;
    if left < need * 1000 {
        std::thread::sleep(Duration::from_millis(left as u64 + 50));
    }
    now() / 60_000
}

#[test]
fn stats_history_prints_per_minute_figures_with_gaps() {
    let env = Env::new();
    let m = fresh_minute(&env.server, 15);
    // A snapshot of m - 1 (nothing counted yet) as a scheduler would take,
    // none of m - 2.
    let prev = format!("punctual:{{orders}}:hist:{}", m - 1);
    env.server
        .cli(&["HSET", &prev, "at", &((m - 1) * 60_000).to_string()])
        .unwrap();
    env.with_queue(async |q| {
        q.snapshot_history("orders").await.unwrap();
        for i in 0..3 {
            q.enqueue("orders", Job::new("x").id(format!("j{i}")))
                .await
                .unwrap();
        }
        let jobs = raw::claim(&q, &"orders".parse().unwrap(), 2, Duration::from_secs(60))
            .await
            .unwrap();
        let done: Vec<Lease> = jobs.iter().map(|d| d.lease()).collect();
        raw::ack(&q, &"orders".parse().unwrap(), &done)
            .await
            .unwrap();
    });

    let out = env.run(&["stats", "orders", "--history", "3m"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("MINUTE"), "{out}");
    assert!(
        lines[0].contains("ENQUEUED") && lines[0].contains("DONE") && lines[0].contains("LATE-MAX"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    // MINUTE is "YYYY-MM-DD HH:MM", then ENQUEUED DONE RETRIED DEAD RECLAIMED.
    assert_eq!(
        &rows[0][2..7],
        &["-", "-", "-", "-", "-"],
        "no snapshot: a gap\n{out}"
    );
    assert_eq!(&rows[1][2..7], &["0", "0", "0", "0", "0"], "{out}");
    assert_eq!(&rows[2][2..7], &["3", "2", "0", "0", "0"], "{out}");
    let hhmm = |minute: i64| {
        let t = chrono::DateTime::from_timestamp(minute * 60, 0).unwrap();
        t.format("%H:%M").to_string()
    };
    assert_eq!(rows[0][1], hhmm(m - 2), "{out}");
    assert_eq!(rows[2][1], hhmm(m), "{out}");

    let json = env
        .run(&["stats", "orders", "--history", "3m", "--json"])
        .ok()
        .json();
    let minutes = json["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 3);
    assert!(minutes[0]["counters"].is_null());
    assert_eq!(minutes[2]["counters"]["done"], 2);
    assert_eq!(minutes[2]["minute"], m);

    let bad = env.run(&["stats", "--history", "1h"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("TOPIC"), "{bad:?}");
    let bad = env.run(&["stats", "orders", "--history", "8d"]);
    assert_ne!(bad.code, 0, "{bad:?}");
}

#[test]
fn push_expire_timeout_and_group_are_stored_and_shown() {
    let env = Env::new();
    env.push(&[
        "orders",
        "x",
        "--id",
        "o",
        "--delay",
        "10m",
        "--expire",
        "1h",
        "--timeout",
        "30s",
        "--group",
        "acme",
    ]);
    let v = env.get("orders", "o");
    let due = v["due_ms"].as_i64().unwrap();
    assert_eq!(v["deadline_ms"].as_i64(), Some(due + 3_600_000));
    assert_eq!(v["timeout_ms"], 30_000);
    assert_eq!(v["group"], "acme");
    let text = env.run(&["get", "orders", "o"]).ok().stdout;
    assert!(text.contains("group:       acme"), "{text}");
    assert!(text.contains("timeout:     30000 ms"), "{text}");
    assert!(text.contains("expires:"), "{text}");
    // A job without options shows none of them.
    env.push(&["orders", "x", "--id", "plain"]);
    let v = env.get("orders", "plain");
    assert!(
        v.get("group").is_none() && v.get("deadline_ms").is_none(),
        "{v}"
    );
    // Batch lines carry them too; a bad one writes nothing.
    env.run_stdin(
        &["push", "orders", "--batch"],
        "{\"payload\": 1, \"id\": \"b\", \"expire_ms\": 5000, \"timeout_ms\": 7, \"group\": \"g-1\"}\n",
    )
    .ok();
    let v = env.get("orders", "b");
    assert_eq!(
        (
            v["deadline_ms"].as_i64().unwrap() - v["due_ms"].as_i64().unwrap(),
            &v["timeout_ms"],
            &v["group"]
        ),
        (5000, &Value::from(7), &Value::from("g-1"))
    );
    let before = env.dbsize();
    for args in [
        &["push", "orders", "x", "--group", "no spaces"][..],
        &["push", "orders", "x", "--expire", "0s"],
        &["push", "orders", "x", "--timeout", "11years"],
    ] {
        let r = env.run(args);
        assert_ne!(r.code, 0, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains("group")
                || r.stderr.contains("expiry")
                || r.stderr.contains("timeout"),
            "{args:?}: {r:?}"
        );
    }
    assert_eq!(env.dbsize(), before, "refused pushes wrote nothing");
}
