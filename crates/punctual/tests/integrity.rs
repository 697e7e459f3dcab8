//! Regression tests of the outside review (issue 9), each against a private
//! redis-server: fencing tokens across a restart that loses writes, ids and
//! topic names that cannot be used, script arguments that are not finite
//! integers, KEYS that do not belong together, the oldest dead jobs of a
//! partitioned topic, and bad input that must change nothing. Also: claim's
//! attempts entries, one token per claim and ack's grouped form (issue 12).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::util::{part, TICK_ALL};
use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{DeadSelector, EnqueueOptions, EnqueueStatus, ErrorKind, Job, Queue, State};

use crate::util::{
    key, radix36, take_slowlog, topic_keys, Fixture, RedisServer, LONG_LEASE, PREFIX,
};
use punctual_testkit::eventually;

/// Calls `op` until it succeeds (Redis may still be coming back).
async fn until_ok<T, Fut>(what: &str, mut op: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = punctual::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

async fn claim_one(q: &Queue, t: &str) -> punctual::Delivery {
    let p = part(t);
    let mut got = until_ok("claim", || raw::claim(q, &p, 1, LONG_LEASE)).await;
    assert_eq!(got.len(), 1, "expected one job, got {got:?}");
    got.remove(0)
}

/// A stale holder (A) must be refused everything once B holds the job.
async fn assert_fenced(q: &Queue, t: &str, a: &punctual::Delivery, b: &punctual::Delivery) {
    assert_eq!(a.id, b.id);
    assert_ne!(
        a.token, b.token,
        "the token of the claim before the restart was handed out again"
    );
    assert!(
        b.token > a.token,
        "tokens went back: {} then {}",
        a.token,
        b.token
    );
    let stale = a.lease();
    assert_eq!(
        raw::ack(q, &part(t), std::slice::from_ref(&stale))
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::extend(q, &part(t), std::slice::from_ref(&stale), LONG_LEASE)
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::fail(q, &part(t), &a.lease(), "stale", FailKind::Permanent)
            .await
            .unwrap(),
        Failed::Stale
    );
    let info = q
        .get(t, &b.id)
        .await
        .unwrap()
        .expect("B's job is still there");
    assert_eq!(info.state, State::Running);
    // B, the holder, can ack.
    assert_eq!(
        raw::ack(q, &part(t), &[b.lease()]).await.unwrap(),
        vec![true]
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_do_not_repeat_after_a_restart_from_an_rdb_snapshot() {
    let mut server = RedisServer::start();
    let q = crate::util::queue(&server).await;
    let t = "rdb";
    q.enqueue(t, Job::new("x").id("x")).await.unwrap();
    assert_eq!(server.cli(&["SAVE"]).unwrap().trim(), "OK");
    // A claims after the snapshot: its claim is lost with the restart.
    let a = claim_one(&q, t).await;
    server.restart();
    let b = claim_one(&q, t).await;
    assert_eq!(b.attempt, 1, "the restart rolled the claim back");
    assert_fenced(&q, t, &a, &b).await;
}

/// The AOF file that receives new writes (Redis 7: appendonlydir/*.incr.aof).
fn incr_aof(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incr AOF file")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_do_not_repeat_after_an_aof_everysec_restart_that_lost_the_claim() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let q = crate::util::queue(&server).await;
    let t = "aof";
    q.enqueue(t, Job::new("x").id("x")).await.unwrap();
    let aof = incr_aof(server.dir());
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    eventually(
        Duration::from_secs(5),
        "the enqueue in the AOF",
        async || size(&aof) > 0,
    )
    .await;
    let before = size(&aof);
    let a = claim_one(&q, t).await;
    eventually(Duration::from_secs(5), "the claim in the AOF", async || {
        size(&aof) > before
    })
    .await;
    // What `appendfsync everysec` loses when the host dies within a second:
    // the claim's writes never reached the disk.
    server.kill();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&aof)
        .unwrap()
        .set_len(before)
        .unwrap();
    server.restart();
    let b = claim_one(&q, t).await;
    assert_eq!(b.attempt, 1, "the restart rolled the claim back");
    assert_fenced(&q, t, &a, &b).await;
}

// ---- script arguments ---------------------------------------------------

/// Values that are not finite integers in any range a script takes.
const NOT_INTEGERS: &[&str] = &[
    "inf",
    "-inf",
    "nan",
    "-nan",
    "1e400",
    "1e3",
    "1.5",
    "",
    "abc",
    "0x10",
    " 5",
    "5 ",
    "99999999999999999999",
    "-1",
];

/// EVAL of a script with the nine keys of `t` and `argv`.
fn eval(script: &str, keys: &[String], argv: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(punctual::script_source(script).unwrap())
        .arg(keys.len())
        .arg(keys)
        .arg(argv);
    cmd
}

/// Every script, assembled with only the includes it names, loads
/// under the SHA punctual computes and runs to its own answers: bad
/// arguments refused with PUNCTUAL_INVALID, keys of no topic refused by the
/// KEYS check. Never a Lua error (a helper left out is a nonexistent global).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_assembled_script_loads_and_answers_bad_input_itself() {
    let f = Fixture::new().await;
    let keys = topic_keys("assembled");
    let mut c = f.conn.clone();
    for name in punctual::script_names() {
        let source = punctual::script_source(name).unwrap();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&source)
            .query_async(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{name} does not load: {e}"));
        assert_eq!(sha, redis::Script::new(&source).get_hash(), "{name}");
        for argv in [vec![], vec!["x", "y", "z"]] {
            let r = eval(name, &keys, &argv)
                .query_async::<redis::Value>(&mut c)
                .await;
            if let Err(e) = r {
                assert_eq!(e.code(), Some("PUNCTUAL_INVALID"), "{name} {argv:?}: {e}");
            }
        }
        let err = eval(name, &["a".to_string()], &[])
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err(name);
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{name}: {err}");
        assert!(err.to_string().contains("nine keys"), "{name}: {err}");
    }
}

/// A topic with a job in each state and a running lease: returns the token.
async fn seed(f: &Fixture, t: &str) -> i64 {
    let q = &f.queue;
    q.enqueue(t, Job::new("p").id("dead")).await.unwrap();
    let d = claim_one(q, t).await;
    assert_eq!(d.id, "dead");
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("dead", d.token),
            "x",
            FailKind::Permanent
        )
        .await
        .unwrap(),
        Failed::Dead
    );
    q.enqueue(t, Job::new("p").id("run")).await.unwrap();
    let d = claim_one(q, t).await;
    assert_eq!(d.id, "run");
    q.enqueue(t, Job::new("p").id("ready")).await.unwrap();
    q.enqueue(t, Job::new("p").id("pool").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    d.token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_numeric_argument_of_every_script_must_be_a_finite_integer() {
    let f = Fixture::new().await;
    let t = "argv";
    let token = seed(&f, t).await.to_string();
    let keys = topic_keys(t);
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    for bad in NOT_INTEGERS {
        let calls: Vec<(&str, Vec<&str>)> = vec![
            ("claim", vec![bad, "1000"]),
            ("claim", vec!["1", bad]),
            ("extend", vec![bad, "run", &token]),
            ("extend", vec!["1000", "run", bad]),
            ("ack", vec!["run", bad]),
            ("fail", vec!["run", bad, "err", "", "0"]),
            ("fail", vec!["run", &token, "err", bad, "0"]),
            ("fail", vec!["run", &token, "err", "", bad]),
            ("tick", vec![bad, "1000", "1000"]),
            ("tick", vec!["1000", bad, "1000"]),
            ("tick", vec!["1000", "1000", bad]),
            ("enqueue", vec![bad, "0", "1", "new", "p", "d0", "", ""]),
            ("enqueue", vec!["65536", bad, "1", "new", "p", "d0", "", ""]),
            ("enqueue", vec!["65536", "0", bad, "new", "p", "d0", "", ""]),
            (
                "enqueue",
                vec!["65536", "0", "1", "new", "p", "d0", bad, ""],
            ),
            ("dead_list", vec![bad, "10"]),
            ("dead_list", vec!["0", bad]),
            ("dead_replay", vec!["oldest", bad]),
            ("dead_purge", vec!["oldest", bad]),
            ("cold_page", vec![bad, "0", "10", ""]),
            ("cold_page", vec!["60000", bad, "10", ""]),
            ("cold_page", vec!["60000", "0", bad, ""]),
        ];
        for (script, argv) in calls {
            // An empty max attempts or retry delay means "the default": fine.
            let default_ok = (script == "enqueue" && argv[6].is_empty())
                || (script == "fail" && argv[3].is_empty());
            if default_ok && bad.is_empty() {
                continue;
            }
            let r = eval(script, &keys, &argv)
                .query_async::<redis::Value>(&mut c)
                .await;
            let err = r.expect_err(&format!("{script} {argv:?} was accepted"));
            assert_eq!(
                err.code(),
                Some("PUNCTUAL_INVALID"),
                "{script} {argv:?}: {err}"
            );
            assert_eq!(
                f.snapshot().await,
                snap,
                "{script} {argv:?}: something was written"
            );
        }
    }
    // Delays and due times given as "d<ms>" / "a<ms>" with such values.
    for bad in [
        "dinf",
        "dnan",
        "d1e400",
        "ainf",
        "d1.5",
        "d-1",
        "d99999999999999999999",
    ] {
        for (script, argv) in [
            ("enqueue", vec!["65536", "0", "1", "new", "p", bad, "", ""]),
            ("reschedule", vec!["pool", bad]),
            // The due time of a paced replay, of the first or a later pair.
            ("dead_replay", vec!["due", "dead", bad]),
            ("dead_replay", vec!["due", "dead", "d0", "other", bad]),
        ] {
            let err = eval(script, &keys, &argv)
                .query_async::<redis::Value>(&mut c)
                .await
                .expect_err(&format!("{script} {argv:?} was accepted"));
            assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{script}: {err}");
            assert_eq!(f.snapshot().await, snap, "{script} {argv:?}: written");
        }
    }
    // The good calls still work.
    let ok: Vec<i64> = eval("extend", &keys, &["1000", "run", &token])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ok, vec![1]);
    assert!(f.queue.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_token_written_another_way_is_refused_and_changes_nothing() {
    let f = Fixture::new().await;
    let t = "forms";
    let token = seed(&f, t).await;
    let digits = token.to_string();
    let keys = topic_keys(t);
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    let forms = [
        format!("0x{token:x}"),
        format!("0X{token:X}"),
        format!("+{digits}"),
        format!("0{digits}"),
        format!("{}.{}e{}", &digits[..1], &digits[1..], digits.len() - 1),
        format!("{digits}.0"),
        format!(" {digits}"),
        format!("{digits} "),
    ];
    for form in &forms {
        // Ten years: an extend that took the token would move the deadline.
        for (script, argv) in [
            ("ack", vec!["run", form.as_str()]),
            ("extend", vec!["315360000000", "run", form.as_str()]),
            ("fail", vec!["run", form.as_str(), "err", "", "1"]),
        ] {
            let r = eval(script, &keys, &argv)
                .query_async::<redis::Value>(&mut c)
                .await;
            match &r {
                Err(e) => assert_eq!(e.code(), Some("PUNCTUAL_INVALID"), "{script} {form}: {e}"),
                // ack: none acked, the first pair refused.
                Ok(v) => assert!(
                    matches!(v, redis::Value::Array(a) if a == &[redis::Value::Int(0), redis::Value::Int(1)])
                        || script == "fail",
                    "{script} {form:?} took the token: {v:?}"
                ),
            }
            assert_eq!(
                f.snapshot().await,
                snap,
                "{script} {form:?}: something was written ({r:?})"
            );
        }
    }
    // The token as claim wrote it still works.
    let ok: Vec<i64> = eval("ack", &keys, &["run", &digits])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ok, vec![1]);
    assert!(f.queue.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_refuse_keys_that_are_not_the_nine_keys_of_one_topic() {
    let f = Fixture::new().await;
    let t = "keys";
    let token = seed(&f, t).await.to_string();
    seed(&f, "other").await;
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    let nine = topic_keys(t);
    let other = topic_keys("other");
    let mut mixed = nine.clone();
    mixed[2] = other[2].clone();
    let mut swapped = nine.clone();
    swapped.swap(0, 1);
    let mut prefixed = nine.clone();
    prefixed[4] = format!("x{}", nine[4]);
    let layouts: Vec<(&str, Vec<String>)> = vec![
        ("three keys", nine[..3].to_vec()),
        ("eight keys", nine[..8].to_vec()),
        ("ten keys", [nine.clone(), vec![nine[0].clone()]].concat()),
        ("another topic's running", mixed),
        ("pool and ready swapped", swapped),
        ("another prefix", prefixed),
        (
            "no hash tag",
            nine.iter().map(|k| k.replace(['{', '}'], "")).collect(),
        ),
    ];
    for (what, keys) in &layouts {
        let calls: Vec<(&str, Vec<&str>)> = vec![
            ("claim", vec!["10", "60000"]),
            ("tick", vec!["1000", "1000", "1000"]),
            ("ack", vec!["run", &token]),
            ("enqueue", vec!["65536", "0", "1", "new", "p", "d0", "", ""]),
            ("cancel", vec!["pool"]),
            ("get", vec!["pool"]),
            ("stats", vec![]),
        ];
        for (script, argv) in calls {
            let err = eval(script, keys, &argv)
                .query_async::<redis::Value>(&mut c)
                .await
                .expect_err(&format!("{script} with {what} was accepted"));
            assert_eq!(
                err.code(),
                Some("PUNCTUAL_INVALID"),
                "{script} {what}: {err}"
            );
            assert_eq!(f.snapshot().await, snap, "{script} with {what}: written");
        }
    }
}

// ---- ids and topic names -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_refuses_ids_that_are_not_utf8_or_hold_c1_controls() {
    let f = Fixture::new().await;
    let t = "utf8";
    f.queue
        .enqueue(t, Job::new("seed").id("seed"))
        .await
        .unwrap();
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    let bad_ids: Vec<Vec<u8>> = vec![
        b"\xff".to_vec(),
        b"order:\xc3".to_vec(),         // cut short
        b"\xc0\xafx".to_vec(),          // overlong
        b"\xed\xa0\x80".to_vec(),       // a surrogate
        b"\xf4\x90\x80\x80".to_vec(),   // past U+10FFFF
        "a\u{85}b".as_bytes().to_vec(), // a C1 control
    ];
    for id in &bad_ids {
        for replace in ["0", "1"] {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(punctual::script_source("enqueue").unwrap())
                .arg(9)
                .arg(topic_keys(t))
                .arg("65536")
                .arg(replace)
                .arg(2)
                .arg("fine")
                .arg("p")
                .arg("d0")
                .arg("")
                .arg("")
                .arg(&id[..])
                .arg("p")
                .arg("d0")
                .arg("")
                .arg("");
            let err = cmd
                .query_async::<redis::Value>(&mut c)
                .await
                .expect_err(&format!("id {id:?} was accepted"));
            assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{id:?}: {err}");
            assert_eq!(f.snapshot().await, snap, "id {id:?}: written");
        }
    }
    // Valid UTF-8 beyond ASCII is fine, and such a job can be acked.
    let id = "commande:é-ü-😀";
    f.queue.enqueue(t, Job::new("x").id(id)).await.unwrap();
    let _ = claim_one(&f.queue, t).await; // seed
    let d = claim_one(&f.queue, t).await;
    assert_eq!(d.id, id);
    assert_eq!(
        raw::ack(&f.queue, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_names_with_invisible_or_bidi_characters_are_refused() {
    let f = Fixture::new().await;
    f.queue.enqueue("seed", Job::new("x")).await.unwrap();
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    for name in [
        "ord\u{202e}sre",
        "orders\u{200b}",
        "\u{2066}orders\u{2069}",
        "or\u{200e}ders",
        "orders\u{200f}",
        "\u{feff}orders",
        "or\u{ad}ders",
        "or\u{2060}ders",
        "or\u{61c}ders",
    ] {
        let err = f.queue.enqueue(name, Job::new("x")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{name:?}");
        assert!(err.to_string().contains("invisible"), "{err}");
        assert!(punctual::validate_topic(name).is_err());
        // The script refuses such a topic too.
        let err = eval(
            "enqueue",
            &topic_keys(name),
            &["65536", "0", "1", "", "p", "d0", "", ""],
        )
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err(&format!("the script accepted topic {name:?}"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
        assert_eq!(f.snapshot().await, snap, "{name:?}: written");
    }
    // A topic that is not UTF-8, through the script.
    let keys: Vec<Vec<u8>> = topic_keys("bad-")
        .iter()
        .map(|k| k.replace("bad-", "bad\u{1}").into_bytes())
        .map(|k| {
            k.into_iter()
                .map(|b| if b == 1 { 0xff } else { b })
                .collect()
        })
        .collect();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(punctual::script_source("enqueue").unwrap())
        .arg(9)
        .arg(keys)
        .arg(&["65536", "0", "1", "", "p", "d0", "", ""]);
    let err = cmd.query_async::<redis::Value>(&mut c).await.unwrap_err();
    assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
    assert_eq!(f.snapshot().await, snap);
    // Other scripts can still reach an existing topic with accents.
    f.queue.enqueue("café", Job::new("x")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_attempts_are_bounded_in_the_library_and_the_script() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "max-attempts");
    q.enqueue(t, Job::new("seed").id("seed")).await.unwrap();
    let snap = f.snapshot().await;
    for m in [10_001, 1_410_065_407, u32::MAX] {
        let err = q
            .enqueue(t, Job::new("x").max_attempts(m))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains("10000"), "{err}");
        let err = q.set_topic_defaults(t, Some(m), None).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(f.snapshot().await, snap);
    }
    let mut c = f.conn.clone();
    for m in ["10001", "9999999999", "4294967296"] {
        let err = eval(
            "enqueue",
            &topic_keys(t),
            &["65536", "0", "1", "", "p", "d0", m, ""],
        )
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err(&format!("max attempts {m} was accepted"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
        assert_eq!(f.snapshot().await, snap);
    }
    q.enqueue(t, Job::new("x").id("x").max_attempts(10_000))
        .await
        .unwrap();
    q.cancel(t, "seed").await.unwrap();
    let d = claim_one(q, t).await;
    assert_eq!(d.max_attempts, 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_enqueue_does_not_register_the_topic() {
    let f = Fixture::new().await;
    let snap = f.snapshot().await;
    // Valid as far as the library can tell; Redis's clock refuses it.
    let at = SystemTime::now() + Duration::from_secs(11 * 365 * 24 * 3600);
    let err = f
        .queue
        .enqueue("fresh", Job::new("x").at(at))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(
        f.snapshot().await,
        snap,
        "a refused enqueue wrote something"
    );
    assert!(f.queue.topics().await.unwrap().is_empty());
    // A good one registers it.
    f.queue.enqueue("fresh", Job::new("x")).await.unwrap();
    assert_eq!(f.queue.topics().await.unwrap(), vec!["fresh".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_name_in_the_topic_set_is_skipped_and_reported() {
    let f = Fixture::new().await;
    f.queue.enqueue("good", Job::new("x")).await.unwrap();
    let set = format!("{PREFIX}:topics");
    let mut c = f.conn.clone();
    let _: i64 = redis::cmd("SADD")
        .arg(&set)
        .arg(&b"bad\xff"[..])
        .arg("a{b}")
        .arg("or\u{202e}ders")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(f.queue.topics().await.unwrap(), vec!["good".to_string()]);
    let listed = f.queue.list_topics().await.unwrap();
    assert_eq!(listed.valid, vec!["good".to_string()]);
    let mut skipped: Vec<String> = listed.skipped.iter().map(|s| s.name.clone()).collect();
    skipped.sort();
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    assert!(skipped.contains(&"a{b}".to_string()));
    assert!(skipped.iter().all(|s| !s.is_empty()));
    assert!(listed.skipped.iter().all(|s| !s.reason.is_empty()));
}

// ---- partitioned topics ---------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oldest_dead_jobs_of_a_partitioned_topic_are_the_oldest_across_partitions() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "parts");
    q.set_partitions(t, 3).await.unwrap();
    // Ids in partition 1 or 2 die first, then ids in partition 0.
    let pick = |p: u32, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("{p}-{i}"))
            .filter(|id| punctual::partition_of(id, 3) == p)
            .take(n)
            .collect()
    };
    let early: Vec<String> = [pick(1, 2), pick(2, 2)].concat();
    let late: Vec<String> = pick(0, 3);
    for id in early.iter().chain(&late) {
        q.enqueue(t, Job::new("x").id(id.as_str())).await.unwrap();
        let physical = punctual::partition_name(t, punctual::partition_of(id, 3), 3);
        let d = claim_one(q, &physical).await;
        assert_eq!(&d.id, id);
        assert_eq!(
            raw::fail(
                q,
                &part(&physical),
                &Lease::new(id.clone(), d.token),
                "e",
                FailKind::Permanent
            )
            .await
            .unwrap(),
            Failed::Dead
        );
        let died = q.get(t, id).await.unwrap().unwrap().state_since_ms.unwrap();
        f.wait_past(died).await;
    }
    // Purge the 3 oldest: the first three to die.
    assert_eq!(q.dead_purge(t, DeadSelector::Oldest(3)).await.unwrap(), 3);
    for id in &early[..3] {
        assert!(q.get(t, id).await.unwrap().is_none(), "{id} was not purged");
    }
    for id in early[3..].iter().chain(&late) {
        assert!(q.get(t, id).await.unwrap().is_some(), "{id} was purged");
    }
    // Replay the 2 oldest left: early[3] and late[0].
    let mut replayed = q.dead_replay(t, DeadSelector::Oldest(2)).await.unwrap();
    replayed.sort();
    let mut want = vec![early[3].clone(), late[0].clone()];
    want.sort();
    assert_eq!(replayed, want);
    assert!(q.check(t).await.unwrap().is_empty());
}

// ---- never early, to the microsecond ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_job_never_starts_before_enqueue_time_plus_delay_to_the_microsecond() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "sub-ms");
    let mut c = f.conn.clone();
    for i in 0..40 {
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
        let before_us = s * 1_000_000 + us;
        q.enqueue(
            t,
            Job::new("x")
                .id(format!("j{i}"))
                .delay(Duration::from_millis(1)),
        )
        .await
        .unwrap();
        let d = loop {
            raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
            let mut got = raw::claim(q, &part(t), 1, LONG_LEASE).await.unwrap();
            if let Some(d) = got.pop() {
                break d;
            }
        };
        assert!(
            d.claimed_us >= before_us + 1000,
            "job {i} started {} us early (enqueued after {before_us} us, claimed at {} us)",
            before_us + 1000 - d.claimed_us,
            d.claimed_us
        );
        assert_eq!(
            raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
            vec![true]
        );
    }
}

// ---- ids in a state set without a record ----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_never_gives_a_second_state_to_an_id_left_in_a_set_without_its_record() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "stray");
    for set in ["pool", "ready", "running", "dead"] {
        let id = format!("in-{set}");
        assert_eq!(f.cli(&["ZADD", &key(t, set), "1", &id]).trim(), "1");
        let snap = f.snapshot().await;
        let r = q
            .enqueue(
                t,
                Job::new("x").id(id.as_str()).delay(Duration::from_secs(60)),
            )
            .await
            .unwrap();
        // An id in dead is reported as such (nothing changed either way).
        let want = if set == "dead" {
            EnqueueStatus::Dead
        } else {
            EnqueueStatus::Duplicate
        };
        assert_eq!(r.status, want, "{set}");
        assert!(r.is_duplicate(), "{set}");
        // Nothing but the duplicates counter moved.
        let no_stats = |m: std::collections::BTreeMap<String, Vec<u8>>| {
            m.into_iter()
                .filter(|(k, _)| !k.ends_with(":stats"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            no_stats(f.snapshot().await),
            no_stats(snap),
            "{set}: written"
        );
        // Replace repairs it: one state, with a record.
        let r = q
            .enqueue_with(
                t,
                vec![Job::new("y").id(id.as_str()).delay(Duration::from_secs(60))],
                &EnqueueOptions::default().replace(true),
            )
            .await
            .unwrap();
        assert_eq!(r[0].status, EnqueueStatus::Replaced, "{set}");
        assert_eq!(q.get(t, &id).await.unwrap().unwrap().state, State::Pool);
    }
    assert!(q.check(t).await.unwrap().is_empty());
}

/// The enqueue script looks given ids up in the four sets first and only
/// then reads the records of those in none: a record left without a set,
/// and an id in dead and in another set (with its record or without), keep
/// the statuses they had when each id's record was looked up first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_counts_a_record_without_a_set_and_an_id_in_two_sets_as_live() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "two-states");
    let job = |id: &str| Job::new("new").id(id).delay(Duration::from_secs(60));
    let record = ":zzzzzzz:0::0:old";
    // A record without a set; an id in dead and pool, with its record and
    // without.
    f.cli(&["HSET", &key(t, "jobs"), "rec-only", record]);
    for id in ["both-rec", "both-bare"] {
        f.cli(&["ZADD", &key(t, "dead"), "1", id]);
        f.cli(&["ZADD", &key(t, "pool"), "1", id]);
    }
    f.cli(&["HSET", &key(t, "jobs"), "both-rec", record]);
    let snap = f.snapshot().await;
    let out = q
        .enqueue_batch(
            t,
            vec![
                job("rec-only"),
                job("both-rec"),
                job("both-bare"),
                job("fresh"),
            ],
        )
        .await
        .unwrap();
    let statuses: Vec<_> = out.iter().map(|e| (e.id.as_str(), e.status)).collect();
    assert_eq!(
        statuses,
        vec![
            ("rec-only", EnqueueStatus::Duplicate),
            // A record and in dead: dead, as with the record read first.
            ("both-rec", EnqueueStatus::Dead),
            // No record: the set state_of would name first (pool).
            ("both-bare", EnqueueStatus::Duplicate),
            ("fresh", EnqueueStatus::Created),
        ]
    );
    // Only the fresh job, the counters and the set of topics were written.
    let others = |m: std::collections::BTreeMap<String, Vec<u8>>| {
        m.into_iter()
            .filter(|(k, _)| {
                ![":stats", ":jobs", ":pool", ":topics"]
                    .iter()
                    .any(|s| k.ends_with(s))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(others(f.snapshot().await), others(snap));
    assert_eq!(f.cli(&["HGET", &key(t, "jobs"), "rec-only"]).trim(), record);
    // Replace writes each anew, in pool (the state it was in first for the
    // two-set ids; their dead entry stays, as before, for check to report).
    let out = q
        .enqueue_with(
            t,
            vec![job("rec-only"), job("both-rec"), job("both-bare")],
            &EnqueueOptions::default().replace(true),
        )
        .await
        .unwrap();
    for e in &out {
        assert_eq!(e.status, EnqueueStatus::Replaced, "{}", e.id);
        let got = q.get(t, &e.id).await.unwrap().unwrap();
        assert_eq!(got.state, State::Pool, "{}", e.id);
        assert_eq!(&got.payload[..], b"new", "{}", e.id);
    }
    for id in ["both-rec", "both-bare"] {
        f.cli(&["ZREM", &key(t, "dead"), id]);
    }
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_a_running_job_without_an_attempts_entry() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "no-attempts");
    q.enqueue(t, Job::new("x").id("x")).await.unwrap();
    claim_one(q, t).await;
    assert!(q.check(t).await.unwrap().is_empty());
    assert_eq!(f.cli(&["HDEL", &key(t, "attempts"), "x"]).trim(), "1");
    let found = q.check(t).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].id, "x");
    assert_eq!(found[0].problem, "running without an attempts entry");
}

// ---- changing the partition count under a producer -------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_with_a_stale_partition_count_cannot_strand_a_job() {
    let f = Fixture::new().await;
    let t = "re-part";
    // Another process that read the count (1) just before the change, and
    // caches it for a second.
    let stale = crate::util::queue(&f.server).await;
    assert_eq!(stale.partitions(t).await.unwrap(), 1);
    f.queue.set_partitions(t, 3).await.unwrap();
    let r = stale.enqueue(t, Job::new("x").id("late")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    // Not in the old layout, where no worker of the 3 partitions looks ...
    for set in ["pool", "ready"] {
        assert_eq!(f.card(t, set).await, 0, "a job was left in {t}'s {set}");
    }
    // ... but in its partition.
    let info = f.queue.get(t, "late").await.unwrap();
    assert_eq!(info.map(|i| i.state), Some(State::Ready));
    assert!(f.queue.check(t).await.unwrap().is_empty());

    // The script refuses a call routed with a stale count, writing nothing.
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    let p0 = punctual::partition_name(t, 0, 3);
    let err = eval(
        "enqueue",
        &topic_keys(&p0),
        &["65536", "0", "1", "", "p", "d0", "", "", "2"],
    )
    .query_async::<redis::Value>(&mut c)
    .await
    .unwrap_err();
    assert_eq!(err.code(), Some("PUNCTUAL_STALE"), "{err}");
    assert_eq!(f.snapshot().await, snap);
    // Without the count (older producers) the call is not checked.
    let id0 = (0..)
        .map(|i| format!("raw{i}"))
        .find(|id| punctual::partition_of(id, 3) == 0)
        .unwrap();
    let ok: Vec<redis::Value> = eval(
        "enqueue",
        &topic_keys(&p0),
        &["65536", "0", "1", &id0, "p", "d0", "", ""],
    )
    .query_async(&mut c)
    .await
    .unwrap();
    assert_eq!(ok.len(), 2);

    // A change refused because a partition holds jobs leaves every mark as
    // it was: producers routing with 3 still get in.
    let err = f.queue.set_partitions(t, 2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let fresh = crate::util::queue(&f.server).await;
    let many: Vec<Job> = (0..30).map(|i| Job::new("y").id(format!("m{i}"))).collect();
    let r = fresh.enqueue_batch(t, many).await.unwrap();
    assert!(r.iter().all(|e| e.status == EnqueueStatus::Created));
    assert!(f.queue.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_change_that_fails_midway_leaves_the_topic_open_to_producers() {
    let f = Fixture::new().await;
    let t = "half-split";
    let mut c = f.conn.clone();
    let p2 = punctual::partition_name(t, 2, 3);
    // Redis refuses to mark a new partition: its meta is not a hash (a
    // stand-in for any error after the old layout was checked and marked).
    let _: () = redis::cmd("SET")
        .arg(key(&p2, "meta"))
        .arg("not a hash")
        .query_async(&mut c)
        .await
        .unwrap();
    let err = f.queue.set_partitions(t, 3).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    // Producers still get in, with the old count or a fresh read of it.
    let fresh = crate::util::queue(&f.server).await;
    assert_eq!(fresh.partitions(t).await.unwrap(), 1);
    let r = fresh.enqueue(t, Job::new("x").id("a")).await;
    assert_eq!(r.expect("an enqueue").status, EnqueueStatus::Created);
    f.queue.enqueue(t, Job::new("x").id("b")).await.unwrap();
    assert!(f.queue.check(t).await.unwrap().is_empty());

    // A change that stopped after storing the new count in P:partitions
    // (a crash before the new partitions were marked: here they still hold
    // the marks of an earlier change back to 1) is finished by running it
    // again: enqueues are refused until then.
    let u = "half-split-2";
    for i in 0..3 {
        let _: () = redis::cmd("HSET")
            .arg(key(&punctual::partition_name(u, i, 3), "meta"))
            .arg("partitions")
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg(format!("{PREFIX}:partitions"))
        .arg(u)
        .arg(3)
        .query_async(&mut c)
        .await
        .unwrap();
    let stuck = crate::util::queue(&f.server).await;
    assert!(stuck.enqueue(u, Job::new("x").id("c")).await.is_err());
    f.queue.set_partitions(u, 3).await.unwrap();
    let r = crate::util::queue(&f.server)
        .await
        .enqueue_batch(
            u,
            (0..12).map(|i| Job::new("y").id(format!("m{i}"))).collect(),
        )
        .await
        .unwrap();
    assert!(r.iter().all(|e| e.status == EnqueueStatus::Created));
    assert!(f.queue.check(u).await.unwrap().is_empty());
}

/// Writes a job whose id is not UTF-8 (as stored before enqueue refused
/// such ids) into ready with score 0, its record a copy of `like`'s.
async fn plant_id_not_utf8(f: &Fixture, t: &str, like: &str) -> &'static [u8] {
    let bad: &[u8] = b"old\xff";
    let rec: String = f
        .cmd(redis::cmd("HGET").arg(key(t, "jobs")).arg(like))
        .await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key(t, "jobs"))
        .arg(bad)
        .arg(&rec)
        .ignore()
        .cmd("ZADD")
        .arg(key(t, "ready"))
        .arg(0)
        .arg(bad)
        .ignore()
        .query_async(&mut f.conn.clone())
        .await
        .unwrap();
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_id_that_is_not_utf8_goes_to_dead_at_its_first_claim() {
    // Written before the scripts refused such ids: claim cannot hand it out
    // (Delivery::id is text, so its ack would name another id).
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "old-bytes");
    q.enqueue(t, Job::new("fine").id("fine")).await.unwrap();
    let mut c = f.conn.clone();
    let bad = plant_id_not_utf8(&f, t, "fine").await;
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, vec!["fine"], "a non-UTF-8 id was handed out");
    let dead: Option<f64> = redis::cmd("ZSCORE")
        .arg(key(t, "dead"))
        .arg(bad)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(dead.is_some(), "the job is not in dead");
    let listed = q.dead_list(t, 0, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("UTF-8"),
        "{listed:?}"
    );
    assert_eq!(q.dead_purge(t, DeadSelector::Oldest(1)).await.unwrap(), 1);
    assert!(q.check(t).await.unwrap().is_empty());
}

/// claim replies with an attempt only for the jobs not on their first one,
/// and the claim's token; ack with the count acked and the refused positions.
/// The client must give each delivery its own attempt (also when a job
/// before it was not handed out: an id that is not UTF-8), the claim's
/// token, and each lease its own flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_delivery_and_each_ack_flag_is_its_own_in_the_compact_replies() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "compact");
    let ids = ["a", "b", "c", "d"];
    q.enqueue_batch(t, ids.iter().map(|id| Job::new("p").id(*id)).collect())
        .await
        .unwrap();
    let mut c = f.conn.clone();
    // The id that is not UTF-8 comes first (score 0) and ran before, as did
    // b and d (entries unmarked, as a retry leaves them).
    let bad = plant_id_not_utf8(&f, t, "a").await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key(t, "attempts"))
        .arg(bad)
        .arg("4:1")
        .arg("b")
        .arg("2:5")
        .arg("d")
        .arg("6:9")
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let seen: Vec<(&str, u32)> = got.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    assert_eq!(seen, [("a", 1), ("b", 3), ("c", 1), ("d", 7)]);
    for d in &got {
        let entry: String = redis::cmd("HGET")
            .arg(key(t, "attempts"))
            .arg(&d.id)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(entry, format!("0{}:{}", d.attempt, d.token), "job {}", d.id);
    }
    // a, b with a token not its own, c, a again, d.
    let by = |id: &str| got.iter().find(|d| d.id == id).unwrap().lease();
    let wrong = Lease::new("b", got[1].token + 1000);
    let flags = raw::ack(q, &part(t), &[by("a"), wrong, by("c"), by("a"), by("d")])
        .await
        .unwrap();
    assert_eq!(flags, [true, false, true, false, true]);
    let b = q.get(t, "b").await.unwrap().expect("b is still there");
    assert_eq!((b.state, b.attempts), (State::Running, 3));
    for id in ["a", "c", "d"] {
        assert!(q.get(t, id).await.unwrap().is_none(), "{id} was not acked");
    }
    assert_eq!(raw::ack(q, &part(t), &[by("b")]).await.unwrap(), [true]);
}

/// The jobs of one claim share its token, so an ack of many jobs goes in
/// the grouped form (a token per group, one argument per job). Each flag is
/// still the job's own: a stale lease (the job re-delivered under another
/// token), a cancelled job and an id given twice are refused in their
/// places, though the ids went to the script sorted by token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_ack_refuses_each_stale_cancelled_or_repeated_job_in_its_place() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "grouped");
    let ids: Vec<String> = (0..10).map(|i| format!("j{i}")).collect();
    q.enqueue_batch(t, ids.iter().map(|id| Job::new("p").id(id)).collect())
        .await
        .unwrap();
    let first = raw::claim(q, &part(t), 5, LONG_LEASE).await.unwrap();
    let second = raw::claim(q, &part(t), 5, LONG_LEASE).await.unwrap();
    assert_eq!((first.len(), second.len()), (5, 5));
    for claim in [&first, &second] {
        assert!(
            claim.iter().all(|d| d.token == claim[0].token),
            "the jobs of one claim share its token: {claim:?}"
        );
    }
    assert!(second[0].token > first[0].token);
    // first[3] re-delivered under a later token; second[0] cancelled.
    f.cli(&[
        "HSET",
        &key(t, "attempts"),
        &first[3].id,
        &format!("02:{}", second[0].token + 1),
    ]);
    assert_eq!(
        q.cancel(t, &second[0].id).await.unwrap(),
        Some(State::Running)
    );
    // The two claims interleaved (second's first), then first[1] again.
    let mut leases: Vec<Lease> = second
        .iter()
        .zip(&first)
        .flat_map(|(s, f)| [s.lease(), f.lease()])
        .collect();
    leases.push(first[1].lease());
    let mut slow = f.conn.clone();
    f.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    take_slowlog(&mut slow).await;
    let flags = raw::ack(q, &part(t), &leases).await.unwrap();
    let refused: Vec<usize> = (0..flags.len()).filter(|&i| !flags[i]).collect();
    assert_eq!(refused, [0, 7, 10], "{leases:?}");
    // It went in the grouped form: EVALSHA, the SHA, 9, the nine keys, then
    // "" and two groups.
    let ack = redis::Script::new(&punctual::script_source("ack").unwrap());
    let log = take_slowlog(&mut slow).await;
    let calls: Vec<&[String]> = log
        .iter()
        .map(|(_, args)| args.as_slice())
        .filter(|args| args.get(1).map(String::as_str) == Some(ack.get_hash()))
        .collect();
    // (Twice when the first met NOSCRIPT: the script is loaded and the
    // call sent again.)
    assert!(!calls.is_empty(), "{log:?}");
    for call in calls {
        assert_eq!(call[12..14], ["", "2"], "{call:?}");
    }
    let left = q
        .get(t, &first[3].id)
        .await
        .unwrap()
        .expect("the re-delivered job stays");
    assert_eq!(left.state, State::Running);
    for d in first.iter().chain(&second).filter(|d| d.id != first[3].id) {
        assert!(q.get(t, &d.id).await.unwrap().is_none(), "{} is left", d.id);
    }
    assert!(q.check(t).await.unwrap().is_empty());
}

/// A grouped ack whose entries all match takes the fast path; an id given
/// twice there is still acked once (its later place refused), and the
/// leases of a claim whose jobs were reclaimed and claimed again are all
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_ack_refuses_a_repeat_on_the_fast_path_and_a_reclaimed_claim() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "grouped-fast");
    let jobs = (0..12)
        .map(|i| Job::new("p").id(format!("k{i:02}")))
        .collect();
    q.enqueue_batch(t, jobs).await.unwrap();
    let a = raw::claim(q, &part(t), 6, LONG_LEASE).await.unwrap();
    let mut leases: Vec<Lease> = a.iter().map(|d| d.lease()).collect();
    leases.push(a[2].lease());
    let flags = raw::ack(q, &part(t), &leases).await.unwrap();
    assert_eq!(flags, [true, true, true, true, true, true, false]);
    // The other six: a lease of 1 ms, reclaimed by a tick (back to ready,
    // backoff 0), then claimed again under a new token.
    let b = raw::claim(q, &part(t), 6, Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(b.len(), 6);
    tokio::time::sleep(Duration::from_millis(20)).await;
    raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let c = raw::claim(q, &part(t), 6, LONG_LEASE).await.unwrap();
    assert_eq!(c.len(), 6);
    assert!(c[0].token > b[0].token);
    let stale: Vec<Lease> = b.iter().map(|d| d.lease()).collect();
    assert_eq!(raw::ack(q, &part(t), &stale).await.unwrap(), [false; 6]);
    for d in &c {
        let job = q.get(t, &d.id).await.unwrap().expect("still there");
        assert_eq!((job.state, job.attempts), (State::Running, 2), "{}", d.id);
    }
    let fresh: Vec<Lease> = c.iter().map(|d| d.lease()).collect();
    assert_eq!(raw::ack(q, &part(t), &fresh).await.unwrap(), [true; 6]);
    // A lease with an empty id is refused without being sent (a first ""
    // would read as the grouped form).
    assert_eq!(
        raw::ack(q, &part(t), &[Lease::new("", 5), Lease::new("k00", 5)])
            .await
            .unwrap(),
        [false, false]
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

/// One claim leases an id once (its jobs share one token): an id found in
/// both ready and the pool, due (which should not happen), is handed out
/// once and leaves both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_in_both_ready_and_the_pool_is_claimed_once() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "twice");
    q.enqueue(t, Job::new("p").id("a")).await.unwrap();
    assert_eq!(f.card(t, "ready").await, 1);
    f.cli(&["ZADD", &key(t, "pool"), "1", "a"]);
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["a"]);
    assert_eq!((f.card(t, "pool").await, f.card(t, "ready").await), (0, 0));
    assert!(q.check(t).await.unwrap().is_empty());
    assert_eq!(
        raw::ack(q, &part(t), &[got[0].lease()]).await.unwrap(),
        [true]
    );
}

/// The grouped form's own arguments are checked before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_grouped_ack_is_refused_and_changes_nothing() {
    let f = Fixture::new().await;
    let t = "grouped-bad";
    let token = seed(&f, t).await.to_string();
    let keys = topic_keys(t);
    let mut c = f.conn.clone();
    let tok = token.as_str();
    for argv in [
        vec!["", "0", tok, "1", "run"],
        vec!["", "x", tok, "1", "run"],
        vec!["", "1", tok, "0", "run"],
        vec!["", "1", tok, "2", "run"],
        vec!["", "1", tok, "1", "run", "run"],
        vec!["", "2", tok, "1", "run"],
        vec!["", "1", tok, "1001", "run"],
        vec!["", "1", "abc", "1", "run"],
        vec!["", "1", tok, "x", "run"],
        vec!["", "1001", tok, "1", "run"],
        vec![""],
    ] {
        let err = eval("ack", &keys, &argv)
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err(&format!("{argv:?}"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{argv:?}: {err}");
        let run = f.queue.get(t, "run").await.unwrap().unwrap();
        assert_eq!(run.state, State::Running, "{argv:?}");
    }
    // 600 + 600 ids: over 1,000 in all.
    let many: Vec<String> = (0..1200).map(|i| format!("m{i}")).collect();
    let mut argv = vec!["", "2", tok, "600", tok, "600"];
    argv.extend(many.iter().map(String::as_str));
    let err = eval("ack", &keys, &argv)
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("1,200 ids");
    assert!(err.to_string().contains("1000 ids at most"), "{err}");
    // An entry without the live mark is no proof, even when it is the one
    // stored (as a job that left running keeps it): an error, as in pairs.
    let unmarked = format!("1:{token}");
    f.cli(&["HSET", &key(t, "attempts"), "run", &unmarked]);
    let err = eval("ack", &keys, &["", "1", &unmarked, "1", "run"])
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("an unmarked entry");
    assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
    f.cli(&["HSET", &key(t, "attempts"), "run", &format!("01:{token}")]);
    // Well formed: a refusal by position, then the ack.
    let stale = (token.parse::<i64>().unwrap() - 1).to_string();
    let reply: Vec<i64> = eval("ack", &keys, &["", "1", &stale, "1", "run"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(reply, [0, 1]);
    let reply: Vec<i64> = eval("ack", &keys, &["", "1", tok, "1", "run"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(reply, [1]);
    assert!(f.queue.get(t, "run").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oldest_dead_of_a_partitioned_topic_purges_an_id_that_is_not_utf8() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "old-bytes-parts");
    q.set_partitions(t, 2).await.unwrap();
    let p0 = punctual::partition_name(t, 0, 2);
    let mut c = f.conn.clone();
    let bad: &[u8] = b"old\xfe";
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key(&p0, "jobs"))
        .arg(bad)
        .arg(":mx3pabym:0::0:x")
        .ignore()
        .cmd("ZADD")
        .arg(key(&p0, "dead"))
        .arg(1)
        .arg(bad)
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    let peek = q.peek(t, State::Dead, 10).await.unwrap();
    assert_eq!(peek.len(), 1);
    assert_eq!(q.dead_purge(t, DeadSelector::Oldest(5)).await.unwrap(), 1);
    assert_eq!(f.card(&p0, "dead").await, 0);
    assert_eq!(f.card(&p0, "jobs").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_follow_the_counter_when_it_is_ahead_of_the_clock() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "ahead");
    q.enqueue_batch(t, vec![Job::new("a").id("a"), Job::new("b").id("b")])
        .await
        .unwrap();
    // Far ahead of Redis's clock in µs (as after a burst, or a clock that
    // stepped back): the tokens must still go up from it.
    let ahead: i64 = 4_000_000_000_000_000;
    f.cli(&["SET", &key(t, "seq"), &ahead.to_string()]);
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    // One token for the claim, both its jobs leased under it.
    let tokens: Vec<i64> = got.iter().map(|d| d.token).collect();
    assert_eq!(tokens, vec![ahead + 1, ahead + 1]);
    let seq: i64 = f.cli(&["GET", &key(t, "seq")]).trim().parse().unwrap();
    assert_eq!(seq, ahead + 1);
    // Behind the clock: tokens start above the claim's time in µs.
    f.cli(&["SET", &key(t, "seq"), "7"]);
    let pairs: Vec<Lease> = got.iter().map(|d| d.lease()).collect();
    assert_eq!(
        raw::ack(q, &part(t), &pairs).await.unwrap(),
        vec![true, true]
    );
    q.enqueue(t, Job::new("c").id("c")).await.unwrap();
    let d = raw::claim(q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(d.token, d.claimed_us + 1);
}

// ---- the enqueue script refuses what validate_topic refuses ---------------

/// The enqueue script keeps its own list of the characters a topic may not
/// hold (Lua byte patterns for `keys.rs::is_invisible`, whitespace and
/// control characters). Every code point that `validate_topic` refuses is
/// sent to the script raw (EVALSHA, the topic in the hash tag of the keys,
/// as a client in another language would), which must refuse it too and
/// write nothing; every allowed code point next to a refused one, and a
/// sample of other non-ASCII ones, must be accepted. So the lists cannot
/// drift apart. (`{`, `}` and `#` are left out: they are the key structure
/// and the partition separator, checked elsewhere.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enqueue_script_refuses_every_character_validate_topic_refuses() {
    let f = Fixture::new().await;
    let mut c = f.conn.clone();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(punctual::script_source("enqueue").unwrap())
        .query_async(&mut c)
        .await
        .unwrap();
    let topic = |ch: char| format!("t{ch}t");
    let structural = |ch: char| matches!(ch, '{' | '}' | '#');
    let refused_in_rust = |ch: char| punctual::validate_topic(&topic(ch)).is_err();
    let refused: Vec<char> = (0..=0x10FFFFu32)
        .filter_map(char::from_u32)
        .filter(|&ch| !structural(ch) && refused_in_rust(ch))
        .collect();
    // The list is what it claims to be: controls, whitespace, invisibles.
    for ch in [
        '\0', '\t', '\u{85}', '\u{A0}', '\u{AD}', '\u{200B}', '\u{202E}', '\u{FEFF}',
    ] {
        assert!(refused.contains(&ch), "U+{:04X}", ch as u32);
    }
    assert!(refused.len() > 250, "only {} refused", refused.len());
    let enqueue = |ch: char| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha)
            .arg(9)
            .arg(topic_keys(&topic(ch)))
            .arg(&["65536", "0", "1", "", "p", "d0", "", ""]);
        cmd
    };

    let snap = f.snapshot().await;
    let mut gaps = Vec::new();
    for &ch in &refused {
        match enqueue(ch).query_async::<redis::Value>(&mut c).await {
            Err(e) if e.code() == Some("PUNCTUAL_INVALID") => {}
            other => gaps.push(format!("U+{:04X}: {other:?}", ch as u32)),
        }
    }
    assert!(
        gaps.is_empty(),
        "the enqueue script takes {} of the {} code points validate_topic refuses: {gaps:#?}",
        gaps.len(),
        refused.len()
    );
    assert_eq!(
        f.snapshot().await,
        snap,
        "a refused enqueue wrote something"
    );

    // Allowed: the neighbours of every refused code point, and a sample.
    let mut allowed: Vec<char> = refused
        .iter()
        .flat_map(|&ch| [(ch as u32).checked_sub(1), Some(ch as u32 + 1)])
        .filter_map(|u| u.and_then(char::from_u32))
        .filter(|&ch| !structural(ch) && !refused_in_rust(ch))
        .chain([
            'é',
            'ß',
            'Ж',
            'ع',
            '中',
            '日',
            '한',
            '😀',
            '🦀',
            '\u{10FFFD}',
        ])
        .collect();
    allowed.sort_unstable();
    allowed.dedup();
    let mut over = Vec::new();
    for &ch in &allowed {
        if let Err(e) = enqueue(ch).query_async::<redis::Value>(&mut c).await {
            over.push(format!("U+{:04X}: {e}", ch as u32));
        }
    }
    assert!(
        over.is_empty(),
        "the enqueue script refuses {} code points validate_topic allows: {over:#?}",
        over.len()
    );
}

// ---- claim's attempts entries --------------------------------------------

/// claim makes one attempts entry string per attempt (its jobs share its
/// token): every entry of a batch of 1,000 is exactly "0", the job's
/// attempt, ":" and the claim's token, with mixed attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_writes_each_attempts_entry_as_the_attempt_and_token_it_returns() {
    let f = Fixture::new().await;
    let t = "entries";
    let jobs: Vec<Job> = (0..1000)
        .map(|i| Job::new("p").id(format!("j{i}")))
        .collect();
    f.queue.enqueue_batch(t, jobs).await.unwrap();
    let keys = topic_keys(t);
    let mut c = f.conn.clone();
    // Jobs that ran before (entries unmarked, as a retry leaves them).
    for (id, old) in [("j0", "3:5"), ("j500", "41:7"), ("j999", "1:9")] {
        let _: i64 = f
            .cmd(redis::cmd("HSET").arg(&keys[8]).arg(id).arg(old))
            .await;
    }
    let reply: Vec<redis::Value> = eval("claim", &keys, &["1000", "60000"])
        .query_async(&mut c)
        .await
        .unwrap();
    // Header (time, max, wait, the claim's token, m), two entries per job,
    // the three retried jobs' (j, attempt), the pool's next due time.
    assert_eq!(reply.len(), 5 + 2 * 1000 + 2 * 3 + 1);
    let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).unwrap();
    let (token, m) = (int(&reply[3]), int(&reply[4]));
    assert_eq!(m, 1000);
    let retried: std::collections::HashMap<i64, i64> = reply[5 + 2000..5 + 2000 + 6]
        .chunks(2)
        .map(|p| (int(&p[0]), int(&p[1])))
        .collect();
    let entries: std::collections::HashMap<String, String> =
        f.cmd(redis::cmd("HGETALL").arg(&keys[8])).await;
    let mut attempts = std::collections::BTreeSet::new();
    for (j, job) in (1..).zip(reply[5..5 + 2 * 1000].chunks(2)) {
        let id: String = redis::from_redis_value(job[0].clone()).unwrap();
        let attempt = retried.get(&j).copied().unwrap_or(1);
        attempts.insert(attempt);
        assert_eq!(entries[&id], format!("0{attempt}:{token}"), "job {id}");
    }
    assert_eq!(attempts.into_iter().collect::<Vec<_>>(), [1, 2, 4, 42]);
}

// ---- ack compares tokens by value ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_compares_tokens_as_the_strings_claim_returned() {
    let f = Fixture::new().await;
    let t = "acktok";
    let token = seed(&f, t).await;
    let keys = topic_keys(t);
    let mut c = f.conn.clone();
    let tok = token.to_string();
    // The stored entry ends in ":<token>"; a token made of its last digits
    // only, one with another first digit, or one more, is refused, and the
    // job stays running.
    let other_first = format!(
        "{}{}",
        if tok.starts_with('2') { '3' } else { '2' },
        &tok[1..]
    );
    for wrong in [tok[1..].to_string(), other_first, (token + 1).to_string()] {
        let got: Vec<i64> = eval("ack", &keys, &["run", &wrong])
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(got, [0, 1], "token {wrong} (the lease's is {tok})");
    }
    assert!(f.queue.get(t, "run").await.unwrap().is_some());
    // Tokens are compared as the strings claim returned: the same value
    // with a leading zero is not a token at all (an error, nothing
    // changed); the token itself acks.
    let zero = format!("0{tok}");
    let err = eval("ack", &keys, &["run", &zero])
        .query_async::<Vec<i64>>(&mut c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("decimal integers"), "{err}");
    assert!(f.queue.get(t, "run").await.unwrap().is_some());
    // The attempts entry form ("0A:T") must carry the live mark and read:
    // the stored entry without its mark, or with no attempt, is an error.
    for bad in [format!("1:{tok}"), format!("0:{tok}"), format!("01:{tok}x")] {
        let err = eval("ack", &keys, &["run", &bad])
            .query_async::<Vec<i64>>(&mut c)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("decimal integers"), "{bad}: {err}");
    }
    assert!(f.queue.get(t, "run").await.unwrap().is_some());
    // An unmarked entry given back as it is stored proves nothing: the job
    // is not running (here in ready), so it is an error, not an ack.
    let att = keys[8].clone();
    let _: i64 = redis::cmd("HSET")
        .arg(&att)
        .arg("ready")
        .arg("1:999")
        .query_async(&mut c)
        .await
        .unwrap();
    let err = eval("ack", &keys, &["ready", "1:999"])
        .query_async::<Vec<i64>>(&mut c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("decimal integers"), "{err}");
    let _: i64 = redis::cmd("HDEL")
        .arg(&att)
        .arg("ready")
        .query_async(&mut c)
        .await
        .unwrap();
    let got: Vec<i64> = eval("ack", &keys, &["run", &tok])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(got, [1]);
    assert!(f.queue.get(t, "run").await.unwrap().is_none());
    // Twice the same pair in one call: acked once.
    q_twice(&f).await;
}

async fn q_twice(f: &Fixture) {
    let t = "acktwice";
    let keys = &topic_keys(t);
    f.queue.enqueue(t, Job::new("p").id("twice")).await.unwrap();
    let d = claim_one(&f.queue, t).await;
    assert_eq!(d.id, "twice");
    let tok = d.token.to_string();
    let mut c = f.conn.clone();
    let got: Vec<i64> = eval("ack", keys, &["twice", &tok, "twice", &tok])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        got,
        [1, 2],
        "one pair acked, the second pair of one id refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_replay_pairs_are_validated_whole_and_keep_the_id_idempotence() {
    let f = Fixture::new().await;
    let t = "paced";
    seed(&f, t).await;
    let keys = topic_keys(t);
    let snap = f.snapshot().await;
    let mut c = f.conn.clone();
    for argv in [
        vec!["due"],
        vec!["due", "dead"],
        vec!["due", "dead", "d1000", "ready"],
        vec!["due", "dead", "d315360000001"],
    ] {
        let err = eval("dead_replay", &keys, &argv)
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err(&format!("{argv:?} was accepted"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{argv:?}: {err}");
        assert_eq!(f.snapshot().await, snap, "{argv:?}: written");
    }
    // Only dead ids move: "ready" and "pool" are skipped and keep their
    // place; the dead job waits in pool for its due time.
    let out: Vec<String> = eval(
        "dead_replay",
        &keys,
        &["due", "ready", "d0", "dead", "d60000", "pool", "d5"],
    )
    .query_async(&mut c)
    .await
    .unwrap();
    assert_eq!(out, vec!["dead"]);
    let info = f.queue.get(t, "dead").await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    assert!(info.due_ms >= info.now_ms + 59_000, "{info:?}");
    // Sent again (a resent call): nothing more happens.
    let again: Vec<String> = eval("dead_replay", &keys, &["due", "dead", "d0"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(again.is_empty());
    assert_eq!(
        f.queue.get(t, "dead").await.unwrap().unwrap().state,
        State::Pool
    );
    assert!(f.queue.check(t).await.unwrap().is_empty());
}

// ---- enqueue's shared form --------------------------------------------------

/// A record without its due time (D, the second field), to compare the
/// records of calls that read different clocks.
fn without_due(r: Vec<u8>) -> Vec<u8> {
    let mut f: Vec<&[u8]> = r.splitn(3, |&b| b == b':').collect();
    f.remove(1);
    f.concat()
}

/// Jobs alike but for id and payload may be sent in the shared form
/// ("=n", when, max, backoff, then id, payload per job): the records are
/// those of the five-argument form, the reply is the ids when one was
/// generated (else none) and the statuses that are not 1, and bad counts
/// are refused with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_form_stores_what_the_five_argument_form_stores() {
    let f = Fixture::new().await;
    let (five, shared) = (topic_keys("five"), topic_keys("shared"));
    let mut c = f.conn.clone();
    let (when, max, backoff) = ("d3600000", "3;t5000", "100,200");
    let mut argv = vec!["65536", "0", "3"];
    for (id, p) in [("j1", "p1"), ("j2", "p2"), ("", "p3")] {
        argv.extend([id, p, when, max, backoff]);
    }
    let a: Vec<String> = eval("enqueue", &five, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        [&a[..4], &a[5..]].concat(),
        ["j1", "1", "j2", "1", "1"],
        "{a:?}"
    );
    let argv = [
        "65536", "0", "=3", when, max, backoff, "j1", "p1", "j2", "p2", "", "p3",
    ];
    let b: Vec<redis::Value> = eval("enqueue", &shared, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).unwrap();
    assert_eq!(b.len(), 4, "k and three ids (one was generated): {b:?}");
    assert_eq!(b[0], redis::Value::Int(3));
    assert_eq!((text(&b[1]), text(&b[2])), ("j1".into(), "j2".into()));
    let generated = text(&b[3]);
    assert_eq!(generated.len(), 12);
    // The same records but for the due time (D, the second field): each
    // call read its own clock.
    for (x, y) in [
        ("j1", "j1"),
        ("j2", "j2"),
        (a[4].as_str(), generated.as_str()),
    ] {
        let rx: Vec<u8> = f.cmd(redis::cmd("HGET").arg(&five[4]).arg(x)).await;
        let ry: Vec<u8> = f.cmd(redis::cmd("HGET").arg(&shared[4]).arg(y)).await;
        assert!(rx.ends_with(b"p1") || rx.ends_with(b"p2") || rx.ends_with(b"p3"));
        assert_eq!(without_due(rx), without_due(ry), "{x} / {y}");
    }
    assert_eq!(f.queue.check("shared").await.unwrap(), vec![]);
    // "~n": max and backoff shared, a when per job.
    let tilde = topic_keys("tilde");
    let argv = [
        "65536", "0", "~3", max, backoff, "j1", "p1", when, "j2", "p2", when, "", "p3", when,
    ];
    // Each job's own when: G (due minus created, base 36) is its delay
    // (or 1 ms more: the due time rounds the clock's µs up, created down).
    let whens = topic_keys("whens");
    let r: Vec<i64> = eval(
        "enqueue",
        &whens,
        &[
            "65536", "0", "~3", "", "", "w1", "p", "d60000", "w2", "p", "d7200000", "w3", "p", "d5",
        ],
    )
    .query_async(&mut c)
    .await
    .unwrap();
    assert_eq!(r, [0], "given ids, all created");
    for (id, delay) in [("w1", 60_000), ("w2", 7_200_000), ("w3", 5)] {
        let rec: String = f.cmd(redis::cmd("HGET").arg(&whens[4]).arg(id)).await;
        let g = rec.split(':').nth(2).unwrap();
        let g = i64::from_str_radix(g, 36).unwrap();
        assert!(g == delay || g == delay + 1, "{id}: {rec}");
    }
    let b: Vec<redis::Value> = eval("enqueue", &tilde, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((b.len(), &b[0]), (4, &redis::Value::Int(3)), "{b:?}");
    let generated = text(&b[3]);
    for (x, y) in [
        ("j1", "j1"),
        ("j2", "j2"),
        (a[4].as_str(), generated.as_str()),
    ] {
        let rx: Vec<u8> = f.cmd(redis::cmd("HGET").arg(&five[4]).arg(x)).await;
        let ry: Vec<u8> = f.cmd(redis::cmd("HGET").arg(&tilde[4]).arg(y)).await;
        assert_eq!(without_due(rx), without_due(ry), "~: {x} / {y}");
    }
    // Given ids only: no ids back; j1 is live (status 0, the first pair).
    let argv = ["65536", "0", "=2", when, "", "", "j1", "p", "j3", "p"];
    let r: Vec<i64> = eval("enqueue", &shared, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(r, [0, 1, 0]);
    assert!(f.queue.get("shared", "j3").await.unwrap().is_some());
    // Counts that do not match the arguments: refused, nothing written.
    let snap = f.snapshot().await;
    for bad in [
        vec!["65536", "0", "=2", when, "", "", "j4", "p"],
        vec!["65536", "0", "=0", when, "", ""],
        vec!["65536", "0", "=x", when, "", "", "j4", "p"],
        vec!["65536", "0", "=1", when, "", "", "j4", "p", "1", "extra"],
        vec!["65536", "0", "1", "j4", "p"],
        vec!["65536", "0", "~2", "", "", "j4", "p", when, "j5", "p"],
        vec!["65536", "0", "~1", "", "", "j4", "p"],
    ] {
        let err = eval("enqueue", &shared, &bad)
            .query_async::<redis::Value>(&mut c)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{bad:?}: {err}");
    }
    assert_eq!(f.snapshot().await, snap);
}

/// The shared form with every id generated (the Rust library's usual
/// batch) takes a loop of its own: each job gets its candidate id and the
/// record, set and reply the general loop gives (here: the same batch with
/// one given id among them), into ready, pool and the cold pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_generated_ids_stores_what_the_general_loop_stores() {
    let f = Fixture::new().await;
    let mut c = f.conn.clone();
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).unwrap();
    for (when, set) in [("d0", "ready"), ("d60000", "pool"), ("d3600000", "cold")] {
        let (gen, mixed) = (
            topic_keys(&format!("gen-{set}")),
            topic_keys(&format!("mix-{set}")),
        );
        // A topic opens its cold pool at its first tick (cold_after 10 min).
        for keys in [&gen, &mixed] {
            let _: redis::Value = eval("tick", keys, &["1000", "1000000", "1000"])
                .query_async(&mut c)
                .await
                .unwrap();
        }
        let (max, backoff) = ("4", "10,20");
        let argv = [
            "65536", "0", "=3", when, max, backoff, "", "p1", "", "p2", "", "p3",
        ];
        let a: Vec<redis::Value> = eval("enqueue", &gen, &argv)
            .query_async(&mut c)
            .await
            .unwrap();
        let argv = [
            "65536", "0", "=3", when, max, backoff, "", "p1", "given", "p2", "", "p3",
        ];
        let b: Vec<redis::Value> = eval("enqueue", &mixed, &argv)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!((a.len(), &a[0]), (4, &redis::Value::Int(3)), "{set}: {a:?}");
        assert_eq!(b.len(), 4, "{set}: {b:?}");
        let ids: Vec<String> = a[1..].iter().map(text).collect();
        assert_eq!(
            ids.iter().collect::<std::collections::HashSet<_>>().len(),
            3,
            "{ids:?}"
        );
        for (j, id) in ids.iter().enumerate() {
            assert_eq!(id.len(), 12, "{id}");
            let rx: Vec<u8> = f.cmd(redis::cmd("HGET").arg(&gen[4]).arg(id)).await;
            let ry: Vec<u8> = f
                .cmd(redis::cmd("HGET").arg(&mixed[4]).arg(text(&b[j + 1])))
                .await;
            assert!(rx.ends_with(format!("p{}", j + 1).as_bytes()), "{set} {id}");
            assert_eq!(without_due(rx), without_due(ry), "{set}: job {j}");
            if set == "cold" {
                assert_eq!(
                    f.queue
                        .get(&format!("gen-{set}"), id)
                        .await
                        .unwrap()
                        .unwrap()
                        .state,
                    State::Pool
                );
            } else {
                let key = if set == "ready" { &gen[1] } else { &gen[0] };
                let score: Option<f64> = f.cmd(redis::cmd("ZSCORE").arg(key).arg(id)).await;
                assert!(score.is_some(), "{set}: {id} not in {key}");
            }
        }
        for (keys, t) in [(&gen, "gen"), (&mixed, "mix")] {
            let sets: Vec<usize> = {
                let mut v = Vec::new();
                for k in [&keys[0], &keys[1]] {
                    v.push(f.cmd::<usize>(redis::cmd("ZCARD").arg(k)).await);
                }
                v
            };
            let want = match set {
                "ready" => vec![0, 3],
                "pool" => vec![3, 0],
                _ => vec![0, 0],
            };
            assert_eq!(sets, want, "{t}-{set}: pool, ready");
            let cold_n: Option<i64> = f.cmd(redis::cmd("HGET").arg(&keys[5]).arg("cold_n")).await;
            assert_eq!(
                cold_n.unwrap_or(0),
                if set == "cold" { 3 } else { 0 },
                "{t}-{set}"
            );
            assert_eq!(
                f.queue.check(&format!("{t}-{set}")).await.unwrap(),
                vec![],
                "{t}-{set}"
            );
        }
    }
}

/// The same for "~n" (a when per job): each job of one call goes where its
/// own due time says, ready, pool or the cold pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_generated_ids_with_whens_of_their_own_stores_what_the_general_loop_stores() {
    let f = Fixture::new().await;
    let mut c = f.conn.clone();
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).unwrap();
    let (gen, mixed) = (topic_keys("gen-tilde"), topic_keys("mix-tilde"));
    for keys in [&gen, &mixed] {
        let _: redis::Value = eval("tick", keys, &["1000", "1000000", "1000"])
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let whens = ["d0", "d60000", "d3600000", "d60000"];
    let mut argv = vec!["65536", "0", "~4", "4", "10,20"];
    for (j, w) in whens.iter().enumerate() {
        argv.extend(["", ["p0", "p1", "p2", "p3"][j], w]);
    }
    let a: Vec<redis::Value> = eval("enqueue", &gen, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    argv[8] = "given";
    let b: Vec<redis::Value> = eval("enqueue", &mixed, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((a.len(), &a[0]), (5, &redis::Value::Int(4)), "{a:?}");
    assert_eq!(b.len(), 5, "{b:?}");
    for j in 0..4 {
        let (x, y) = (text(&a[j + 1]), text(&b[j + 1]));
        let rx: Vec<u8> = f.cmd(redis::cmd("HGET").arg(&gen[4]).arg(&x)).await;
        let ry: Vec<u8> = f.cmd(redis::cmd("HGET").arg(&mixed[4]).arg(&y)).await;
        assert!(rx.ends_with(format!("p{j}").as_bytes()), "{x}");
        assert_eq!(without_due(rx), without_due(ry), "job {j}");
        for (keys, id) in [(&gen, &x), (&mixed, &y)] {
            let in_ready: Option<f64> = f.cmd(redis::cmd("ZSCORE").arg(&keys[1]).arg(id)).await;
            let in_pool: Option<f64> = f.cmd(redis::cmd("ZSCORE").arg(&keys[0]).arg(id)).await;
            let want = match j {
                0 => (true, false),
                2 => (false, false),
                _ => (false, true),
            };
            assert_eq!(
                (in_ready.is_some(), in_pool.is_some()),
                want,
                "job {j}: {id}"
            );
        }
    }
    for (keys, t) in [(&gen, "gen-tilde"), (&mixed, "mix-tilde")] {
        let cold_n: Option<i64> = f.cmd(redis::cmd("HGET").arg(&keys[5]).arg("cold_n")).await;
        assert_eq!(cold_n, Some(1), "{t}");
        assert_eq!(f.queue.check(t).await.unwrap(), vec![], "{t}");
    }
}

/// "=*n" and "~*n" (every id generated, none sent): when no candidate was
/// skipped, the reply is -1 and the first id, and the others follow it (the
/// last four base-36 digits counted up); with one skipped, the reply lists
/// them all, as "=n" does. Malformed counts are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forms_without_ids_reply_with_the_first_id_when_none_was_skipped() {
    let f = Fixture::new().await;
    let mut c = f.conn.clone();
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).unwrap();
    let t = "starred";
    let keys = topic_keys(t);
    let argv = ["65536", "0", "=*3", "d0", "", "", "p1", "p2", "p3"];
    let a: Vec<redis::Value> = eval("enqueue", &keys, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((a.len(), &a[0]), (2, &redis::Value::Int(-1)), "{a:?}");
    let first = text(&a[1]);
    let (stamp, last) = first.split_at(first.len() - 4);
    let n = i64::from_str_radix(last, 36).unwrap();
    for (j, payload) in ["p1", "p2", "p3"].iter().enumerate() {
        let id = format!("{stamp}{:0>4}", radix36((n + j as i64) % 1_679_616));
        let job = f.queue.get(t, &id).await.unwrap().expect(&id);
        assert_eq!(job.payload, payload.as_bytes(), "{id}");
        assert_eq!(job.state, State::Ready);
    }
    // "~*2": payload and when per job.
    let argv = ["65536", "0", "~*2", "", "", "q1", "d60000", "q2", "d0"];
    let b: Vec<redis::Value> = eval("enqueue", &keys, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((b.len(), &b[0]), (2, &redis::Value::Int(-1)), "{b:?}");
    let first = text(&b[1]);
    let job = f.queue.get(t, &first).await.unwrap().unwrap();
    assert_eq!(
        (job.payload.as_slice(), job.state),
        (&b"q1"[..], State::Pool)
    );
    let (stamp, last) = first.split_at(first.len() - 4);
    let next = i64::from_str_radix(last, 36).unwrap() + 1;
    let second = format!("{stamp}{:0>4}", radix36(next % 1_679_616));
    let job = f.queue.get(t, &second).await.unwrap().unwrap();
    assert_eq!(
        (job.payload.as_slice(), job.state),
        (&b"q2"[..], State::Ready)
    );
    // The next candidate taken: every id listed, the taken one skipped.
    let seq: i64 = f.cli(&["GET", &key(t, "seq")]).trim().parse().unwrap();
    let now = f.now_ms().await;
    let mut planted = redis::cmd("HSET");
    planted.arg(key(t, "jobs"));
    for ms in now..now + 3000 {
        let id = format!("{:0>8}{:0>4}", radix36(ms), radix36((seq + 1) % 1_679_616));
        planted.arg(id).arg(":mx3pabym:0::0:x");
    }
    let _: i64 = f.cmd(&planted).await;
    let argv = ["65536", "0", "=*2", "d0", "", "", "r1", "r2"];
    let d: Vec<redis::Value> = eval("enqueue", &keys, &argv)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        f.now_ms().await < now + 3000,
        "the call fell outside the window"
    );
    assert_eq!((d.len(), &d[0]), (3, &redis::Value::Int(2)), "{d:?}");
    for (v, payload) in d[1..].iter().zip(["r1", "r2"]) {
        let job = f.queue.get(t, &text(v)).await.unwrap().unwrap();
        assert_eq!(job.payload, payload.as_bytes());
    }
    for bad in [
        vec!["65536", "0", "=*3", "d0", "", "", "p1", "p2"],
        vec!["65536", "0", "=*0", "d0", "", ""],
        vec!["65536", "0", "~*2", "", "", "q1", "d0", "q2"],
        vec!["65536", "0", "=*x", "d0", "", "", "p1"],
    ] {
        let err = eval("enqueue", &keys, &bad)
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err(&format!("{bad:?}"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{bad:?}: {err}");
    }
}

/// Queue::enqueue_batch sends alike jobs in the shared form: each job's
/// status and id come back in its place (a live id, a new one, generated
/// ones), as with jobs that differ (the five-argument form).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_alike_jobs_reports_each_status_in_its_place() {
    let f = Fixture::new().await;
    let t = "alike";
    f.queue.enqueue(t, Job::new("x").id("live")).await.unwrap();
    // Alike ("=n"), a delay of its own ("~n"), max attempts of its own (the
    // five-argument form).
    for differ in [0, 1, 2] {
        let jobs: Vec<Job> = (0..4)
            .map(|i| {
                let j = match i {
                    0 => Job::new("a").id(format!("new{differ}")),
                    1 => Job::new("b").id("live"),
                    _ => Job::new("c"),
                };
                match (differ, i) {
                    (1, 3) => j.delay(Duration::from_secs(7)),
                    (2, 3) => j.delay(Duration::from_secs(60)).max_attempts(3),
                    _ => j.delay(Duration::from_secs(60)),
                }
            })
            .collect();
        let out = f.queue.enqueue_batch(t, jobs).await.unwrap();
        let got: Vec<(&str, EnqueueStatus)> =
            out.iter().map(|e| (e.id.as_str(), e.status)).collect();
        assert_eq!(
            got[0],
            (format!("new{differ}").as_str(), EnqueueStatus::Created)
        );
        assert_eq!(got[1], ("live", EnqueueStatus::Duplicate));
        for g in &got[2..] {
            assert_eq!(g.1, EnqueueStatus::Created);
            assert_eq!(g.0.len(), 12);
            assert!(f.queue.get(t, g.0).await.unwrap().is_some(), "{g:?}");
        }
        assert_ne!(got[2].0, got[3].0);
    }
    // Given ids only (the script sends no ids back).
    let jobs = vec![Job::new("d").id("live"), Job::new("e").id("fresh")];
    let out = f.queue.enqueue_batch(t, jobs).await.unwrap();
    let got: Vec<(&str, EnqueueStatus)> = out.iter().map(|e| (e.id.as_str(), e.status)).collect();
    assert_eq!(
        got,
        [
            ("live", EnqueueStatus::Duplicate),
            ("fresh", EnqueueStatus::Created)
        ]
    );
    assert_eq!(f.queue.check(t).await.unwrap(), vec![]);
}

/// The members of P:{T}:retried, sorted; meta retried_n must count them.
async fn retried(f: &Fixture, t: &str) -> Vec<String> {
    let mut m: Vec<String> = f.cmd(redis::cmd("SMEMBERS").arg(key(t, "retried"))).await;
    m.sort();
    let n: Option<i64> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried_n"))
        .await;
    assert_eq!(n.unwrap_or(0), m.len() as i64, "meta retried_n: {m:?}");
    m
}

/// A job sent back to wait with its attempts entry, by fail's retry or by a
/// reclaim, is in P:{T}:retried until a claim takes it: the claim counts its
/// attempts on from its entry, though a claim reads entries only for the
/// set's ids. A job that never failed is claimed on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_sent_back_to_wait_keeps_counting_its_attempts() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "retried");
    q.enqueue(t, Job::new("p").id("a")).await.unwrap();
    q.enqueue(t, Job::new("p").id("b")).await.unwrap();
    let first = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    assert_eq!(first.iter().map(|d| d.attempt).collect::<Vec<_>>(), [1, 1]);
    let meta: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried"))
        .await;
    assert_eq!(meta.as_deref(), Some("1"), "a new topic's set is trusted");
    let (a, b) = if first[0].id == "a" {
        (&first[0], &first[1])
    } else {
        (&first[1], &first[0])
    };
    // a: failed, retried at once; b: acked.
    let retry = FailKind::Retry {
        after: Some(Duration::ZERO),
    };
    assert!(matches!(
        raw::fail(q, &part(t), &a.lease(), "boom", retry)
            .await
            .unwrap(),
        Failed::Retry
    ));
    assert_eq!(retried(&f, t).await, ["a"]);
    assert_eq!(raw::ack(q, &part(t), &[b.lease()]).await.unwrap(), [true]);
    q.enqueue(t, Job::new("p").id("c")).await.unwrap();
    let second = raw::claim(q, &part(t), 2, Duration::from_millis(1))
        .await
        .unwrap();
    let mut got: Vec<(&str, u32)> = second.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    got.sort();
    assert_eq!(got, [("a", 2), ("c", 1)]);
    assert!(
        retried(&f, t).await.is_empty(),
        "the claim took a out of the set"
    );
    // Both leases expire: the reclaim sends both back, a after attempt 2
    // (to the pool: the default ladder's second step is 5 s), c after 1 (to
    // ready). a stays in the set when it is rescheduled to now.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let r = raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    assert_eq!(r.reclaimed, 2);
    assert_eq!(retried(&f, t).await, ["a", "c"]);
    assert!(q.check(t).await.unwrap().is_empty());
    assert_eq!(
        q.reschedule(t, "a", punctual::When::Now).await.unwrap(),
        Some(State::Pool)
    );
    assert_eq!(retried(&f, t).await, ["a", "c"]);
    let third = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    let mut got: Vec<(&str, u32)> = third.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    got.sort();
    assert_eq!(got, [("a", 3), ("c", 2)]);
    assert!(retried(&f, t).await.is_empty());
    let leases: Vec<Lease> = third.iter().map(|d| d.lease()).collect();
    assert_eq!(raw::ack(q, &part(t), &leases).await.unwrap(), [true, true]);
}

/// A topic whose attempts entries may predate P:{T}:retried (written by a
/// version without it: meta retried unset, the attempts hash not empty)
/// has every claimed id's entry read, and is trusted only once the attempts
/// hash is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_from_before_the_retried_set_reads_every_entry() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "before-retried");
    q.enqueue(t, Job::new("p").id("old")).await.unwrap();
    // As an earlier version left a job reclaimed twice: waiting, with an
    // unmarked entry, in no set.
    let _: i64 = f
        .cmd(
            redis::cmd("HSET")
                .arg(key(t, "attempts"))
                .arg("old")
                .arg("2:7"),
        )
        .await;
    let d = claim_one(q, t).await;
    assert_eq!((d.id.as_str(), d.attempt), ("old", 3));
    let meta: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried"))
        .await;
    assert_eq!(meta, None, "trusted while an entry was there");
    assert_eq!(raw::ack(q, &part(t), &[d.lease()]).await.unwrap(), [true]);
    // The attempts hash is empty now: the next claim trusts the set.
    q.enqueue(t, Job::new("p").id("new")).await.unwrap();
    let d = claim_one(q, t).await;
    assert_eq!(d.attempt, 1);
    let meta: Option<String> = f
        .cmd(redis::cmd("HGET").arg(key(t, "meta")).arg("retried"))
        .await;
    assert_eq!(meta.as_deref(), Some("1"));
}

/// A retried job that leaves without a claim (cancelled, replaced) leaves
/// P:{T}:retried too; and check reports a waiting job with an entry that the
/// set is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_that_is_cancelled_or_replaced_leaves_the_set() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "retried-gone");
    for id in ["x", "y", "z"] {
        q.enqueue(t, Job::new("p").id(id)).await.unwrap();
    }
    let got = raw::claim(q, &part(t), 3, LONG_LEASE).await.unwrap();
    let later = FailKind::Retry {
        after: Some(Duration::from_secs(3600)),
    };
    for d in &got {
        let out = raw::fail(q, &part(t), &d.lease(), "later", later)
            .await
            .unwrap();
        assert_eq!(out, Failed::Retry);
    }
    assert_eq!(retried(&f, t).await, ["x", "y", "z"]);
    assert!(q.check(t).await.unwrap().is_empty());
    q.cancel(t, "x").await.unwrap();
    let replaced = q
        .enqueue_with(
            t,
            vec![Job::new("again").id("y")],
            &EnqueueOptions::default().replace(true),
        )
        .await
        .unwrap();
    assert_eq!(replaced[0].status, EnqueueStatus::Replaced);
    assert_eq!(retried(&f, t).await, ["z"]);
    // Taken out of the set by hand: check finds z. And a member that is
    // not waiting (an id of no job, added by hand): check finds it too.
    let _: i64 = f
        .cmd(redis::cmd("SREM").arg(key(t, "retried")).arg("z"))
        .await;
    let _: i64 = f
        .cmd(redis::cmd("SADD").arg(key(t, "retried")).arg("ghost"))
        .await;
    assert_eq!(retried(&f, t).await, ["ghost"]);
    let found = q.check(t).await.unwrap();
    let found: Vec<(&str, &str)> = found
        .iter()
        .map(|v| (v.id.as_str(), v.problem.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("ghost", "in P:{T}:retried, not waiting"),
            ("z", "waiting with an attempts entry, not in P:{T}:retried")
        ]
    );
}

/// P:{T}:retried is not among the scripts' KEYS: on a Redis Cluster whose
/// slot is migrating, touching it where it is not fails the script. So a
/// script touches it only when meta retried_n says it has members, and
/// then before any other write. Here the key holds a string, so that any
/// touch fails (WRONGTYPE) as the migrating slot's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retried_set_is_touched_only_with_members_and_before_any_write() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "retried-touch");
    let set = key(t, "retried");
    let _: () = f.cmd(redis::cmd("SET").arg(&set).arg("not a set")).await;
    for id in ["a", "b", "c"] {
        q.enqueue(t, Job::new("p").id(id)).await.unwrap();
    }
    // No member: claim, ack, cancel and replace never touch it.
    let got = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    assert_eq!(got.len(), 2);
    q.cancel(t, "c").await.unwrap();
    let opts = EnqueueOptions::default().replace(true);
    q.enqueue_with(t, vec![Job::new("p").id("c")], &opts)
        .await
        .unwrap();
    assert_eq!(
        raw::ack(q, &part(t), &[got[0].lease()]).await.unwrap(),
        [true]
    );
    // A retry must add a member: it fails, and writes nothing.
    let snap = f.snapshot().await;
    let retry = FailKind::Retry {
        after: Some(Duration::ZERO),
    };
    let err = raw::fail(q, &part(t), &got[1].lease(), "boom", retry)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(f.snapshot().await, snap, "a failed fail wrote something");
    // With members (as meta counts them), a claim touches the set before
    // it writes anything; so do cancel and replace.
    let _: i64 = f
        .cmd(
            redis::cmd("HSET")
                .arg(key(t, "meta"))
                .arg("retried_n")
                .arg("1"),
        )
        .await;
    let snap = f.snapshot().await;
    let err = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let err = q.cancel(t, "c").await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let err = q
        .enqueue_with(t, vec![Job::new("q").id("c")], &opts)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(f.snapshot().await, snap, "a failed call wrote something");
}

/// claim and tick remove the ids they read by rank (ZREMRANGEBYRANK): a
/// claim of fewer jobs than are due takes ready's first ones, then the
/// pool's first due ones, and leaves exactly the others, in order; a tick
/// whose room under max ready is less than its batch promotes the pool's
/// first ones and leaves the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_or_a_promotion_of_some_due_jobs_leaves_exactly_the_others() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "by-rank");
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let members = |name: &'static str| {
        let k = key(t, name);
        let f = &f;
        async move {
            let m: Vec<String> = f.cmd(redis::cmd("ZRANGE").arg(k).arg(0).arg(-1)).await;
            m
        }
    };
    for id in ["r1", "r2", "r3", "r4"] {
        q.enqueue(t, Job::new("p").id(id)).await.unwrap();
    }
    for id in ["p1", "p2", "p3", "p4", "p5", "p6"] {
        let job = Job::new("p").id(id).delay(Duration::from_millis(1));
        q.enqueue(t, job).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let got = raw::claim(q, &part(t), 2, LONG_LEASE).await.unwrap();
    let got: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got, ["r1", "r2"]);
    assert_eq!(members("ready").await, ids(&["r3", "r4"]));
    let got = raw::claim(q, &part(t), 3, LONG_LEASE).await.unwrap();
    let got: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got, ["r3", "r4", "p1"]);
    assert!(members("ready").await.is_empty());
    assert_eq!(members("pool").await, ids(&["p2", "p3", "p4", "p5", "p6"]));
    // Room for 2 under a max ready of 2: p2 and p3 are promoted.
    let tick = raw::TickLimits {
        max_ready: 2,
        ..TICK_ALL
    };
    let r = raw::tick(q, &part(t), &tick).await.unwrap();
    assert_eq!(r.promoted, 2, "{r:?}");
    assert_eq!(members("ready").await, ids(&["p2", "p3"]));
    assert_eq!(members("pool").await, ids(&["p4", "p5", "p6"]));
    assert!(q.check(t).await.unwrap().is_empty());
}
