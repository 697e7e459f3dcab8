//! Every script checks its own arguments and KEYS: each assembled script
//! loads and refuses bad input itself (never a Lua error), every numeric
//! argument must be a finite integer, and KEYS must be the nine keys of one
//! topic.

use crate::steps::{eval, seed};
use crate::util::{topic_keys, Fixture};

/// Every script, assembled with only the includes it names, loads
/// under the SHA punctual computes and runs to its own answers: bad
/// arguments refused with PUNCTUAL_INVALID, keys of no topic refused by the
/// KEYS check. Never a Lua error (a helper left out is a nonexistent global).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_assembled_script_loads_and_answers_bad_input_itself() {
    let f = Fixture::new().await;
    let keys = topic_keys("assembled");
    let mut c = f.conn.clone();
    for name in punctual::internal::script_names() {
        let source = punctual::internal::script_source(name).unwrap();
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
