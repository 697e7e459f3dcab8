//! Per-job options in the record's first field (PROTOCOL.md "Per-job
//! options"): expiry, timeout and group, through enqueue, get, claim, fail,
//! tick and the dead list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual::raw::{self, FailKind, Failed};
use punctual::{ErrorKind, Job, Outcome, Queue, State, When, Worker, WorkerConfig, MAX_DELAY};
use punctual_testkit::{eventually, RedisCluster};
use tokio_util::sync::CancellationToken;

use crate::util::{key, part, radix36 as b36, topic_keys, Fixture, LONG_LEASE, TICK_ALL};

/// The record of `id` as stored.
async fn record(f: &Fixture, t: &str, id: &str) -> String {
    f.cmd(redis::cmd("HGET").arg(key(t, "jobs")).arg(id)).await
}

/// The record's first field (M).
async fn m_field(f: &Fixture, t: &str, id: &str) -> String {
    let rec = record(f, t, id).await;
    rec.split(':').next().unwrap().to_string()
}

/// EVAL of the enqueue script for `jobs` (id, payload, when, max, backoff).
fn enqueue_cmd(t: &str, jobs: &[[&str; 5]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(punctual::internal::script_source("enqueue").unwrap())
        .arg(9);
    for k in topic_keys(t) {
        cmd.arg(k);
    }
    cmd.arg(1 << 20).arg(0).arg(jobs.len());
    for j in jobs {
        for a in j {
            cmd.arg(*a);
        }
    }
    cmd
}

/// Runs `cmd`, which must be refused; returns "CODE detail".
async fn refused(f: &Fixture, cmd: &redis::Cmd) -> String {
    let mut c = f.conn.clone();
    let err = cmd
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("refused");
    format!(
        "{} {}",
        err.code().unwrap_or("?"),
        err.detail().unwrap_or("")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_option_round_trips_through_enqueue_get_and_claim() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-round-trip");
    let job = Job::new("p")
        .id("all")
        .max_attempts(3)
        .expire(Duration::from_secs(3600))
        .timeout(Duration::from_millis(5000))
        .group("acme");
    q.enqueue(t, job).await.unwrap();
    let info = q.get(t, "all").await.unwrap().expect("the job");
    let deadline = info.due_ms + 3_600_000;
    assert_eq!(info.max_attempts, 3);
    assert_eq!(info.deadline_ms, Some(deadline));
    assert_eq!(info.timeout_ms, Some(5000));
    assert_eq!(info.group.as_deref(), Some("acme"));
    assert_eq!(
        m_field(&f, t, "all").await,
        format!("3;e{};t5000;gacme", b36(deadline)),
        "x is stored as e<due + ms, base 36>, the rest as given"
    );
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["deadline_ms"], deadline);
    assert_eq!(json["timeout_ms"], 5000);
    assert_eq!(json["group"], "acme");

    // Each option alone, with the topic's default max attempts, and a delay.
    q.enqueue(
        t,
        Job::new("p")
            .id("x")
            .delay(Duration::from_secs(60))
            .expire(Duration::from_millis(1500)),
    )
    .await
    .unwrap();
    q.enqueue(
        t,
        Job::new("p").id("t").timeout(Duration::from_micros(1500)),
    )
    .await
    .unwrap();
    q.enqueue(t, Job::new("p").id("g").group("Shop_17.eu@x-y"))
        .await
        .unwrap();
    let x = q.get(t, "x").await.unwrap().unwrap();
    assert_eq!(x.max_attempts, 6);
    assert_eq!(x.deadline_ms, Some(x.due_ms + 1500));
    assert_eq!((x.timeout_ms, x.group.as_deref()), (None, None));
    assert_eq!(
        m_field(&f, t, "x").await,
        format!(";e{}", b36(x.due_ms + 1500))
    );
    let tj = q.get(t, "t").await.unwrap().unwrap();
    assert_eq!(
        (tj.deadline_ms, tj.timeout_ms, tj.group.as_deref()),
        (None, Some(2), None),
        "a timeout of 1.5 ms is sent as 2 ms (never shorter)"
    );
    assert_eq!(m_field(&f, t, "t").await, ";t2");
    let g = q.get(t, "g").await.unwrap().unwrap();
    assert_eq!((g.deadline_ms, g.timeout_ms), (None, None));
    assert_eq!(g.group.as_deref(), Some("Shop_17.eu@x-y"));

    // Claim hands the options out with the job.
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let all = got.iter().find(|d| d.id == "all").expect("claimed");
    assert_eq!(all.max_attempts, 3);
    assert_eq!(all.deadline_ms, Some(deadline));
    assert_eq!(all.timeout, Some(Duration::from_millis(5000)));
    assert_eq!(all.group.as_deref(), Some("acme"));
    assert_eq!(all.payload, b"p");
    let g = got.iter().find(|d| d.id == "g").expect("claimed");
    assert_eq!((g.deadline_ms, g.timeout, g.max_attempts), (None, None, 6));
    assert_eq!(g.group.as_deref(), Some("Shop_17.eu@x-y"));
    let tj = got.iter().find(|d| d.id == "t").expect("claimed");
    assert_eq!(tj.timeout, Some(Duration::from_millis(2)));
    assert_eq!(tj.group, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_stores_options_as_a_producer_passes_them() {
    let f = Fixture::new().await;
    let t = "opts-script";
    let at = f.now_ms().await + 60_000;
    let when = format!("a{at}");
    // One batch, one due time, different options: the per-due header
    // cache must not mix them up.
    let out: Vec<redis::Value> = f
        .cmd(&enqueue_cmd(
            t,
            &[
                ["a", "pa", &when, ";gshop-17;x1000", ""],
                ["b", "pb", &when, "", "10,20"],
                ["c", "pc", &when, "4;t60000", ""],
                ["d", "pd", &when, "2", ""],
                ["e", "pe", &when, ";x315360000000;t315360000000", "5"],
            ],
        ))
        .await;
    assert_eq!(out.len(), 10);
    let due = b36(at);
    let gap = |rec: &str| rec.split(':').nth(2).unwrap().to_string();
    let a = record(&f, t, "a").await;
    assert_eq!(
        a,
        format!(";gshop-17;e{}:{due}:{}::0:pa", b36(at + 1000), gap(&a)),
        "order kept, x turned into e"
    );
    let b = record(&f, t, "b").await;
    assert_eq!(b, format!(":{due}:{}:10,20:0:pb", gap(&b)));
    let c = record(&f, t, "c").await;
    assert_eq!(c, format!("4;t60000:{due}:{}::0:pc", gap(&c)));
    let d = record(&f, t, "d").await;
    assert_eq!(d, format!("2:{due}:{}::0:pd", gap(&d)));
    let e = record(&f, t, "e").await;
    assert_eq!(
        e,
        format!(
            ";e{};t315360000000:{due}:{}:5:0:pe",
            b36(at + 315_360_000_000),
            gap(&e)
        )
    );
    let info = f.queue.get(t, "a").await.unwrap().unwrap();
    assert_eq!(info.deadline_ms, Some(at + 1000));
    assert_eq!(info.group.as_deref(), Some("shop-17"));
    assert_eq!(info.due_ms, at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_options_leave_nothing_written() {
    let f = Fixture::new().await;
    let t = "opts-refused";
    // Something in the topic already, so the snapshot is not empty.
    f.queue
        .enqueue(t, Job::new("seed").id("seed"))
        .await
        .unwrap();
    let before = f.snapshot().await;
    let long_group = format!(";g{}", "a".repeat(65));
    for (bad, why) in [
        (";", "an empty option"),
        ("3;", "an empty option"),
        (";t1;", "an empty option"),
        (";;t1", "an empty option"),
        (";x", "expiry"),
        (";x0", "expiry"),
        (";x01", "expiry"),
        (";x315360000001", "expiry"),
        (";x1e3", "expiry"),
        (";x-1", "expiry"),
        (";t0", "timeout"),
        (";t007", "timeout"),
        (";t99999999999999999", "timeout"),
        (";g", "group"),
        (long_group.as_str(), "group"),
        (";gbad name", "group"),
        (";gshop/1", "group"),
        (";gcafé", "group"),
        (";e100", "written by enqueue"),
        (";q1", "unknown option"),
        (";X1", "unknown option"),
        (";x1;x2", "more than once"),
        (";gA;t5;gB", "more than once"),
        (
            ";p00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "traceparent",
        ),
        (
            ";p00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "traceparent",
        ),
        (
            ";p00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "traceparent",
        ),
        (
            ";p00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "traceparent",
        ),
        (
            ";pff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "traceparent",
        ),
        (";sk=v", "needs a traceparent"),
        (
            ";p00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;sk=%3",
            "tracestate",
        ),
        (
            ";p00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;sk=%zz",
            "tracestate",
        ),
        (
            ";p00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;sk=\t",
            "tracestate",
        ),
        ("0;x1", "max attempts"),
        ("10001;t1", "max attempts"),
        ("03;t1", "max attempts"),
        ("3x;t1", "max attempts"),
        ("a", "max attempts"),
    ] {
        let err = refused(
            &f,
            &enqueue_cmd(
                t,
                &[["ok", "p", "d0", ";t5", ""], ["bad", "p", "d0", bad, ""]],
            ),
        )
        .await;
        assert!(
            err.starts_with("PUNCTUAL_INVALID job 2: "),
            "{bad:?} refused as job 2: {err}"
        );
        assert!(err.contains(why), "{bad:?}: {err} should say {why:?}");
        assert_eq!(f.snapshot().await, before, "{bad:?} wrote something");
    }

    // The library refuses the same before sending anything.
    let q = &f.queue;
    for (job, why) in [
        (Job::new("p").expire(Duration::ZERO), "expiry"),
        (
            Job::new("p").expire(MAX_DELAY + Duration::from_millis(1)),
            "expiry",
        ),
        (Job::new("p").timeout(Duration::ZERO), "timeout"),
        (
            Job::new("p").timeout(MAX_DELAY + Duration::from_secs(1)),
            "timeout",
        ),
        (Job::new("p").group(""), "group"),
        (Job::new("p").group("a".repeat(65)), "group"),
        (Job::new("p").group("bad name"), "group"),
        (Job::new("p").group("x;t1"), "group"),
        (Job::new("p").traceparent("00-1-2-01"), "traceparent"),
        (
            Job::new("p").traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
            "span id is all zeros",
        ),
        (Job::new("p").tracestate("k=v"), "needs a traceparent"),
        (
            Job::new("p")
                .traceparent(TRACEPARENT)
                .tracestate("k=".to_string() + &"v".repeat(511)),
            "tracestate",
        ),
    ] {
        let err = job.validate().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains(why), "{err} should say {why:?}");
        let err = q.enqueue(t, job).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }
    assert_eq!(f.snapshot().await, before);
    // The limits themselves are accepted.
    for job in [
        Job::new("p").expire(Duration::from_millis(1)),
        Job::new("p").expire(MAX_DELAY),
        Job::new("p").timeout(MAX_DELAY),
        Job::new("p").group("a".repeat(64)),
    ] {
        q.enqueue(t, job).await.expect("within the limits");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_tick_and_dead_keep_the_options_as_written() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-keep");
    q.enqueue(
        t,
        Job::new("p")
            .id("j")
            .max_attempts(3)
            .backoff(vec![Duration::ZERO])
            .expire(MAX_DELAY)
            .timeout(Duration::from_secs(30))
            .group("acme"),
    )
    .await
    .unwrap();
    let m = m_field(&f, t, "j").await;
    assert!(m.starts_with("3;e"), "{m}");
    let info = q.get(t, "j").await.unwrap().unwrap();

    // fail: retried at once (backoff 0), record rewritten with the error.
    let d = raw::claim(q, &part(t), 1, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    let failed = raw::fail(
        q,
        &part(t),
        &d.lease(),
        "boom",
        FailKind::Retry { after: None },
    )
    .await
    .unwrap();
    assert_eq!(failed, Failed::Retry);
    let rec = record(&f, t, "j").await;
    assert!(rec.contains("boom"), "the record was rewritten: {rec}");
    assert_eq!(m_field(&f, t, "j").await, m, "fail keeps the field");

    // tick: a lease that runs out is reclaimed, the record rewritten.
    raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let d = raw::claim(q, &part(t), 1, Duration::from_millis(1))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        d.deadline_ms, info.deadline_ms,
        "a retry does not move the deadline"
    );
    f.wait_past(d.claimed_us / 1000 + 2).await;
    let tick = raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    assert_eq!(tick.reclaimed, 1);
    let rec = record(&f, t, "j").await;
    assert!(
        rec.contains("lease expired"),
        "the record was rewritten: {rec}"
    );
    assert_eq!(m_field(&f, t, "j").await, m, "tick keeps the field");

    // dead: the dead list shows the options.
    let d = raw::claim(q, &part(t), 1, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(d.attempt, 3);
    raw::fail(q, &part(t), &d.lease(), "last", FailKind::Permanent)
        .await
        .unwrap();
    assert_eq!(m_field(&f, t, "j").await, m);
    let dead = q.dead_list(t, 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].deadline_ms, info.deadline_ms);
    assert_eq!(dead[0].timeout_ms, Some(30_000));
    assert_eq!(dead[0].group.as_deref(), Some("acme"));
    assert_eq!(dead[0].max_attempts, 3);
    let got = q.get(t, "j").await.unwrap().unwrap();
    assert_eq!(got.group.as_deref(), Some("acme"));
    assert_eq!(got.deadline_ms, info.deadline_ms);

    // Replayed from dead, it keeps them too.
    q.dead_replay(t, punctual::DeadSelector::Ids(vec!["j".into()]))
        .await
        .unwrap();
    // The options are kept; the deadline moves with the due time (the
    // window the record had is kept, see
    // a_replayed_expired_job_gets_a_fresh_window_of_the_same_length).
    let replayed = q.get(t, "j").await.unwrap().unwrap();
    assert_eq!(
        m_field(&f, t, "j").await,
        format!("3;e{};t30000;gacme", b36(replayed.deadline_ms.unwrap())),
        "dead replay keeps the other options"
    );
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn trace_context_errors_are_the_ones_the_clients_give() {
    // clients/testdata/invalid_options.json holds the messages the PHP,
    // Python and Node producers give; for the trace context they are the
    // library's.
    let cases: Vec<serde_json::Value> = serde_json::from_str(include_str!(
        "../../../clients/testdata/invalid_options.json"
    ))
    .unwrap();
    let mut n = 0;
    for c in &cases {
        let args = c["args"].as_object().unwrap();
        if !args.keys().all(|k| k == "traceparent" || k == "tracestate") {
            continue;
        }
        let mut job = Job::new("x");
        if let Some(tp) = args.get("traceparent") {
            job = job.traceparent(tp.as_str().unwrap());
        }
        if let Some(ts) = args.get("tracestate") {
            job = job.tracestate(ts.as_str().unwrap());
        }
        let err = job.validate().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.to_string(), c["message"].as_str().unwrap());
        n += 1;
    }
    assert!(n >= 8, "{n} trace cases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_context_survives_retry_reclaim_dead_and_replay() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-trace");
    // A tracestate value may hold ; : and %, which the record escapes.
    let state = "rojo=00f067aa0ba902b7,congo=a:b;c%d";
    q.enqueue(
        t,
        Job::new("p")
            .id("j")
            .max_attempts(3)
            .backoff(vec![Duration::ZERO])
            .group("acme")
            .traceparent(TRACEPARENT)
            .tracestate(state),
    )
    .await
    .unwrap();
    let m = m_field(&f, t, "j").await;
    assert_eq!(
        m,
        format!("3;gacme;p{TRACEPARENT};srojo=00f067aa0ba902b7,congo=a%3Ab%3Bc%25d")
    );
    let same = |d: &punctual::Delivery, step: &str| {
        assert_eq!(d.traceparent.as_deref(), Some(TRACEPARENT), "{step}");
        assert_eq!(d.tracestate.as_deref(), Some(state), "{step}");
    };
    let info = q.get(t, "j").await.unwrap().unwrap();
    assert_eq!(
        (info.traceparent.as_deref(), info.tracestate.as_deref()),
        (Some(TRACEPARENT), Some(state))
    );

    // Retry.
    let d = raw::claim(q, &part(t), 1, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    same(&d, "first claim");
    let failed = raw::fail(
        q,
        &part(t),
        &d.lease(),
        "boom",
        FailKind::Retry { after: None },
    )
    .await
    .unwrap();
    assert_eq!(failed, Failed::Retry);
    assert_eq!(m_field(&f, t, "j").await, m, "fail keeps the context");

    // Reclaim of a lease that ran out.
    raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let d = raw::claim(q, &part(t), 1, Duration::from_millis(1))
        .await
        .unwrap()
        .remove(0);
    same(&d, "after the retry");
    f.wait_past(d.claimed_us / 1000 + 2).await;
    assert_eq!(
        raw::tick(q, &part(t), &TICK_ALL).await.unwrap().reclaimed,
        1
    );
    assert_eq!(m_field(&f, t, "j").await, m, "tick keeps the context");

    // Dead, then replayed.
    let d = raw::claim(q, &part(t), 1, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    same(&d, "after the reclaim");
    raw::fail(q, &part(t), &d.lease(), "last", FailKind::Permanent)
        .await
        .unwrap();
    let dead = q.dead_list(t, 0, 10).await.unwrap();
    assert_eq!(dead[0].traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(dead[0].tracestate.as_deref(), Some(state));
    q.dead_replay(t, punctual::DeadSelector::Ids(vec!["j".into()]))
        .await
        .unwrap();
    assert_eq!(
        m_field(&f, t, "j").await,
        m,
        "dead replay keeps the context"
    );
    raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    let d = raw::claim(q, &part(t), 1, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(d.attempt, 1);
    same(&d, "after the replay");

    // Without one, the record carries nothing of it.
    q.enqueue(t, Job::new("p").id("plain").max_attempts(3))
        .await
        .unwrap();
    assert_eq!(m_field(&f, t, "plain").await, "3");
    let d = q.get(t, "plain").await.unwrap().unwrap();
    assert_eq!((d.traceparent, d.tracestate), (None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_without_options_is_unchanged_byte_for_byte() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-none");
    q.enqueue(
        t,
        Job::new("x:y")
            .id("plain")
            .max_attempts(2)
            .backoff(vec![Duration::ZERO]),
    )
    .await
    .unwrap();
    q.enqueue(t, Job::new("z").id("bare")).await.unwrap();
    let info = q.get(t, "plain").await.unwrap().unwrap();
    let due = b36(info.due_ms);
    let gap = b36(info.due_ms - info.created_ms);
    assert_eq!(
        record(&f, t, "plain").await,
        format!("2:{due}:{gap}:0:0:x:y")
    );
    assert_eq!(
        (info.deadline_ms, info.timeout_ms, info.group),
        (None, None, None)
    );
    let bare = q.get(t, "bare").await.unwrap().unwrap();
    assert_eq!(
        record(&f, t, "bare").await,
        format!(
            ":{}:{}::0:z",
            b36(bare.due_ms),
            b36(bare.due_ms - bare.created_ms)
        )
    );
    // Through a fail: only the due time and the last error change.
    let mut got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    got.sort_by(|a, b| b.id.cmp(&a.id));
    let d = &got[0];
    assert_eq!(d.id, "plain");
    assert_eq!(
        (d.deadline_ms, d.timeout, d.group.as_deref()),
        (None, None, None)
    );
    raw::fail(
        q,
        &part(t),
        &d.lease(),
        "err",
        FailKind::Retry { after: None },
    )
    .await
    .unwrap();
    let after = q.get(t, "plain").await.unwrap().unwrap();
    assert_eq!(
        record(&f, t, "plain").await,
        format!(
            "2:{}:{}:0:3:errx:y",
            b36(after.due_ms),
            b36(after.due_ms - info.created_ms)
        )
    );
}

// ---- Phase 2: expiry at claim, reschedule, per-job timeout -------------

/// Waits until Redis's clock (read through `get`) is past `ms`.
async fn wait_redis_past(q: &Queue, t: &str, id: &str, ms: i64) {
    eventually(
        Duration::from_secs(10),
        "the Redis clock to pass",
        || async { q.get(t, id).await.unwrap().unwrap().now_ms > ms },
    )
    .await;
}

fn counter(s: &punctual::TopicStats, name: &str) -> u64 {
    s.counters.get(name).copied().unwrap_or(0)
}

/// An expired job is never handed out: it goes to dead with reason
/// expired, counted; one within its window is claimed; a retry does not
/// extend the deadline. Runs on a single Redis and on a cluster.
async fn expiry_at_claim(q: &Queue, t: &str) {
    q.enqueue(
        t,
        Job::new("s").id("stale").expire(Duration::from_millis(1)),
    )
    .await
    .unwrap();
    q.enqueue(
        t,
        Job::new("f").id("fresh").expire(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let stale = q.get(t, "stale").await.unwrap().unwrap();
    let deadline = stale.deadline_ms.unwrap();
    wait_redis_past(q, t, "stale", deadline).await;
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["fresh"], "the expired job is not handed out");
    raw::ack(q, &part(t), &[got[0].lease()]).await.unwrap();
    let dead = q.get(t, "stale").await.unwrap().unwrap();
    assert_eq!(dead.state, State::Dead);
    assert_eq!(dead.attempts, 0, "it never started");
    let err = dead.last_error.unwrap();
    assert!(err.starts_with("expired: "), "{err}");
    let s = q.stats(t).await.unwrap();
    assert_eq!(
        (counter(&s, "expired"), counter(&s, "dead"), s.dead),
        (1, 1, 1)
    );
    assert_eq!(counter(&s, "claimed"), 1);

    // A retry due after the deadline dies at its claim: the deadline stays
    // where the first due time put it.
    q.enqueue(
        t,
        Job::new("r")
            .id("retry")
            .max_attempts(5)
            .expire(Duration::from_millis(1500)),
    )
    .await
    .unwrap();
    let first = q.get(t, "retry").await.unwrap().unwrap();
    let d = raw::claim(q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!((d.id.as_str(), d.deadline_ms), ("retry", first.deadline_ms));
    let failed = raw::fail(
        q,
        &part(t),
        &d.lease(),
        "busy",
        FailKind::Retry {
            after: Some(Duration::from_millis(2000)),
        },
    )
    .await
    .unwrap();
    assert_eq!(failed, Failed::Retry);
    let retry = q.get(t, "retry").await.unwrap().unwrap();
    assert!(retry.due_ms > first.deadline_ms.unwrap());
    assert_eq!(
        retry.deadline_ms, first.deadline_ms,
        "the retry keeps the deadline"
    );
    wait_redis_past(q, t, "retry", retry.due_ms).await;
    raw::tick(q, &part(t), &TICK_ALL).await.unwrap();
    assert_eq!(
        q.get(t, "retry").await.unwrap().unwrap().state,
        State::Ready
    );
    assert!(raw::claim(q, &part(t), 10, LONG_LEASE)
        .await
        .unwrap()
        .is_empty());
    let retry = q.get(t, "retry").await.unwrap().unwrap();
    assert_eq!((retry.state, retry.attempts), (State::Dead, 1));
    assert!(retry.last_error.unwrap().starts_with("expired: "));
    let s = q.stats(t).await.unwrap();
    assert_eq!((counter(&s, "expired"), counter(&s, "dead")), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_jobs_go_to_dead_at_claim_single_node() {
    let f = Fixture::new().await;
    expiry_at_claim(&f.queue, "opts-expiry").await;
    // The record keeps its options and its payload; only the error changed.
    let m = m_field(&f, "opts-expiry", "stale").await;
    assert!(m.starts_with(";e"), "{m}");
    assert!(record(&f, "opts-expiry", "stale").await.ends_with("s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_jobs_go_to_dead_at_claim_on_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    assert!(q.is_cluster());
    for t in ["a", "b", "c"] {
        expiry_at_claim(&q, t).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_never_runs_an_expired_job() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-worker-expiry");
    // Paused, so that no claim happens before the deadline passes.
    q.pause(t).await.unwrap();
    q.enqueue(
        t,
        Job::new("s").id("stale").expire(Duration::from_millis(1)),
    )
    .await
    .unwrap();
    q.enqueue(
        t,
        Job::new("f").id("fresh").expire(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let deadline = q
        .get(t, "stale")
        .await
        .unwrap()
        .unwrap()
        .deadline_ms
        .unwrap();
    f.wait_past(deadline).await;
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = CancellationToken::new();
    let ran2 = ran.clone();
    let worker = Worker::new(q.clone(), WorkerConfig::default()).handle(t, move |d| {
        let ran = ran2.clone();
        async move {
            ran.lock().unwrap().push(d.id.clone());
            Outcome::Done
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    q.resume(t).await.unwrap();
    eventually(Duration::from_secs(20), "both jobs settled", || async {
        let s = q.stats(t).await.unwrap();
        s.dead == 1 && s.pool + s.ready + s.running == 0 && counter(&s, "done") == 1
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    assert_eq!(*ran.lock().unwrap(), ["fresh"]);
    let s = q.stats(t).await.unwrap();
    assert_eq!(counter(&s, "expired"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reschedule_moves_the_deadline_with_the_due_time() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-reschedule");
    q.enqueue(
        t,
        Job::new("p")
            .id("j")
            .delay(Duration::from_secs(60))
            .expire(Duration::from_secs(10))
            .group("acme"),
    )
    .await
    .unwrap();
    q.enqueue(t, Job::new("p").id("plain").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let before = q.get(t, "j").await.unwrap().unwrap();
    assert_eq!(before.deadline_ms.unwrap() - before.due_ms, 10_000);
    for when in [
        When::Delay(Duration::from_secs(3600)),
        When::Delay(Duration::from_secs(5)),
        When::Now,
    ] {
        q.reschedule(t, "j", when).await.unwrap().unwrap();
        let after = q.get(t, "j").await.unwrap().unwrap();
        assert_ne!(after.due_ms, before.due_ms);
        assert_eq!(
            after.deadline_ms.unwrap() - after.due_ms,
            10_000,
            "{when:?}: the window is kept"
        );
        assert_eq!(after.group.as_deref(), Some("acme"));
        let m = m_field(&f, t, "j").await;
        assert_eq!(m, format!(";e{};gacme", b36(after.deadline_ms.unwrap())));
    }
    // A job without options is rescheduled as before.
    q.reschedule(t, "plain", When::Now).await.unwrap().unwrap();
    assert_eq!(m_field(&f, t, "plain").await, "");
    let d = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    assert_eq!(d.len(), 2, "both are due and within their window");
}

/// A job that expired, replayed from dead, gets a fresh window of the
/// length it had (deadline minus due time), counted from its new due time:
/// it is handed out at its next claim instead of expiring again. A paced
/// replay moves the deadline with the later due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_expired_job_gets_a_fresh_window_of_the_same_length() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-replay-expired");
    for id in ["now", "paced"] {
        q.enqueue(
            t,
            Job::new("p")
                .id(id)
                .expire(Duration::from_millis(2000))
                .group("acme"),
        )
        .await
        .unwrap();
    }
    let first = q.get(t, "now").await.unwrap().unwrap();
    assert_eq!(first.deadline_ms.unwrap() - first.due_ms, 2000);
    wait_redis_past(q, t, "paced", first.deadline_ms.unwrap() + 1).await;
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    assert!(got.is_empty(), "both expired: {got:?}");
    assert_eq!(q.stats(t).await.unwrap().dead, 2);

    let ids = q
        .dead_replay(t, punctual::DeadSelector::Ids(vec!["now".into()]))
        .await
        .unwrap();
    assert_eq!(ids, ["now"]);
    let replayed = q.get(t, "now").await.unwrap().unwrap();
    assert_eq!(replayed.state, State::Ready);
    assert!(replayed.due_ms > first.deadline_ms.unwrap());
    assert_eq!(
        replayed.deadline_ms.unwrap() - replayed.due_ms,
        2000,
        "a fresh window of the same length, from the new due time"
    );
    assert_eq!(
        replayed.group.as_deref(),
        Some("acme"),
        "other options kept"
    );
    let m = m_field(&f, t, "now").await;
    assert_eq!(m, format!(";e{};gacme", b36(replayed.deadline_ms.unwrap())));
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["now"], "handed out, not expired again");
    assert_eq!(counter(&q.stats(t).await.unwrap(), "expired"), 2);

    // Paced ("due" mode): due in a minute, in pool; the window starts at
    // that due time.
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(punctual::internal::script_source("dead_replay").unwrap())
        .arg(9);
    for k in topic_keys(t) {
        cmd.arg(k);
    }
    cmd.arg("due").arg("paced").arg("d60000");
    // Due a minute after the replay's clock: at or after Redis's time just
    // before it, at most a ms after the time of the get (the replay rounds
    // up to the next ms), however long the calls took.
    let before = q.redis_now_ms().await.unwrap();
    let ids: Vec<String> = f.cmd(&cmd).await;
    assert_eq!(ids, ["paced"]);
    let paced = q.get(t, "paced").await.unwrap().unwrap();
    assert_eq!(paced.state, State::Pool);
    assert!(
        paced.due_ms >= before + 60_000 && paced.due_ms <= paced.now_ms + 60_001,
        "due {} (Redis ms before the replay {before}, at the get {})",
        paced.due_ms,
        paced.now_ms
    );
    assert_eq!(paced.deadline_ms.unwrap() - paced.due_ms, 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_job_timeout_replaces_the_workers_for_that_job_only() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-timeout");
    q.enqueue(
        t,
        Job::new("hang")
            .id("short")
            .max_attempts(2)
            .backoff(vec![Duration::ZERO])
            .timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    q.enqueue(t, Job::new("slow").id("slow").max_attempts(2))
        .await
        .unwrap();
    let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let stop = CancellationToken::new();
    let calls2 = calls.clone();
    let worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(4)
            .timeout(Duration::from_secs(30)),
    )
    .handle(t, move |d| {
        let calls = calls2.clone();
        async move {
            *calls.lock().unwrap().entry(d.id.clone()).or_default() += 1;
            let nap = if d.id == "short" { 3600 } else { 1 };
            tokio::time::sleep(Duration::from_millis(nap * 1000)).await;
            Outcome::Done
        }
    });
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(20), "both jobs settled", || async {
        let s = q.stats(t).await.unwrap();
        s.dead == 1 && counter(&s, "done") == 1 && s.pool + s.ready + s.running == 0
    })
    .await;
    stop.cancel();
    w.await.unwrap().unwrap();
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls["short"], 2,
        "timed out at 200 ms and retried, then dead"
    );
    assert_eq!(calls["slow"], 1, "the 1 s job ran under the worker's 30 s");
    let short = q.get(t, "short").await.unwrap().unwrap();
    let err = short.last_error.unwrap();
    assert!(err.contains("timed out after 200ms"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_parks_a_record_whose_options_do_not_read() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-unreadable");
    let now = f.now_ms().await;
    let due = b36(now - 1);
    for (id, m) in [("bad-letter", "3;q1"), ("empty", "3;"), ("fine", "3;gx")] {
        let rec = format!("{m}:{due}:0::0:p");
        let _: () = f
            .cmd(redis::cmd("HSET").arg(key(t, "jobs")).arg(id).arg(rec))
            .await;
        let _: () = f
            .cmd(redis::cmd("ZADD").arg(key(t, "ready")).arg(now - 1).arg(id))
            .await;
    }
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["fine"]);
    assert_eq!(got[0].group.as_deref(), Some("x"));
    for id in ["bad-letter", "empty"] {
        let info = q.get(t, id).await.unwrap().unwrap();
        assert_eq!(info.state, State::Dead, "{id}");
    }
    let s = q.stats(t).await.unwrap();
    assert_eq!((counter(&s, "dead"), counter(&s, "expired")), (2, 0));
}

// claim checks a record that starts with the header of the record before it
// by comparing those bytes; every other record gets the whole pattern.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_checks_every_header_next_to_records_that_share_its_first_bytes() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "shared-head");
    let now = f.now_ms().await;
    let due = b36(now - 1);
    // In due order: a good record, one whose error length is not a number,
    // a good one, and one cut before the colon that ends the header.
    let recs = [
        ("a", format!(":{due}:0::0:pa")),
        ("b", format!(":{due}:0::x:pb")),
        ("c", format!(":{due}:0::0:pc")),
        ("d", format!(":{due}:0::0")),
    ];
    for (i, (id, rec)) in recs.iter().enumerate() {
        let _: () = f
            .cmd(redis::cmd("HSET").arg(key(t, "jobs")).arg(id).arg(rec))
            .await;
        let score = now - 10 + i as i64;
        let _: () = f
            .cmd(redis::cmd("ZADD").arg(key(t, "ready")).arg(score).arg(id))
            .await;
    }
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["a", "c"]);
    assert_eq!(got[1].payload, b"pc");
    for id in ["b", "d"] {
        let info = q.get(t, id).await.unwrap().unwrap();
        assert_eq!(info.state, State::Dead, "{id}");
    }
    let s = q.stats(t).await.unwrap();
    assert_eq!(counter(&s, "dead"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_counts_from_the_time_asked_for_even_when_already_past() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "opts-late-push");
    let now = q.redis_now_ms().await.unwrap();
    let asked = now - 10_000;
    let at = std::time::UNIX_EPOCH + Duration::from_millis(asked as u64);
    // Asked for 10 s ago with a 1 s window: due now, but already expired.
    q.enqueue(
        t,
        Job::new("late")
            .id("late")
            .at(at)
            .expire(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    // Asked for 10 s ago with a 1 h window: most of it is left.
    q.enqueue(
        t,
        Job::new("ok")
            .id("ok")
            .at(at)
            .expire(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let late = q.get(t, "late").await.unwrap().unwrap();
    assert_eq!(late.deadline_ms, Some(asked + 1_000));
    let ok = q.get(t, "ok").await.unwrap().unwrap();
    assert_eq!(ok.deadline_ms, Some(asked + 3_600_000));
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        ["ok"],
        "only the job still within its window is handed out"
    );
    let late = q.get(t, "late").await.unwrap().unwrap();
    assert_eq!(late.state, State::Dead);
    assert!(late.last_error.unwrap_or_default().starts_with("expired"));
}
