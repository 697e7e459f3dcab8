//! `punctual import zset` end to end: a home-made ZSET queue (members are
//! JSON, scores are due times) moved into a topic by the real binary, safely:
//! dry run first, each member removed only after punctual accepted it,
//! rerunnable, bad members left in place and reported, and a kill in the
//! middle followed by a rerun loses nothing and duplicates nothing.

mod support;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use punctual::{Queue, State};
use punctual_testkit::eventually;
use punctual_testkit::RedisServer;
use serde_json::Value;
use support::{punctual, BIN};

const KEY: &str = "legacy:orders";
/// A due time in seconds (2030-01-01T00:00:00Z), far enough ahead that no
/// job becomes due during a test.
const DUE_S: i64 = 1_893_456_000;

/// The legacy member of order `i`: JSON with its id in `uuid`.
fn member(i: usize) -> String {
    format!(r#"{{"uuid":"u-{i}","order":{i}}}"#)
}

/// Fills the legacy ZSET with `n` members, due at DUE_S + i seconds.
fn fill(redis: &RedisServer, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut args = vec!["ZADD".to_string(), KEY.to_string()];
        for &i in chunk {
            args.push((DUE_S + i as i64).to_string());
            args.push(member(i));
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        redis.cli(&refs).unwrap();
    }
}

fn zcard(redis: &RedisServer) -> usize {
    redis.cli(&["ZCARD", KEY]).unwrap().trim().parse().unwrap()
}

/// Every job of the topic is in pool: checks each of the `n` orders is
/// there once, with its payload and due time.
async fn assert_imported(q: &Queue, n: usize) {
    let stats = q.stats("orders").await.unwrap();
    assert_eq!(
        (stats.pool, stats.ready, stats.running, stats.dead),
        (n as u64, 0, 0, 0),
        "{stats:?}"
    );
    for i in [0, 1, n / 2, n - 1] {
        let info = q
            .get("orders", &format!("u-{i}"))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("u-{i} missing"));
        assert_eq!(info.state, State::Pool);
        assert_eq!(info.due_ms, (DUE_S + i as i64) * 1000, "u-{i}");
        assert_eq!(String::from_utf8(info.payload).unwrap(), member(i));
    }
    let violations = q.check("orders").await.unwrap();
    assert!(violations.is_empty(), "{violations:?}");
}

const IMPORT: &[&str] = &[
    "import",
    "zset",
    KEY,
    "--topic",
    "orders",
    "--id-field",
    "uuid",
];

fn import_args(extra: &[&str]) -> Vec<String> {
    IMPORT.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn run_import(url: &str, extra: &[&str]) -> (i32, String, String) {
    let args = import_args(extra);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    punctual(url, &refs)
}

#[tokio::test]
async fn import_of_3000_members_twice_gives_3000_jobs() {
    let redis = RedisServer::start();
    let url = redis.url();
    fill(&redis, 3000);
    let q = Queue::connect(url.as_str()).await.unwrap();

    // Dry run: says what it would do, changes nothing.
    let (code, out, err) = run_import(&url, &["--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("would import 3000"), "{out}");
    assert!(
        out.contains("seconds"),
        "says how it read the scores: {out}"
    );
    assert_eq!(zcard(&redis), 3000);
    assert_eq!(q.stats("orders").await.unwrap().pool, 0);

    let (code, out, err) = run_import(&url, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("imported 3000"), "{out}");
    assert_eq!(zcard(&redis), 0);
    assert_imported(&q, 3000).await;

    // Again, with the legacy producer having re-added 5 members meanwhile
    // (what a crash between an enqueue and its ZREM also leaves): they are
    // live in punctual already, so they are removed and nothing is doubled.
    fill(&redis, 5);
    let (code, out, err) = run_import(&url, &["--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["imported"], 0, "{v}");
    assert_eq!(v["already"], 5, "{v}");
    assert_eq!(v["removed"], 5, "{v}");
    assert_eq!(zcard(&redis), 0);
    assert_imported(&q, 3000).await;

    // The import is in the audit trail.
    let (code, out, _) = punctual(&url, &["audit", "--json"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"import\""), "{out}");
}

#[tokio::test]
async fn bad_members_are_reported_and_left_in_place() {
    let redis = RedisServer::start();
    let url = redis.url();
    fill(&redis, 10);
    for (score, m) in [
        ("1893456000", "not json"),
        ("1893456001", r#"{"order":1}"#),
        ("1893456002", r#"{"uuid":{"nested":1}}"#),
        ("1893456003", r#"{"uuid":""}"#),
    ] {
        redis.cli(&["ZADD", KEY, score, m]).unwrap();
    }
    let q = Queue::connect(url.as_str()).await.unwrap();

    for _ in 0..2 {
        let (code, out, err) = run_import(&url, &[]);
        assert_eq!(code, 1, "bad members make the run exit 1: {out}{err}");
        assert!(err.contains("4 members were left"), "{err}");
        assert!(err.contains("not JSON"), "{err}");
        assert!(err.contains("no \"uuid\""), "{err}");
        assert!(err.contains("not json"), "names the member: {err}");
        assert_eq!(zcard(&redis), 4, "the bad ones stay");
        assert_eq!(q.stats("orders").await.unwrap().pool, 10);
    }
}

#[tokio::test]
async fn scores_in_milliseconds_are_detected_or_forced() {
    let redis = RedisServer::start();
    let url = redis.url();
    let due_ms = DUE_S * 1000 + 123;
    redis
        .cli(&["ZADD", KEY, &due_ms.to_string(), r#"{"uuid":"ms"}"#])
        .unwrap();
    redis
        .cli(&["ZADD", KEY, &DUE_S.to_string(), r#"{"uuid":"s"}"#])
        .unwrap();
    let q = Queue::connect(url.as_str()).await.unwrap();

    // Forced to ms, a seconds score is a time in 1970: refused, left in place.
    let (code, out, err) = run_import(&url, &["--scores", "ms"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("1970"), "{err}");
    assert_eq!(zcard(&redis), 1);
    assert_eq!(q.get("orders", "ms").await.unwrap().unwrap().due_ms, due_ms);

    // Detected per member (the default).
    let (code, out, err) = run_import(&url, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        q.get("orders", "s").await.unwrap().unwrap().due_ms,
        DUE_S * 1000
    );
    assert_eq!(zcard(&redis), 0);
}

#[tokio::test]
async fn a_kill_in_the_middle_then_a_rerun_loses_nothing_and_duplicates_nothing() {
    let redis = RedisServer::start();
    let url = redis.url();
    fill(&redis, 3000);
    let q = Queue::connect(url.as_str()).await.unwrap();

    let args = import_args(&["--batch", "10"]);
    let mut child = Command::new(BIN)
        .arg("--redis")
        .arg(&url)
        .args(&args)
        .env_remove("PUNCTUAL_REDIS_URL")
        .env_remove("PUNCTUAL_PREFIX")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the import to start moving",
        || async { zcard(&redis) < 3000 },
    )
    .await;
    // Stop every write, so the import is surely in the middle, then kill it.
    redis.cli(&["CLIENT", "PAUSE", "30000", "WRITE"]).unwrap();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let status = child.wait().unwrap();
    redis.cli(&["CLIENT", "UNPAUSE"]).unwrap();
    assert!(status.code().is_none(), "killed, not finished: {status:?}");
    let left = zcard(&redis);
    let pool = q.stats("orders").await.unwrap().pool as usize;
    assert!(
        left > 0 && pool > 0,
        "killed in the middle: {left} left, {pool} in pool"
    );
    assert!(
        left + pool >= 3000,
        "nothing lost: {left} left + {pool} in pool"
    );

    let (code, out, err) = run_import(&url, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(zcard(&redis), 0);
    assert_imported(&q, 3000).await;
    // Each order once: 3,000 ids in pool (a ZSET), none elsewhere.
    let ids: HashSet<String> = (0..3000).map(|i| format!("u-{i}")).collect();
    for id in &ids {
        assert!(q.get("orders", id).await.unwrap().is_some(), "{id} lost");
    }
}

#[tokio::test]
async fn a_member_whose_id_is_live_with_another_payload_is_left_in_place() {
    let redis = RedisServer::start();
    let url = redis.url();
    fill(&redis, 10);
    let (code, out, err) = run_import(&url, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let q = Queue::connect(url.as_str()).await.unwrap();

    // The old producer re-adds order 1 with other data, and adds two
    // members that share one id: neither may vanish unimported.
    let changed = r#"{"uuid":"u-1","order":999}"#;
    redis.cli(&["ZADD", KEY, "1893456000", changed]).unwrap();
    redis
        .cli(&["ZADD", KEY, "1893456000", r#"{"uuid":"twin","n":1}"#])
        .unwrap();
    redis
        .cli(&["ZADD", KEY, "1893456001", r#"{"uuid":"twin","n":2}"#])
        .unwrap();
    let (code, out, err) = run_import(&url, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("2 members were left"), "{err}");
    assert!(err.contains("u-1"), "{err}");
    assert!(err.contains("another payload"), "{err}");
    assert_eq!(zcard(&redis), 2, "the changed member and one twin stay");
    let still = redis.cli(&["ZSCORE", KEY, changed]).unwrap();
    assert!(!still.trim().is_empty(), "the changed member stays");
    assert_eq!(
        String::from_utf8(q.get("orders", "u-1").await.unwrap().unwrap().payload).unwrap(),
        member(1),
        "the live job is untouched"
    );
    assert!(q.get("orders", "twin").await.unwrap().is_some());
    assert_eq!(q.stats("orders").await.unwrap().pool, 11);
}

/// A member whose id sits in punctual's dead set is not imported (the
/// enqueue says `dead`: the job would never run), so it must stay in the
/// ZSET and be reported, never removed as if punctual held it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_id_is_dead_in_punctual_is_left_in_place() {
    use punctual::raw::{self, FailKind, Lease, Partition};
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.as_str()).await.unwrap();
    q.enqueue("orders", punctual::Job::new("old").id("u-3"))
        .await
        .unwrap();
    let part = Partition::of("orders", 0, 1).unwrap();
    let got = raw::claim(&q, &part, 1, Duration::from_secs(60))
        .await
        .unwrap();
    raw::fail(
        &q,
        &part,
        &Lease::new(got[0].id.clone(), got[0].token),
        "gone",
        FailKind::Permanent,
    )
    .await
    .unwrap();
    assert_eq!(q.stats("orders").await.unwrap().dead, 1);

    fill(&redis, 5);
    let (code, out, err) = run_import(&url, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("u-3") && err.contains("dead"), "{err}");
    assert_eq!(zcard(&redis), 1, "the member of the dead id stays");
    let still = redis.cli(&["ZSCORE", KEY, &member(3)]).unwrap();
    assert!(!still.trim().is_empty(), "{still:?}");
    assert_eq!(q.stats("orders").await.unwrap().pool, 4);
}

/// Claims and acks every due job of "orders": how many ran.
async fn run_all(q: &Queue) -> usize {
    use punctual::raw::{self, Partition};
    let part = Partition::of("orders", 0, 1).unwrap();
    let mut ran = 0;
    loop {
        let got = raw::claim(q, &part, 100, Duration::from_secs(60))
            .await
            .unwrap();
        if got.is_empty() {
            return ran;
        }
        ran += got.len();
        let leases: Vec<_> = got.iter().map(|d| d.lease()).collect();
        assert!(raw::ack(q, &part, &leases)
            .await
            .unwrap()
            .iter()
            .all(|a| *a));
    }
}

/// Three members due a minute ago.
fn fill_due(redis: &RedisServer) -> i64 {
    let now_s: i64 = redis
        .cli(&["TIME"])
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for i in 0..3 {
        redis
            .cli(&["ZADD", KEY, &(now_s - 60).to_string(), &member(i)])
            .unwrap();
    }
    now_s
}

/// Issue 29 item 4: an import stopped between its enqueue and its ZREM
/// (here: its user may ZREM only punctual's keys, so the ZREM of the
/// legacy members fails after the enqueue),
/// whose jobs then run and are acked: the rerun enqueues none of them
/// again (3 members, 3 runs, not 6).
#[tokio::test]
async fn a_rerun_after_a_stop_before_the_zrem_runs_no_job_twice() {
    let redis = RedisServer::start();
    let url = redis.url();
    fill_due(&redis);
    let q = Queue::connect(url.as_str()).await.unwrap();
    redis
        .cli(&[
            "ACL",
            "SETUSER",
            "nozrem",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-zrem",
            "(~punctual:* +zrem)",
        ])
        .unwrap();
    let limited = url.replacen("redis://", "redis://nozrem:pw@", 1);
    let (code, out, err) = run_import(&limited, &[]);
    assert_ne!(code, 0, "the ZREM was refused: {out}{err}");
    assert_eq!(zcard(&redis), 3, "stopped before the ZREM");
    assert_eq!(run_all(&q).await, 3, "the three jobs ran");

    let (code, out, err) = run_import(&url, &["--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (v["imported"].as_u64(), v["already"].as_u64()),
        (Some(0), Some(3)),
        "{v}"
    );
    assert_eq!(zcard(&redis), 0);
    assert_eq!(run_all(&q).await, 0, "no job of the three runs twice");
    let journal = redis
        .cli(&["EXISTS", &format!("{KEY}:punctual-import")])
        .unwrap();
    assert_eq!(journal.trim(), "0", "the journal is empty");
}

/// A member added again after its job ran (the old producer scheduling
/// the same order again) is a new job: imported again, not taken for one
/// an interrupted run left.
#[tokio::test]
async fn a_member_added_again_after_its_job_ran_is_imported_again() {
    let redis = RedisServer::start();
    let url = redis.url();
    fill_due(&redis);
    let q = Queue::connect(url.as_str()).await.unwrap();
    let (code, out, err) = run_import(&url, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(run_all(&q).await, 3);
    fill_due(&redis);
    let (code, out, err) = run_import(&url, &["--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["imported"], 3, "{v}");
    assert_eq!(run_all(&q).await, 3);
}

/// Issue 28 item 6: --id-template makes the ids the new producer writes,
/// so a legacy member and a job of the new producer for the same order
/// share one id.
#[tokio::test]
async fn id_template_makes_the_new_producers_ids() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(url.as_str()).await.unwrap();
    // The new producer already wrote order 100002.
    q.enqueue("orders", punctual::Job::new("new").id("order:100002"))
        .await
        .unwrap();
    for (score, m) in [
        ("1893456000", r#"{"order_id":100001,"shop":"s1"}"#),
        ("1893456001", r#"{"order_id":100002,"shop":"s1"}"#),
        ("1893456002", r#"{"order_id":"x7","shop":"s2"}"#),
    ] {
        redis.cli(&["ZADD", KEY, score, m]).unwrap();
    }
    let import = |extra: &[&str]| {
        let mut a = vec!["import", "zset", KEY, "--topic", "orders"];
        a.extend_from_slice(extra);
        punctual(&url, &a)
    };
    let (code, _, err) = import(&["--id-template", "order:{order_id"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("without '}'"), "{err}");
    let (code, _, err) = import(&[
        "--id-template",
        "order:{order_id}",
        "--id-field",
        "order_id",
    ]);
    assert_eq!(code, 2, "one or the other: {err}");

    let (code, out, err) = import(&["--id-template", "order:{order_id}"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("order:100002") && err.contains("another payload"),
        "the new producer's job and the legacy member share the id: {err}"
    );
    assert_eq!(zcard(&redis), 1);
    for id in ["order:100001", "order:x7"] {
        assert!(q.get("orders", id).await.unwrap().is_some(), "{id}");
    }
    // Several fields, and text around them.
    redis
        .cli(&[
            "ZADD",
            "legacy:more",
            "1893456000",
            r#"{"order_id":5,"shop":"s9"}"#,
        ])
        .unwrap();
    let (code, out, err) = punctual(
        &url,
        &[
            "import",
            "zset",
            "legacy:more",
            "--topic",
            "orders",
            "--id-template",
            "{shop}/o-{order_id}!",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(q.get("orders", "s9/o-5!").await.unwrap().is_some());
}

/// On a Redis Cluster the journal lives in the source key's slot
/// (`{KEY}:punctual-import`), so the ZREM of a member and the HDEL of its
/// entry go in one MULTI; a rerun over members left behind doubles nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_on_a_cluster_moves_every_member_once() {
    let cluster = punctual_testkit::RedisCluster::start();
    let url = cluster.seed_urls();
    let add = |n: i64| {
        for i in 0..n {
            cluster
                .cli(&["ZADD", KEY, &(DUE_S + i).to_string(), &member(i as usize)])
                .unwrap();
        }
    };
    add(20);
    let q = Queue::connect(url.as_str()).await.unwrap();
    let (code, out, err) = run_import(&url, &["--json", "--batch", "7"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (v["imported"].as_u64(), v["removed"].as_u64()),
        (Some(20), Some(20)),
        "{v}"
    );
    add(5);
    let (code, out, err) = run_import(&url, &["--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (v["imported"].as_u64(), v["already"].as_u64()),
        (Some(0), Some(5)),
        "{v}"
    );
    assert_eq!(q.stats("orders").await.unwrap().pool, 20);
    assert_eq!(cluster.cli(&["EXISTS", KEY]).unwrap().trim(), "0");
    let journal = format!("{{{KEY}}}:punctual-import");
    assert_eq!(cluster.cli(&["EXISTS", &journal]).unwrap().trim(), "0");
}

/// The marks that make a rerun safe live only while their members are in
/// flight: a finished import leaves none in the topic's `P:{T}:fired` (so
/// a large import does not leave a mark per member for the 7 days nothing
/// trims them, nor in the way of the schedules' spread take-back), and no
/// journal.
#[tokio::test]
async fn a_finished_import_leaves_no_marks_behind() {
    let redis = RedisServer::start();
    let url = redis.url();
    fill(&redis, 1200);
    let (code, out, err) = run_import(&url, &["--batch", "500"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(zcard(&redis), 0);
    let marks = redis.cli(&["ZCARD", "punctual:{orders}:fired"]).unwrap();
    assert_eq!(marks.trim(), "0", "marks left behind");
    let journal = redis
        .cli(&["EXISTS", &format!("{KEY}:punctual-import")])
        .unwrap();
    assert_eq!(journal.trim(), "0", "the journal is empty");
    let q = Queue::connect(url.as_str()).await.unwrap();
    assert_imported(&q, 1200).await;
}
