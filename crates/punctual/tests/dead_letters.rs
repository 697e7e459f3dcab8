//! Dead letters: listed newest first, replayed (paced pairs validated whole)
//! and purged; the oldest of a partitioned topic are the oldest across its
//! partitions; a stored id that is not UTF-8 goes to dead and can be purged.

use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{DeadSelector, ErrorKind, Job, State};

use crate::steps::{claim_one, claim_retrying, eval, pair, plant_id_not_utf8, seed};
use crate::util::{key, part, topic_keys, Fixture, LONG_LEASE};

/// Enqueues `ids` one by one and kills each with a permanent failure, each in
/// a later millisecond than the one before.
async fn make_dead(f: &Fixture, t: &str, ids: &[&str]) {
    for id in ids {
        f.queue
            .enqueue(t, Job::new(format!("payload {id}")).id(*id))
            .await
            .unwrap();
        let d = claim_one(&f.queue, t, LONG_LEASE).await;
        assert_eq!(d.id, *id);
        let outcome = raw::fail(
            &f.queue,
            &part(t),
            &Lease::new(id.to_string(), d.token),
            &format!("error {id}"),
            FailKind::Permanent,
        )
        .await
        .unwrap();
        assert_eq!(outcome, Failed::Dead);
        let died = f
            .queue
            .get(t, id)
            .await
            .unwrap()
            .unwrap()
            .state_since_ms
            .unwrap();
        f.wait_past(died).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_page_newest_first_replay_and_purge() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "dead");
    let ids = ["d0", "d1", "d2", "d3", "d4", "d5"];
    make_dead(&f, t, &ids).await;

    let all = q.dead_list(t, 0, 100).await.unwrap();
    let listed: Vec<&str> = all.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        listed,
        vec!["d5", "d4", "d3", "d2", "d1", "d0"],
        "newest first"
    );
    for w in all.windows(2) {
        assert!(w[0].state_since_ms > w[1].state_since_ms);
    }
    for j in &all {
        assert_eq!(j.state, State::Dead);
        assert_eq!(j.attempts, 1);
        assert_eq!(
            j.last_error.as_deref(),
            Some(format!("error {}", j.id).as_str())
        );
        assert_eq!(j.payload, format!("payload {}", j.id).into_bytes());
    }
    let mut paged = Vec::new();
    for offset in [0, 2, 4] {
        let page = q.dead_list(t, offset, 2).await.unwrap();
        assert_eq!(page.len(), 2);
        paged.extend(page.into_iter().map(|j| j.id));
    }
    assert_eq!(paged, listed);
    assert_eq!(q.dead_list(t, 3, 10).await.unwrap().len(), 3);
    assert!(q.dead_list(t, 6, 2).await.unwrap().is_empty());
    assert_eq!(
        q.dead_list(t, 0, 0).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );

    // Replay by id: back to ready, attempts reset, claimable.
    let replayed = q
        .dead_replay(t, DeadSelector::Ids(vec!["d3".into(), "not-dead".into()]))
        .await
        .unwrap();
    assert_eq!(replayed, vec!["d3".to_string()]);
    let info = q.get(t, "d3").await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (State::Ready, 0));
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!((d.id.as_str(), d.attempt), ("d3", 1));
    assert_eq!(
        raw::ack(q, &part(t), &[d.lease()]).await.unwrap(),
        vec![true]
    );

    // Replay the two oldest.
    let replayed = q.dead_replay(t, DeadSelector::Oldest(2)).await.unwrap();
    assert_eq!(replayed, vec!["d0".to_string(), "d1".to_string()]);
    let mut got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let got_ids: Vec<(&str, u32)> = got.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
    assert_eq!(got_ids, vec![("d0", 1), ("d1", 1)]);
    let acks: Vec<_> = got.iter().map(pair).collect();
    assert_eq!(
        raw::ack(q, &part(t), &acks).await.unwrap(),
        vec![true, true]
    );

    // Purge by id, then all.
    assert_eq!(
        q.dead_purge(t, DeadSelector::Ids(vec!["d4".into(), "d3".into()]))
            .await
            .unwrap(),
        1
    );
    assert!(q.get(t, "d4").await.unwrap().is_none());
    assert_eq!(q.dead_purge(t, DeadSelector::All).await.unwrap(), 2);
    assert!(q.get(t, "d2").await.unwrap().is_none());
    assert!(q.get(t, "d5").await.unwrap().is_none());
    assert_eq!(f.card(t, "dead").await, 0);
    assert_eq!(f.card(t, "jobs").await, 0);
    assert_eq!(q.dead_purge(t, DeadSelector::All).await.unwrap(), 0);
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_replay_of_more_than_are_dead_replays_them_all() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "replay-more");
    make_dead(&f, t, &["a", "b"]).await;
    let replayed = q.dead_replay(t, DeadSelector::Oldest(5)).await.unwrap();
    assert_eq!(replayed, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(f.card(t, "ready").await, 2);
    // Nothing dead: nothing to do, not an error.
    assert!(q
        .dead_replay(t, DeadSelector::Oldest(1))
        .await
        .unwrap()
        .is_empty());
    let got = raw::claim(q, &part(t), 10, LONG_LEASE).await.unwrap();
    let acks: Vec<_> = got.iter().map(pair).collect();
    assert_eq!(
        raw::ack(q, &part(t), &acks).await.unwrap(),
        vec![true, true]
    );
    make_dead(&f, t, &["c"]).await;
    let replayed = q.dead_replay(t, DeadSelector::All).await.unwrap();
    assert_eq!(replayed, vec!["c".to_string()]);
    assert_eq!(f.card(t, "dead").await, 0);
    assert!(q.check(t).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oldest_dead_jobs_of_a_partitioned_topic_are_the_oldest_across_partitions() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "parts");
    q.set_partitions(t, 3).await.unwrap();
    // Ids in partition 1 or 2 die first, then ids in partition 0.
    let pick = |p: u32, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("{p}-{i}"))
            .filter(|id| punctual::internal::partition_of(id, 3) == p)
            .take(n)
            .collect()
    };
    let early: Vec<String> = [pick(1, 2), pick(2, 2)].concat();
    let late: Vec<String> = pick(0, 3);
    for id in early.iter().chain(&late) {
        q.enqueue(t, Job::new("x").id(id.as_str())).await.unwrap();
        let physical =
            punctual::internal::partition_name(t, punctual::internal::partition_of(id, 3), 3);
        let d = claim_retrying(q, &physical).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oldest_dead_of_a_partitioned_topic_purges_an_id_that_is_not_utf8() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "old-bytes-parts");
    q.set_partitions(t, 2).await.unwrap();
    let p0 = punctual::internal::partition_name(t, 0, 2);
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
