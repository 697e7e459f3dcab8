//! Steps the guarantee tests share: a tick with generous limits, claims of
//! one job (retrying while Redis comes back), raw EVALs of a script with a
//! topic's nine keys, a topic seeded with a job in each state.

use std::time::{Duration, Instant};

use punctual::raw::{self, FailKind, Failed, Lease};
use punctual::{Delivery, Job, Queue, State};

use crate::util::{key, part, Fixture, LONG_LEASE, TICK_ALL};

/// Promote and reclaim with generous limits (tests that check limits pass
/// their own).
pub(crate) async fn tick(q: &Queue, topic: &str) -> raw::Tick {
    raw::tick(q, &part(topic), &TICK_ALL).await.expect("tick")
}

/// Claims exactly one job.
pub(crate) async fn claim_one(q: &Queue, topic: &str, lease: Duration) -> Delivery {
    let mut got = raw::claim(q, &part(topic), 10, lease).await.expect("claim");
    assert_eq!(
        got.len(),
        1,
        "expected exactly one job to claim, got {got:?}"
    );
    got.remove(0)
}

pub(crate) fn pair(d: &Delivery) -> Lease {
    d.lease()
}

pub(crate) fn state_of(info: &Option<punctual::JobInfo>) -> Option<State> {
    info.as_ref().map(|i| i.state)
}

/// Calls `op` until it succeeds (Redis may still be coming back).
pub(crate) async fn until_ok<T, Fut>(what: &str, mut op: impl FnMut() -> Fut) -> T
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

pub(crate) async fn claim_retrying(q: &Queue, t: &str) -> punctual::Delivery {
    let p = part(t);
    let mut got = until_ok("claim", || raw::claim(q, &p, 1, LONG_LEASE)).await;
    assert_eq!(got.len(), 1, "expected one job, got {got:?}");
    got.remove(0)
}

/// EVAL of a script with the nine keys of `t` and `argv`.
pub(crate) fn eval(script: &str, keys: &[String], argv: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(punctual::internal::script_source(script).unwrap())
        .arg(keys.len())
        .arg(keys)
        .arg(argv);
    cmd
}

/// A topic with a job in each state and a running lease: returns the token.
pub(crate) async fn seed(f: &Fixture, t: &str) -> i64 {
    let q = &f.queue;
    q.enqueue(t, Job::new("p").id("dead")).await.unwrap();
    let d = claim_retrying(q, t).await;
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
    let d = claim_retrying(q, t).await;
    assert_eq!(d.id, "run");
    q.enqueue(t, Job::new("p").id("ready")).await.unwrap();
    q.enqueue(t, Job::new("p").id("pool").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    d.token
}

/// Writes a job whose id is not UTF-8 (as stored before enqueue refused
/// such ids) into ready with score 0, its record a copy of `like`'s.
pub(crate) async fn plant_id_not_utf8(f: &Fixture, t: &str, like: &str) -> &'static [u8] {
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
