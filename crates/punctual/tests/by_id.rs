//! Get, cancel and reschedule by id, in every state a job can be in.

use std::time::Duration;

use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{Job, State, When};
use punctual_testkit::eventually;

use crate::steps::{claim_one, state_of, tick};
use crate::util::{part, Fixture, LONG_LEASE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_cancel_and_reschedule_by_id_in_every_state() {
    let f = Fixture::new().await;
    let (q, t) = (&f.queue, "by-id");
    let hour = Duration::from_secs(3600);

    // One job in each state.
    q.enqueue(t, Job::new("dead").id("dead")).await.unwrap();
    let d = claim_one(q, t, LONG_LEASE).await;
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("dead", d.token),
            "no",
            FailKind::Permanent
        )
        .await
        .unwrap(),
        Failed::Dead
    );
    q.enqueue(t, Job::new("running").id("running"))
        .await
        .unwrap();
    let running = claim_one(q, t, LONG_LEASE).await;
    q.enqueue(t, Job::new("ready").id("ready")).await.unwrap();
    q.enqueue(t, Job::new("pool").id("pool").delay(hour))
        .await
        .unwrap();

    for (id, want) in [
        ("pool", State::Pool),
        ("ready", State::Ready),
        ("running", State::Running),
        ("dead", State::Dead),
    ] {
        let info = q.get(t, id).await.unwrap().expect(id);
        assert_eq!(info.id, id);
        assert_eq!(info.state, want, "{id}");
        assert_eq!(info.payload, id.as_bytes());
        match want {
            State::Pool => {
                // Counted from the enqueue's ms rounded up.
                let gap = info.due_ms - info.created_ms;
                assert!((3_600_000..=3_600_001).contains(&gap), "{gap}");
                assert!(info.due_ms > info.now_ms);
            }
            State::Running => {
                let deadline = info.state_since_ms.expect("a lease deadline");
                assert!(
                    deadline > info.now_ms + 50_000,
                    "{deadline} vs {}",
                    info.now_ms
                );
                assert_eq!(info.attempts, 1);
            }
            State::Dead => assert!(info.state_since_ms.is_some()),
            _ => assert!(info.due_ms <= info.now_ms),
        }
    }
    assert!(q.get(t, "missing").await.unwrap().is_none());

    // Reschedule of running or dead is refused and changes nothing.
    let snap = f.snapshot().await;
    for (id, st) in [("running", State::Running), ("dead", State::Dead)] {
        assert_eq!(q.reschedule(t, id, When::Now).await.unwrap(), Some(st));
        assert_eq!(
            q.reschedule(t, id, When::Delay(hour)).await.unwrap(),
            Some(st)
        );
    }
    assert_eq!(q.reschedule(t, "missing", When::Now).await.unwrap(), None);
    assert_eq!(
        f.snapshot().await,
        snap,
        "a refused reschedule changed something"
    );

    // Pool -> later: still in pool, new due time.
    let before = f.now_ms().await;
    assert_eq!(
        q.reschedule(t, "pool", When::Delay(2 * hour))
            .await
            .unwrap(),
        Some(State::Pool)
    );
    let after = f.now_ms().await;
    let info = q.get(t, "pool").await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    // The delay counts from the call's ms rounded up: at most `after` + 1.
    assert!((before + 7_200_000..=after + 7_200_001).contains(&info.due_ms));

    // Pool -> earlier, still in the future: ready only once due, via tick.
    let before = f.now_ms().await;
    assert_eq!(
        q.reschedule(t, "pool", When::Delay(Duration::from_millis(300)))
            .await
            .unwrap(),
        Some(State::Pool)
    );
    let info = q.get(t, "pool").await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    assert!(info.due_ms >= before + 300);
    let due = info.due_ms;
    let conn = f.conn.clone();
    eventually(
        Duration::from_secs(5),
        "the rescheduled job to be promoted",
        || {
            let conn = conn.clone();
            async move {
                let r = tick(q, t).await;
                let now = crate::util::redis_time_ms(&conn).await;
                if r.promoted > 0 {
                    assert!(now >= due, "promoted at {now}, before its due time {due}");
                }
                r.promoted == 1
            }
        },
    )
    .await;
    assert_eq!(
        state_of(&q.get(t, "pool").await.unwrap()),
        Some(State::Ready)
    );

    // Ready -> later: back to pool.
    assert_eq!(
        q.reschedule(t, "ready", When::Delay(hour)).await.unwrap(),
        Some(State::Ready)
    );
    let info = q.get(t, "ready").await.unwrap().unwrap();
    assert_eq!(info.state, State::Pool);
    assert!(info.due_ms > info.now_ms + 3_500_000);
    // Pool -> due now: straight to ready, no tick needed.
    assert_eq!(
        q.reschedule(t, "ready", When::Now).await.unwrap(),
        Some(State::Pool)
    );
    let info = q.get(t, "ready").await.unwrap().unwrap();
    assert_eq!(info.state, State::Ready);
    assert!(info.due_ms <= info.now_ms);
    // A time in the past means now.
    q.enqueue(t, Job::new("past").id("past").delay(hour))
        .await
        .unwrap();
    let long_ago = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    assert_eq!(
        q.reschedule(t, "past", When::At(long_ago)).await.unwrap(),
        Some(State::Pool)
    );
    assert_eq!(
        state_of(&q.get(t, "past").await.unwrap()),
        Some(State::Ready)
    );
    assert!(q.check(t).await.unwrap().is_empty());

    // Cancel in every state.
    for (id, st) in [
        ("pool", State::Ready),
        ("past", State::Ready),
        ("dead", State::Dead),
        ("running", State::Running),
    ] {
        assert_eq!(q.cancel(t, id).await.unwrap(), Some(st), "{id}");
        assert!(q.get(t, id).await.unwrap().is_none(), "{id}");
    }
    q.enqueue(t, Job::new("p2").id("p2").delay(hour))
        .await
        .unwrap();
    assert_eq!(q.cancel(t, "p2").await.unwrap(), Some(State::Pool));
    assert_eq!(q.cancel(t, "p2").await.unwrap(), None);
    assert_eq!(q.cancel(t, "missing").await.unwrap(), None);

    // The worker of the cancelled running job cannot ack, fail or extend.
    assert_eq!(
        raw::ack(q, &part(t), &[running.lease()]).await.unwrap(),
        vec![false]
    );
    assert_eq!(
        raw::fail(
            q,
            &part(t),
            &Lease::new("running", running.token),
            "x",
            FailKind::Retry { after: None }
        )
        .await
        .unwrap(),
        Failed::Stale
    );
    assert_eq!(
        raw::extend(q, &part(t), &[running.lease()], LONG_LEASE)
            .await
            .unwrap(),
        vec![false]
    );
    assert!(q.get(t, "running").await.unwrap().is_none());

    // Only "ready" is left.
    assert_eq!(f.card(t, "jobs").await, 1);
    assert_eq!(f.card(t, "ready").await, 1);
    for set in ["pool", "running", "dead"] {
        assert_eq!(f.card(t, set).await, 0, "{set}");
    }
    assert!(q.check(t).await.unwrap().is_empty());
}
