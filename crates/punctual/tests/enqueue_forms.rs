//! The enqueue script's batch forms store what the five-argument form stores:
//! the shared form ("=n", "~n"), the forms without ids ("=*n", "~*n"); each
//! job's status and id come back in its place; large batches go in calls of
//! the enqueue chunk.

use std::collections::HashSet;
use std::time::Duration;

use punctual::{EnqueueStatus, ErrorKind, Job, Queue, State};

use crate::steps::eval;
use crate::util::{key, radix36, topic_keys, Fixture};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_batches_are_split_and_results_keep_input_order() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "big-batch");
    let n = 2500;
    let given = |i: usize| i.is_multiple_of(3) && i != 1500;
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            let j = Job::new(i.to_string());
            if given(i) {
                j.id(format!("given:{i}"))
            } else if i == 1500 {
                // The same id as job 0, in another chunk: a duplicate.
                j.id("given:0")
            } else {
                j
            }
        })
        .collect();
    let r = q.enqueue_batch(t, jobs).await.unwrap();
    assert_eq!(r.len(), n);
    for (i, e) in r.iter().enumerate() {
        if given(i) {
            assert_eq!(e.id, format!("given:{i}"));
        }
        let want = if i == 1500 {
            EnqueueStatus::Duplicate
        } else {
            EnqueueStatus::Created
        };
        assert_eq!(e.status, want, "job {i}");
    }
    assert_eq!(r[1500].id, "given:0");
    let unique: HashSet<_> = r.iter().map(|e| &e.id).collect();
    assert_eq!(unique.len(), n - 1);
    assert_eq!(f.card(t, "jobs").await, n - 1);
    // Each result names the job at its position: its payload is its index.
    for (i, e) in r.iter().enumerate() {
        let info = q.get(t, &e.id).await.unwrap().unwrap();
        let want = if i == 1500 { 0 } else { i };
        assert_eq!(info.payload, want.to_string().into_bytes(), "job {i}");
    }
}

/// A batch goes in calls of enqueue_chunk jobs (250 by default), so that no
/// producer holds Redis long; the setting is bounded by the script's own
/// limit of 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_goes_in_calls_of_the_enqueue_chunk() {
    let f = Fixture::new().await;
    let t = "chunked";
    assert_eq!(f.queue.enqueue_chunk(), punctual::DEFAULT_ENQUEUE_CHUNK);
    // Loads the script and registers the topic first.
    f.queue.enqueue(t, Job::new("warm")).await.unwrap();
    let jobs = |n: usize| (0..n).map(|i| Job::new(i.to_string())).collect::<Vec<_>>();
    let before = f.server.command_calls("evalsha");
    let r = f.queue.enqueue_batch(t, jobs(600)).await.unwrap();
    assert!(r.iter().all(|e| e.status == EnqueueStatus::Created));
    assert_eq!(
        f.server.command_calls("evalsha") - before,
        3,
        "600 jobs in calls of 250"
    );

    let big = Queue::builder(f.server.url())
        .enqueue_chunk(punctual::MAX_BATCH)
        .connect()
        .await
        .unwrap();
    let before = f.server.command_calls("evalsha");
    big.enqueue_batch(t, jobs(1000)).await.unwrap();
    assert_eq!(
        f.server.command_calls("evalsha") - before,
        1,
        "1,000 jobs in one call"
    );
    assert_eq!(f.card(t, "ready").await, 1601);

    for bad in [0, punctual::MAX_BATCH + 1] {
        let err = Queue::builder(f.server.url())
            .enqueue_chunk(bad)
            .connect()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad}: {err}");
        assert!(err.to_string().contains("1 to 1000 jobs"), "{err}");
    }
}
