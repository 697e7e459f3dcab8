//! Listing, peeking at and checking the cold pool (PROTOCOL.md "The cold
//! pool"): jobs due far ahead wait in per-minute lists `P:{T}:c:<start>`
//! indexed by `P:{T}:cold`. The state is built by hand where the scripts do
//! not place jobs cold themselves, so these tests hold with either.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use punctual::{ErrorKind, Job, Listed, State};

use crate::util::{key, topic_keys, Fixture, PREFIX};

const MINUTE: i64 = 60_000;

fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms as u64)
}

/// Puts the jobs of `topic` (a physical name) due 10 minutes ahead or
/// more that wait in `pool` into the cold pool, as the placement would have
/// (a no-op for jobs the scripts already placed cold).
fn make_cold(f: &Fixture, topic: &str) {
    f.server.make_cold(PREFIX, topic);
}

/// A topic with 4 jobs in `pool` (due in a minute: 3 `u:`, 1 `x:`) and two
/// cold buckets two hours ahead: A with 6 `u:` jobs and 1 `x:`, B (the next
/// minute) with 12 `u:` and 1 `x:` last. A's list also holds a duplicate
/// entry of `u:a1`, a stale entry of `u:b0` (due in B) and the entry of
/// a cancelled job `u:gone` (its record deleted). Returns the starts of A
/// and B and every live `u:` job with its due time.
async fn seed(f: &Fixture, t: &str) -> (i64, i64, BTreeMap<String, i64>) {
    let q = &f.queue;
    let now = f.now_ms().await;
    let a = (now + 2 * 3_600_000) / MINUTE * MINUTE;
    let b = a + MINUTE;
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push((format!("u:p{i}"), now + MINUTE + 1000 * i));
    }
    jobs.push(("x:p0".to_string(), now + MINUTE + 5000));
    for i in 0..6 {
        jobs.push((format!("u:a{i}"), a + 1000 * i));
    }
    jobs.push(("x:a0".to_string(), a + 30_000));
    jobs.push(("u:gone".to_string(), a + 40_000));
    for i in 0..12 {
        jobs.push((format!("u:b{i:02}"), b + 1000 * i));
    }
    jobs.push(("x:b0".to_string(), b + 50_000));
    let batch = jobs
        .iter()
        .map(|(id, due)| Job::new("p").id(id).at(at(*due)))
        .collect();
    q.enqueue_batch(t, batch).await.unwrap();
    make_cold(f, t);
    // The stale entries.
    let bucket_a = key(t, &format!("c:{a}"));
    f.cli(&["RPUSH", &bucket_a, "u:a1", "u:b00"]);
    f.cli(&["HDEL", &key(t, "jobs"), "u:gone"]);
    f.cli(&["HINCRBY", &key(t, "meta"), "cold_n", "-1"]);
    let live = jobs
        .into_iter()
        .filter(|(id, _)| id.starts_with("u:") && id != "u:gone")
        .collect();
    (a, b, live)
}

/// Pages through a listing, returning every page's jobs and cursor.
async fn pages(
    f: &Fixture,
    t: &str,
    prefix: &str,
    count: usize,
) -> Vec<(Vec<Listed>, Option<String>)> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = f
            .queue
            .list(t, State::Pool, prefix, cursor.as_deref(), count)
            .await
            .unwrap();
        cursor = page.cursor.clone();
        out.push((page.jobs, page.cursor));
        assert!(out.len() < 100, "the cursor never ends");
        if cursor.is_none() {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_listing_goes_on_from_pool_into_each_cold_bucket_in_order() {
    let f = Fixture::new().await;
    let t = "cold-list";
    let (a, b, live) = seed(&f, t).await;
    // The jobs are where the test means them to be.
    assert_eq!(f.card(t, "pool").await, 4);
    assert_eq!(f.card(t, &format!("c:{a}")).await, 10);
    assert_eq!(f.card(t, &format!("c:{b}")).await, 13);

    let got = pages(&f, t, "u:", 3).await;
    let cursors: Vec<Option<String>> = got.iter().map(|(_, c)| c.clone()).collect();
    // pool -> bucket A -> bucket B -> B from offset 10 (a page reads about
    // 10 entries) -> the end.
    assert_eq!(
        cursors,
        [
            Some(format!("0-c{a}-0")),
            Some(format!("0-c{b}-0")),
            Some(format!("0-c{b}-10")),
            None
        ],
        "{got:?}"
    );
    let mut seen = BTreeMap::new();
    for (jobs, _) in &got {
        assert!(
            jobs.windows(2).all(|w| w[0].at_ms <= w[1].at_ms),
            "a page is sorted by due time: {jobs:?}"
        );
        for j in jobs {
            assert!(
                seen.insert(j.id.clone(), j.at_ms).is_none(),
                "{} listed twice: {got:?}",
                j.id
            );
        }
    }
    // Every live u: job once, with its due time; no stale entry, no x:.
    assert_eq!(seen, live);
    // The first page is the pool's, the second bucket A's.
    let ids = |i: usize| -> Vec<&str> { got[i].0.iter().map(|j| j.id.as_str()).collect() };
    assert_eq!(ids(0), ["u:p0", "u:p1", "u:p2"]);
    assert_eq!(ids(1), ["u:a0", "u:a1", "u:a2", "u:a3", "u:a4", "u:a5"]);

    // Without a prefix: every job of the pool, cold or not.
    let all: BTreeSet<String> = pages(&f, t, "", 1000)
        .await
        .into_iter()
        .flat_map(|(jobs, _)| jobs.into_iter().map(|j| j.id))
        .collect();
    let oracle: BTreeSet<String> = f.pool_jobs(t).into_iter().map(|(id, _)| id).collect();
    assert_eq!(all, oracle);
    assert_eq!(all.len(), live.len() + 3);

    // An old cursor (pool only) still works: it starts over at the pool.
    let page = f
        .queue
        .list(t, State::Pool, "u:", Some("0-0"), 3)
        .await
        .unwrap();
    assert_eq!(page.cursor, Some(format!("0-c{a}-0")));
    // A cursor into a bucket that is gone (moved meanwhile) goes on with
    // the next one.
    let page = f
        .queue
        .list(
            t,
            State::Pool,
            "u:",
            Some(&format!("0-c{}-0", a - MINUTE)),
            1000,
        )
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 6 + 12, "{page:?}");
    // Malformed cursors, and a bucket cursor for another state, are refused.
    for (state, bad) in [
        (State::Pool, "0-c".to_string()),
        (State::Pool, format!("0-c{a}")),
        (State::Pool, format!("0-c{}-0", a + 1)),
        (State::Pool, format!("0-c{a}-x")),
        (State::Pool, format!("0-c-{a}-0")),
        (State::Pool, format!("1-c{a}-0")),
        (State::Ready, format!("0-c{a}-0")),
        (State::Dead, "0-x".to_string()),
    ] {
        let err = f
            .queue
            .list(t, state, "", Some(&bad), 10)
            .await
            .expect_err(&bad);
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad}: {err}");
        assert!(err.to_string().contains("cursor"), "{bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_pool_listing_visits_each_partitions_buckets() {
    let f = Fixture::new().await;
    let t = "cold-parts";
    f.queue.set_partitions(t, 3).await.unwrap();
    let now = f.now_ms().await;
    let ids: Vec<String> = (0..60).map(|i| format!("j:{i:02}")).collect();
    let jobs = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            // Half warm, half spread over three cold minutes.
            let due = if i % 2 == 0 {
                now + MINUTE
            } else {
                now + 3_600_000 + (i as i64 % 3) * MINUTE
            };
            Job::new("p").id(id).at(at(due))
        })
        .collect();
    f.queue.enqueue_batch(t, jobs).await.unwrap();
    for name in f.queue.partition_names(t).await.unwrap() {
        make_cold(&f, &name);
    }
    let mut listed: Vec<String> = pages(&f, t, "j:", 4)
        .await
        .into_iter()
        .flat_map(|(jobs, _)| jobs.into_iter().map(|j| j.id))
        .collect();
    listed.sort();
    assert_eq!(listed, ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_at_the_pool_merges_pool_and_cold_buckets_in_due_order() {
    let f = Fixture::new().await;
    let t = "cold-peek";
    let (a, _, _) = seed(&f, t).await;
    // A pool job due within bucket A (pool is not all earlier than the
    // cold pool): peek must still read A when it fills the first five.
    f.cli(&["ZADD", &key(t, "pool"), &(a + 500).to_string(), "late"]);
    let oracle = f.pool_jobs(t);
    assert_eq!(oracle.len(), 5 + 7 + 13, "{oracle:?}");
    assert_eq!(oracle[4].0, "u:a0");
    assert_eq!(oracle[5].0, "late");
    for n in [1, 3, 4, 5, 6, 8, 11, 12, 20, 25, 1000] {
        let got: Vec<(String, i64)> = f
            .queue
            .peek(t, State::Pool, n)
            .await
            .unwrap()
            .into_iter()
            .map(|j| (j.id, j.at_ms))
            .collect();
        let want = &oracle[..n.min(oracle.len())];
        assert_eq!(got, want, "peek {n}");
    }
    // A bucket is read whole: its entries are in no order. Put a job due
    // first in A at the end of A's list.
    let bucket_a = key(t, &format!("c:{a}"));
    f.cli(&["LREM", &bucket_a, "0", "u:a0"]);
    f.cli(&["RPUSH", &bucket_a, "u:a0"]);
    let got = f.queue.peek(t, State::Pool, 5).await.unwrap();
    assert_eq!(got[4].id, "u:a0", "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_page_returns_the_live_cold_jobs_of_a_page_of_a_bucket() {
    let f = Fixture::new().await;
    let t = "cold-page";
    let (a, b, _) = seed(&f, t).await;
    let keys = topic_keys(t);
    let page = |argv: Vec<String>| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(punctual::internal::script_source("cold_page").unwrap())
            .arg(keys.len())
            .arg(&keys)
            .arg(argv);
        cmd
    };
    let call = |start: i64, offset: i64, count: i64, prefix: &str| {
        page(vec![
            start.to_string(),
            offset.to_string(),
            count.to_string(),
            prefix.to_string(),
        ])
    };
    // A: u:a0..5, x:a0, u:gone, then the stale u:a1 and u:b00.
    let v: Vec<String> = f.cmd(&call(a, 0, 1000, "")).await;
    let due = |i: i64| (a + 1000 * i).to_string();
    let mut want = vec!["-1".to_string()];
    for i in 0..6 {
        want.extend([format!("u:a{i}"), due(i)]);
    }
    want.extend(["x:a0".to_string(), (a + 30_000).to_string()]);
    assert_eq!(v, want);
    // A page: entries 2..5 (u:a2..u:a5), more after it.
    let v: Vec<String> = f.cmd(&call(a, 2, 4, "u:")).await;
    assert_eq!(v[0], "6");
    assert_eq!(v.len(), 1 + 2 * 4, "{v:?}");
    // The last page: the cancelled job's entry and u:b00's (due in B) are
    // stale; the duplicate of u:a1 is live (once per call).
    let v: Vec<String> = f.cmd(&call(a, 7, 3, "")).await;
    assert_eq!(v, ["-1".to_string(), "u:a1".into(), due(1)]);
    let v: Vec<String> = f.cmd(&call(a, 7, 1, "")).await;
    assert_eq!(v, ["8"]);
    // The prefix, in B.
    let v: Vec<String> = f.cmd(&call(b, 0, 1000, "x:")).await;
    assert_eq!(
        v,
        ["-1".to_string(), "x:b0".into(), (b + 50_000).to_string()]
    );
    // A job that left the bucket (here: into pool) is not listed from it.
    f.cli(&["ZADD", &key(t, "pool"), &(b + 1000).to_string(), "u:b01"]);
    let v: Vec<String> = f.cmd(&call(b, 0, 2, "")).await;
    assert_eq!(v, ["2".to_string(), "u:b00".into(), b.to_string()]);
    // A bucket that does not exist: empty.
    let v: Vec<String> = f.cmd(&call(b + 10 * MINUTE, 0, 10, "")).await;
    assert_eq!(v, ["-1"]);
    // Bad arguments are refused.
    let snap = f.snapshot().await;
    let s = a.to_string();
    for argv in [
        vec![s.as_str(), "0", "0", ""],
        vec![s.as_str(), "0", "1001", ""],
        vec!["60001", "0", "10", ""],
        vec![s.as_str(), "-1", "10", ""],
        vec![s.as_str(), "0", "10"],
        vec![s.as_str(), "0", "10", "", "extra"],
    ] {
        let err = page(argv.iter().map(|s| s.to_string()).collect())
            .query_async::<redis::Value>(&mut f.conn.clone())
            .await
            .expect_err(&format!("{argv:?}"));
        assert_eq!(err.code(), Some("PUNCTUAL_INVALID"), "{argv:?}: {err}");
    }
    assert_eq!(f.snapshot().await, snap);
}

/// Needs the check script that replies `id, "cold <start>"` for a cold job
/// (before it, every cold job is "record in no set").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_a_cold_job_missing_from_its_bucket_and_a_bucket_below_cold_at() {
    let f = Fixture::new().await;
    let t = "cold-check";
    let (a, b, _) = seed(&f, t).await;
    // Clean: stale, duplicate and cancelled entries are no violation.
    let v = f.queue.check(t).await.unwrap();
    assert!(v.is_empty(), "{v:?}");

    // A cold job whose entry is gone.
    f.cli(&["LREM", &key(t, &format!("c:{b}")), "0", "u:b03"]);
    let v = f.queue.check(t).await.unwrap();
    let got: Vec<(&str, &str)> = v
        .iter()
        .map(|v| (v.id.as_str(), v.problem.as_str()))
        .collect();
    let problem = format!("cold, but not in its bucket punctual:{{{t}}}:c:{b}");
    assert_eq!(got, [("u:b03", problem.as_str())]);
    // Back in its bucket (anywhere in the list): clean again.
    f.cli(&["LPUSH", &key(t, &format!("c:{b}")), "u:b03"]);
    assert!(f.queue.check(t).await.unwrap().is_empty());

    // A bucket below cold_at: reported by its key.
    f.cli(&["HSET", &key(t, "meta"), "cold_at", &b.to_string()]);
    let v = f.queue.check(t).await.unwrap();
    let bucket_a = key(t, &format!("c:{a}"));
    assert!(
        v.iter()
            .any(|v| v.id == bucket_a && v.problem.contains("below meta cold_at")),
        "{v:?}"
    );
}

/// The scheduler moves a bucket in slices while a listing pages through it:
/// a job still in the bucket at the end was listed (the move pops entries
/// from the tail, so the offsets of the pages still to read do not shift).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_moved_in_slices_during_a_listing_skips_no_job_left_in_it() {
    let f = Fixture::new().await;
    let t = "cold-move-list";
    let now = f.now_ms().await;
    let a = (now + 2 * 3_600_000) / MINUTE * MINUTE;
    let batch = (0..30)
        .map(|i| Job::new("p").id(format!("m:{i:02}")).at(at(a + 1000 * i)))
        .collect();
    f.queue.enqueue_batch(t, batch).await.unwrap();
    make_cold(&f, t);
    let bucket = key(t, &format!("c:{a}"));
    assert_eq!(f.card(t, &format!("c:{a}")).await, 30);

    let first = f.queue.list(t, State::Pool, "", None, 10).await.unwrap();
    assert_eq!(first.cursor, Some(format!("0-c{a}-10")));
    let mut listed: BTreeSet<String> = first.jobs.into_iter().map(|j| j.id).collect();
    // The bucket is now within cold_after: one tick moves 10 of its entries.
    f.cli(&["HSET", &key(t, "meta"), "cold_after", "10800000"]);
    let limits = punctual::raw::TickLimits {
        promote_batch: 10,
        max_ready: 1_000_000,
        reclaim_batch: 1000,
    };
    punctual::raw::tick(&f.queue, &crate::util::part(t), &limits)
        .await
        .unwrap();
    assert_eq!(f.card(t, "pool").await, 10, "the tick moved 10 jobs");
    let mut cursor = first.cursor;
    while let Some(c) = cursor {
        let page = f
            .queue
            .list(t, State::Pool, "", Some(&c), 10)
            .await
            .unwrap();
        listed.extend(page.jobs.into_iter().map(|j| j.id));
        cursor = page.cursor;
    }
    let left: Vec<String> = f
        .cmd(redis::cmd("LRANGE").arg(&bucket).arg(0).arg(-1))
        .await;
    assert_eq!(left.len(), 20);
    for id in &left {
        assert!(
            listed.contains(id),
            "{id} stayed in its bucket but was not listed: {listed:?}"
        );
    }
}
