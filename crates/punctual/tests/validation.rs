//! Validation: bad input (ids, topic names, due times, attempts, backoff,
//! topic defaults) is refused by the library and by the enqueue script alike,
//! and writes nothing.

use std::time::{Duration, SystemTime};

use punctual::raw::{self};
use punctual::{EnqueueStatus, ErrorKind, Job, Queue, When, MAX_DELAY};

use crate::steps::{claim_one, claim_retrying, eval};
use crate::util::{part, topic_keys, Fixture, LONG_LEASE, PREFIX};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_and_writes_nothing() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "bad");
    q.enqueue(
        t,
        Job::new("seed").id("seed").delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let snap = f.snapshot().await;
    let cli = f.cli_keys();

    let good = |i: usize| Job::new(format!("good {i}")).id(format!("g{i}"));
    let batch_bad_last = |n: usize, bad: Job| {
        let mut v: Vec<Job> = (0..n).map(good).collect();
        v.push(bad);
        v
    };
    let cases: Vec<(&str, &str, Vec<Job>)> = vec![
        ("topic with braces", "a{b}", vec![Job::new("x")]),
        ("topic with a closing brace", "ab}", vec![Job::new("x")]),
        ("empty topic", "", vec![Job::new("x")]),
        ("topic with '#'", "orders#1", vec![Job::new("x")]),
        ("empty id", t, vec![Job::new("x").id("")]),
        (
            "id over 200 bytes",
            t,
            vec![Job::new("x").id("i".repeat(201))],
        ),
        (
            "payload over 64 KiB",
            t,
            vec![Job::new(vec![b'x'; 64 * 1024 + 1])],
        ),
        (
            "delay over ten years",
            t,
            vec![Job::new("x").when(When::Delay(MAX_DELAY + Duration::from_secs(1)))],
        ),
        ("max attempts 0", t, vec![Job::new("x").max_attempts(0)]),
        (
            "batch whose last job has a bad id",
            t,
            batch_bad_last(99, Job::new("x").id("i".repeat(201))),
        ),
        (
            "batch whose last job has a big payload",
            t,
            batch_bad_last(10, Job::new(vec![b'x'; 64 * 1024 + 1])),
        ),
        (
            "batch of more than 1000 whose last job is bad",
            t,
            batch_bad_last(1500, Job::new("x").max_attempts(0)),
        ),
    ];
    for (what, topic, jobs) in cases {
        let single = jobs.len() == 1;
        let err = if single {
            q.enqueue(topic, jobs.into_iter().next().unwrap())
                .await
                .unwrap_err()
        } else {
            q.enqueue_batch(topic, jobs).await.unwrap_err()
        };
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{what}: {err}");
        assert!(!err.is_retryable(), "{what}");
        assert!(!err.to_string().is_empty());
        assert_eq!(f.snapshot().await, snap, "{what}: something was written");
        assert_eq!(f.cli_keys(), cli, "{what}: keys changed");
    }

    // Reschedule with an absurd delay is refused too.
    let err = q
        .reschedule(t, "seed", When::Delay(MAX_DELAY + Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);

    // A custom payload limit.
    let small = Queue::builder(f.server.url())
        .max_payload(100)
        .connect()
        .await
        .unwrap();
    assert_eq!(small.max_payload(), 100);
    let err = small
        .enqueue(t, Job::new(vec![b'x'; 101]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(f.snapshot().await, snap, "over a custom limit: written");
    assert_eq!(f.cli_keys(), cli);

    // The limits themselves are allowed.
    let ok = vec![
        Job::new(vec![b'x'; 100]).id("at-custom-limit"),
        Job::new("x").id("i".repeat(200)),
        Job::new("x").when(When::Delay(MAX_DELAY)),
        Job::new("x").max_attempts(1),
    ];
    let r = small.enqueue_batch(t, ok).await.unwrap();
    assert!(
        r.iter().all(|e| e.status == EnqueueStatus::Created),
        "{r:?}"
    );
    let r = q
        .enqueue(t, Job::new(vec![b'x'; 64 * 1024]).id("at-default-limit"))
        .await
        .unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    assert!(q.check(t).await.unwrap().is_empty());
}

/// An EVAL of the enqueue script as a producer in another language sends
/// it; each job is five arguments: id, payload, when, max attempts, backoff.
fn raw_enqueue(topic: &str, jobs: &[[&str; 5]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(punctual::internal::script_source("enqueue").unwrap())
        .arg(9)
        .arg(topic_keys(topic));
    cmd.arg("65536").arg("0").arg(jobs.len());
    for j in jobs {
        cmd.arg(&j[..]);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_script_called_raw_rejects_bad_due_times_and_writes_nothing() {
    let f = Fixture::new().await;
    let t = "raw";
    let eval = |jobs: &[[&str; 5]]| raw_enqueue(t, jobs);
    let mut c = f.conn.clone();
    // Sanity: the call shape is right.
    let ok: Vec<redis::Value> = eval(&[["ok", "p", "d1000", "", ""]])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ok.len(), 2);
    let snap = f.snapshot().await;
    let cli = f.cli_keys();

    for when in ["d-5", "a-5", "x5", "d", "d1.5", "5", "", "d 5", "d5ms"] {
        let batches = [
            vec![["", "p", when, "", ""]],
            vec![["first", "p", "d0", "", ""], ["second", "p", when, "", ""]],
        ];
        for jobs in &batches {
            let err = eval(jobs)
                .query_async::<redis::Value>(&mut c)
                .await
                .unwrap_err();
            assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "when {when:?}: {err}");
            assert_eq!(
                f.snapshot().await,
                snap,
                "when {when:?}: something was written"
            );
            assert_eq!(f.cli_keys(), cli);
        }
    }
    // Other malformed fields, for good measure.
    for job in [
        ["", "p", "d0", "0", ""],
        ["", "p", "d0", "x", ""],
        ["", "p", "d0", "", "1;2"],
        [&"i".repeat(201), "p", "d0", "", ""],
        ["", &"x".repeat(65537), "d0", "", ""],
        ["", "p", "d0", "00", ""],
        // 15 digits: Lua would write "1e+15" and the record would be unreadable.
        ["", "p", "d0", "100000000000000", ""],
    ] {
        let err = eval(&[job])
            .query_async::<redis::Value>(&mut c)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
        assert_eq!(f.snapshot().await, snap);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_attempts_up_to_the_bound_are_accepted() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "max-attempts");
    q.enqueue(
        t,
        Job::new("x").id("x").max_attempts(punctual::MAX_ATTEMPTS),
    )
    .await
    .unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(d.max_attempts, punctual::MAX_ATTEMPTS);
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_script_rejects_backoff_steps_over_ten_years() {
    let f = Fixture::new().await;
    let t = "absurd-backoff-raw";
    f.queue
        .enqueue(t, Job::new("seed").id("seed"))
        .await
        .unwrap();
    let snap = f.snapshot().await;
    // The library refuses such a ladder before calling the script ...
    let err = f
        .queue
        .enqueue(
            t,
            Job::new("x").backoff(vec![MAX_DELAY + Duration::from_millis(1)]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    // ... and so must the script, which producers in other languages call.
    let mut c = f.conn.clone();
    for ladder in ["315360000001", "0,99999999999999999999"] {
        let r = raw_enqueue(t, &[["", "p", "d0", "", ladder]])
            .query_async::<redis::Value>(&mut c)
            .await;
        let err = r.expect_err(&format!("backoff {ladder:?} was accepted"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{err}");
        assert_eq!(f.snapshot().await, snap);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_topic_defaults_rejects_bad_values_and_writes_nothing() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "absurd-defaults");
    q.set_topic_defaults(t, Some(3), Some(&[Duration::from_secs(1)]))
        .await
        .unwrap();
    let snap = f.snapshot().await;
    let err = q.set_topic_defaults(t, Some(0), None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);
    let err = q
        .set_topic_defaults(
            t,
            None,
            Some(&[Duration::ZERO, MAX_DELAY + Duration::from_secs(1)]),
        )
        .await
        .expect_err("a backoff step over ten years was accepted as a topic default");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);
    let err = q
        .set_topic_defaults("a{b}", Some(3), None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(f.snapshot().await, snap);
}

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
            cmd.arg(punctual::internal::script_source("enqueue").unwrap())
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
    let _ = claim_retrying(&f.queue, t).await; // seed
    let d = claim_retrying(&f.queue, t).await;
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
    cmd.arg(punctual::internal::script_source("enqueue").unwrap())
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
    let d = claim_retrying(q, t).await;
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
        .arg(punctual::internal::script_source("enqueue").unwrap())
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
