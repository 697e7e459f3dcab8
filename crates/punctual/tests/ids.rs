//! Ids: one id names one live job. A duplicate changes nothing, replace
//! applies, a done id is free again, a dead id is reported as dead; generated
//! ids are unique, sort by creation and never overwrite a live job; an id
//! left in a set without its record never gets a second state.

use std::collections::HashSet;
use std::time::Duration;

use punctual::raw::{self, FailKind, Failed};
use punctual::{EnqueueOptions, EnqueueStatus, Job, State};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::steps::claim_one;
use crate::util::{key, part, radix36, take_slowlog, Fixture, LONG_LEASE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_enqueue_of_a_dead_id_is_reported_as_dead_not_duplicate() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "deadid");
    q.enqueue(t, Job::new("a").id("order:1")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    let r = raw::fail(q, &part(t), &d.lease(), "declined", FailKind::Permanent)
        .await
        .unwrap();
    assert_eq!(r, Failed::Dead);
    let snap = f.snapshot().await;

    // Alone and in a batch (with a new id beside it): "dead", nothing
    // changed for it; counted as a duplicate.
    let r = q.enqueue(t, Job::new("b").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Dead);
    assert!(r.is_duplicate(), "nothing was enqueued");
    let r = q
        .enqueue_batch(
            t,
            vec![Job::new("c").id("order:1"), Job::new("n").id("new")],
        )
        .await
        .unwrap();
    let st: Vec<_> = r.iter().map(|e| (e.id.as_str(), e.status)).collect();
    assert_eq!(
        st,
        vec![
            ("order:1", EnqueueStatus::Dead),
            ("new", EnqueueStatus::Created)
        ]
    );
    let now = q.get(t, "order:1").await.unwrap().unwrap();
    assert_eq!(
        (now.state, now.payload.as_slice()),
        (State::Dead, &b"a"[..])
    );
    assert_eq!(
        q.stats(t).await.unwrap().counters.get("duplicates"),
        Some(&2)
    );
    q.cancel(t, "new").await.unwrap();
    let mut after = f.snapshot().await;
    let mut before = snap.clone();
    for m in [&mut after, &mut before] {
        m.remove(&key(t, "stats"));
        m.remove(&key(t, "seq"));
    }
    assert_eq!(after, before, "a dead id was changed");

    // A live id elsewhere is still a plain duplicate; replace still applies.
    q.enqueue(t, Job::new("p").id("live")).await.unwrap();
    let r = q.enqueue(t, Job::new("p2").id("live")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Duplicate);
    let replace = EnqueueOptions::default().replace(true);
    let r = q
        .enqueue_with(t, vec![Job::new("d").id("order:1")], &replace)
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Replaced);
    assert_eq!(
        q.get(t, "order:1").await.unwrap().unwrap().state,
        State::Ready
    );
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_ids_change_nothing_replace_applies_and_done_ids_are_free_again() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "dups");
    let hour = Duration::from_secs(3600);
    let r = q
        .enqueue(t, Job::new("a").id("order:1").delay(hour))
        .await
        .unwrap();
    assert_eq!(
        (r.id.as_str(), r.status),
        ("order:1", EnqueueStatus::Created)
    );
    let first = q.get(t, "order:1").await.unwrap().unwrap();
    let snap = f.snapshot().await;

    let r = q.enqueue(t, Job::new("b").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Duplicate);
    assert!(r.is_duplicate());
    let now = q.get(t, "order:1").await.unwrap().unwrap();
    assert_eq!(now.state, State::Pool);
    assert_eq!(now.payload, b"a");
    assert_eq!(now.due_ms, first.due_ms);
    assert_eq!(now.created_ms, first.created_ms);
    // Only the duplicates counter moved.
    let mut after = f.snapshot().await;
    assert!(after.remove(&key(t, "stats")).is_some());
    let mut before = snap.clone();
    before.remove(&key(t, "stats"));
    assert_eq!(after, before, "a duplicate enqueue changed the topic");
    let stats = q.stats(t).await.unwrap();
    assert_eq!(stats.counters.get("duplicates"), Some(&1));

    // Replace: the new payload and due time apply.
    let replace = EnqueueOptions::default().replace(true);
    let r = q
        .enqueue_with(t, vec![Job::new("c").id("order:1")], &replace)
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Replaced);
    let now = q.get(t, "order:1").await.unwrap().unwrap();
    assert_eq!(now.state, State::Ready);
    assert_eq!(now.payload, b"c");
    assert!(now.due_ms < first.due_ms && now.due_ms <= now.now_ms);
    assert_eq!(f.card(t, "pool").await, 0);

    // Done: the id is free again.
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(d.payload, b"c");
    let r = q.enqueue(t, Job::new("d").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Duplicate, "a running job is live");
    assert_eq!(
        raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );
    let r = q.enqueue(t, Job::new("e").id("order:1")).await.unwrap();
    assert_eq!(r.status, EnqueueStatus::Created);
    assert_eq!(q.get(t, "order:1").await.unwrap().unwrap().payload, b"e");

    // The same id twice in one batch: the first wins, with or without replace.
    let r = q
        .enqueue_batch(t, vec![Job::new("x1").id("x"), Job::new("x2").id("x")])
        .await
        .unwrap();
    let st: Vec<_> = r.iter().map(|e| (e.id.as_str(), e.status)).collect();
    assert_eq!(
        st,
        vec![
            ("x", EnqueueStatus::Created),
            ("x", EnqueueStatus::Duplicate)
        ]
    );
    assert_eq!(q.get(t, "x").await.unwrap().unwrap().payload, b"x1");
    let r = q
        .enqueue_with(
            t,
            vec![Job::new("y1").id("y"), Job::new("y2").id("y")],
            &replace,
        )
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Created);
    assert_eq!(r[1].status, EnqueueStatus::Duplicate);
    assert_eq!(q.get(t, "y").await.unwrap().unwrap().payload, b"y1");
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test]
async fn replace_moves_a_job_between_pool_and_ready_without_leaving_a_copy() {
    let f = Fixture::new().await;
    let q = &f.queue;
    let replace = EnqueueOptions::default().replace(true);
    // ready -> pool
    q.enqueue("t", Job::new("a").id("x")).await.unwrap();
    let r = q
        .enqueue_with(
            "t",
            vec![Job::new("b").id("x").delay(Duration::from_secs(60))],
            &replace,
        )
        .await
        .unwrap();
    assert_eq!(r[0].status, EnqueueStatus::Replaced);
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready), (1, 0));
    // pool -> ready
    q.enqueue_with("t", vec![Job::new("c").id("x")], &replace)
        .await
        .unwrap();
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready), (0, 1));
    // pool -> pool keeps one entry with the new due time
    q.enqueue_with(
        "t",
        vec![Job::new("d").id("x").delay(Duration::from_secs(5))],
        &replace,
    )
    .await
    .unwrap();
    q.enqueue_with(
        "t",
        vec![Job::new("e").id("x").delay(Duration::from_secs(50))],
        &replace,
    )
    .await
    .unwrap();
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready), (1, 0));
    let j = q.get("t", "x").await.unwrap().unwrap();
    assert_eq!(j.payload, b"e");
    assert!(j.due_ms - j.now_ms > 40_000);
    // running -> ready: the lease goes too
    q.enqueue_with("t", vec![Job::new("f").id("x")], &replace)
        .await
        .unwrap();
    let d = raw::claim(q, &part("t"), 1, LONG_LEASE).await.unwrap();
    assert_eq!(d.len(), 1);
    q.enqueue_with("t", vec![Job::new("g").id("x")], &replace)
        .await
        .unwrap();
    let s = q.stats("t").await.unwrap();
    assert_eq!((s.pool, s.ready, s.running), (0, 1, 0));
    assert!(q.check("t").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_ids_are_unique_and_sort_by_creation_order() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "ids");
    let mut rng = StdRng::seed_from_u64(13);
    let mut ids = Vec::new();
    for round in 0..30 {
        let n = rng.random_range(1..=200);
        let jobs: Vec<Job> = (0..n).map(|i| Job::new(format!("{round}.{i}"))).collect();
        let r = q.enqueue_batch(t, jobs).await.unwrap();
        assert_eq!(r.len(), n);
        ids.extend(r.into_iter().map(|e| {
            assert_eq!(e.status, EnqueueStatus::Created);
            e.id
        }));
        ids.push(q.enqueue(t, Job::new("single")).await.unwrap().id);
        // Claims draw tokens from the same sequence: ids must still sort.
        if round % 3 == 0 {
            raw::claim(q, &part(t), 5, LONG_LEASE).await.unwrap();
        }
    }
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "ids out of order: {:?} then {:?}", w[0], w[1]);
    }
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
    assert_eq!(f.card(t, "jobs").await, ids.len());
    // Enqueues to another topic do not disturb this one's order, nor does
    // the clock moving on.
    q.enqueue("ids-other", Job::new("other")).await.unwrap();
    let now = f.now_ms().await;
    f.wait_past(now).await;
    let last = q.enqueue(t, Job::new("last")).await.unwrap().id;
    assert!(ids.last().unwrap() < &last);
}

#[tokio::test]
async fn a_generated_id_never_overwrites_a_live_job() {
    let f = Fixture::new().await;
    let q = &f.queue;
    // The next generated id will be <8 digits of the ms><sequence 101>. Make
    // that id live, for every millisecond of the next 3 s, with ids of our
    // own: the generator must skip it, not overwrite it.
    let _: () = f.cmd(redis::cmd("SET").arg(key("t", "seq")).arg(100)).await;
    let now = f.now_ms().await;
    let taken: Vec<String> = (now..now + 3000)
        .map(|ms| format!("{:0>8}{:0>4}", radix36(ms), radix36(101)))
        .collect();
    let mine = taken
        .iter()
        .map(|id| Job::new("mine").id(id.clone()))
        .collect();
    q.enqueue_batch("t", mine).await.unwrap();
    let generated = q.enqueue("t", Job::new("gen")).await.unwrap();
    assert!(
        f.now_ms().await < now + 3000,
        "the generation fell in the window"
    );
    assert_eq!(generated.status, EnqueueStatus::Created);
    assert!(!taken.contains(&generated.id), "{} was live", generated.id);
    assert!(generated.id.ends_with(&format!("{:0>4}", radix36(102))));
    let stamp = &generated.id[..8];
    let clash = taken.iter().find(|id| id.starts_with(stamp)).unwrap();
    assert_eq!(q.get("t", clash).await.unwrap().unwrap().payload, b"mine");
    assert_eq!(q.stats("t").await.unwrap().ready, 3001);
}

/// A batch whose ids are all to be generated goes without ids ("=*n",
/// "~*n") and gets back the first id only; the library counts the others
/// up from it, also where their last four digits wrap from zzzz to 0000.
#[tokio::test]
async fn a_batch_of_generated_ids_is_sent_without_ids_and_gets_them_across_the_wrap() {
    let f = Fixture::new().await;
    let q = &f.queue;
    let _: () = f
        .cmd(
            redis::cmd("SET")
                .arg(key("t", "seq"))
                .arg(1_679_616 * 7 - 4),
        )
        .await;
    let mut slow = f.conn.clone();
    f.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    take_slowlog(&mut slow).await;
    let alike = (0..6).map(|i| Job::new(format!("a{i}"))).collect();
    let alike = q.enqueue_batch("t", alike).await.unwrap();
    let own = (0..6)
        .map(|i| Job::new(format!("b{i}")).delay(Duration::from_millis(60_000 + i)))
        .collect();
    let own = q.enqueue_batch("t", own).await.unwrap();
    let enqueue = redis::Script::new(&punctual::internal::script_source("enqueue").unwrap());
    let log = take_slowlog(&mut slow).await;
    let forms: Vec<&str> = log
        .iter()
        .filter(|(_, args)| args.get(1).map(String::as_str) == Some(enqueue.get_hash()))
        .filter_map(|(_, args)| args.get(14).map(String::as_str))
        .collect();
    assert!(
        forms.contains(&"=*6") && forms.contains(&"~*6"),
        "{forms:?}"
    );
    let suffixes: Vec<&str> = alike.iter().chain(&own).map(|e| &e.id[8..]).collect();
    assert_eq!(
        suffixes,
        [
            "zzzx", "zzzy", "zzzz", "0000", "0001", "0002", "0003", "0004", "0005", "0006", "0007",
            "0008"
        ]
    );
    for (i, e) in alike.iter().enumerate() {
        let job = q.get("t", &e.id).await.unwrap().unwrap();
        assert_eq!(job.payload, format!("a{i}").into_bytes());
        assert_eq!(e.status, EnqueueStatus::Created);
    }
    for (i, e) in own.iter().enumerate() {
        let job = q.get("t", &e.id).await.unwrap().unwrap();
        assert_eq!(
            (job.payload, job.state),
            (format!("b{i}").into_bytes(), State::Pool)
        );
    }
}

#[tokio::test]
async fn a_batch_of_generated_ids_skips_a_live_one_in_its_middle() {
    let f = Fixture::new().await;
    let q = &f.queue;
    // A batch of three takes sequence numbers 101, 102, 103 as candidates
    // (looked up together); 102 is live for every millisecond of the next
    // 3 s, so the batch must get 101, 103 and then 104 (past the
    // candidates, looked up one by one).
    let _: () = f.cmd(redis::cmd("SET").arg(key("t", "seq")).arg(100)).await;
    let now = f.now_ms().await;
    let taken: Vec<String> = (now..now + 3000)
        .map(|ms| format!("{:0>8}{:0>4}", radix36(ms), radix36(102)))
        .collect();
    for chunk in taken.chunks(1000) {
        let mine = chunk
            .iter()
            .map(|id| Job::new("mine").id(id.clone()))
            .collect();
        q.enqueue_batch("t", mine).await.unwrap();
    }
    let got = q
        .enqueue_batch("t", (0..3).map(|i| Job::new(format!("gen{i}"))).collect())
        .await
        .unwrap();
    assert!(
        f.now_ms().await < now + 3000,
        "the generation fell in the window"
    );
    let suffixes: Vec<&str> = got.iter().map(|e| &e.id[8..]).collect();
    let want: Vec<String> = [101, 103, 104]
        .iter()
        .map(|s| format!("{:0>4}", radix36(*s)))
        .collect();
    assert_eq!(suffixes, want);
    for (i, e) in got.iter().enumerate() {
        assert_eq!(e.status, EnqueueStatus::Created);
        assert_eq!(
            q.get("t", &e.id).await.unwrap().unwrap().payload,
            format!("gen{i}").into_bytes()
        );
    }
    let stamp = &got[0].id[..8];
    let clash = taken.iter().find(|id| id.starts_with(stamp)).unwrap();
    assert_eq!(q.get("t", clash).await.unwrap().unwrap().payload, b"mine");
}

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
