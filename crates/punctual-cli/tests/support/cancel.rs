//! Cancelling a running job held by a client's resident loop (Python's
//! `run` and `run_async`, PHP's `Worker::run`, Laravel's `artisan
//! punctual:work`): shared by cancel.rs and laravel.rs.

use std::time::Duration;

use punctual::Queue;
use punctual_testkit::eventually;

use super::{punctual_at, Service};

/// `punctual cancel TOPIC ID` of a running job through the CLI, its reply
/// checked.
pub(crate) fn cancel_running(redis: &str, topic: &str, id: &str) {
    let r = punctual_at(redis, &["cancel", topic, id], b"").ok();
    assert!(
        r.stdout
            .starts_with(&format!("cancelled {id} while running (was running)")),
        "{r:?}"
    );
}

/// The first line of `records` (the handlers append `WORD ID PID` lines to
/// it) that starts with `words`.
fn record(svc: &Service, words: &[&str]) -> Option<Vec<String>> {
    svc.records()
        .into_iter()
        .find(|l| l.len() >= words.len() && l.iter().zip(words).all(|(a, b)| a == b))
}

fn counter(s: &punctual::TopicStats, name: &str) -> u64 {
    s.counters.get(name).copied().unwrap_or(0)
}

/// `svc` (started, `cancel_grace` of an hour, `http` set) runs a client's
/// loop for `topic`, whose handler appends `job ID PID` to `records` for
/// each job it starts and, for a `wait` job, looks whether it was
/// cancelled between steps until it is, then appends `cancelled ID PID`
/// and stops. `push(id, what)` enqueues a `wait` or a `plain` job with that
/// id. The cancel of the running `wait` job reaches the handler, which
/// stops; the program replies and keeps its place (only its reply can end
/// the run within the test): counted cancelled, the next job runs in the
/// same process.
pub(crate) async fn a_client_loop_tells_its_handler(
    svc: &Service,
    redis: &str,
    topic: &str,
    push: impl Fn(&str, &str),
) {
    let q = Queue::connect(redis).await.unwrap();
    push("w", "wait");
    eventually(Duration::from_secs(60), "w running", || async {
        record(svc, &["job", "w"]).is_some()
    })
    .await;
    let pid = record(svc, &["job", "w"]).unwrap()[2].clone();
    cancel_running(redis, topic, "w");
    eventually(
        Duration::from_secs(10),
        "the handler saw the cancel",
        || async { record(svc, &["cancelled", "w", &pid]).is_some() },
    )
    .await;
    let series =
        format!("punctual_handler_runs_total{{topic=\"{topic}\",outcome=\"cancelled\"}} 1");
    eventually(
        Duration::from_secs(10),
        "the cancelled run counted (the program replied)",
        || async { svc.metrics().await.contains(&series) },
    )
    .await;
    push("after", "plain");
    eventually(Duration::from_secs(30), "after done", || async {
        counter(&q.stats(topic).await.unwrap(), "done") == 1
    })
    .await;
    assert_eq!(
        record(svc, &["job", "after"]).unwrap()[2],
        pid,
        "the same program"
    );
    let s = q.stats(topic).await.unwrap();
    assert_eq!(s.pool + s.ready + s.running + s.dead, 0, "{s:?}");
    assert_eq!(
        (counter(&s, "cancelled"), counter(&s, "retried")),
        (1, 0),
        "{s:?}"
    );
    assert!(
        !svc.log().contains("did not end within cancel_grace"),
        "{}",
        svc.log()
    );
}
