//! The core semantics on a 3-master Redis Cluster, and partitioned topics:
//! never early, each job at least once (also when a consumer is killed),
//! fencing, and the one-state invariant, with topics spread over the shards.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::util::part;
use punctual::internal::{partition_name, partition_of};
use punctual::raw::{self, FailKind, Failed, Lease, TickLimits};
use punctual::{DeadSelector, ErrorKind, Job, Outcome, Queue, State, Worker, WorkerConfig};
use punctual_testkit::RedisCluster;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::worker::{spawn_child, spawn_scheduler, total_live};
use punctual_testkit::eventually;

async fn connect(c: &RedisCluster) -> Queue {
    let q = Queue::connect(c.seed_urls()).await.unwrap();
    assert!(q.is_cluster());
    q
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_url_of_a_cluster_node_is_detected_as_a_cluster() {
    let c = RedisCluster::start();
    let q = Queue::connect(c.urls()[1].clone()).await.unwrap();
    assert!(q.is_cluster());
    // Topics whose hash tags land on different masters all work.
    for t in ["a", "b", "c", "d", "e", "f"] {
        q.enqueue(t, Job::new("x").id("1")).await.unwrap();
        assert_eq!(q.get(t, "1").await.unwrap().unwrap().state, State::Ready);
    }
    let slots: HashSet<u16> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|t| c.keyslot(&format!("punctual:{{{t}}}:jobs")).unwrap())
        .collect();
    assert!(slots.len() > 1, "the topics are spread over slots");
    assert_eq!(q.topics().await.unwrap().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_early_and_each_job_once_across_shards_and_partitions() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    q.set_partitions("hot", 3).await.unwrap();
    let topics = ["a", "b", "c", "hot"];
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut expected = HashSet::new();
    for t in topics {
        let jobs: Vec<Job> = (0..300)
            .map(|_| Job::new("x").delay(Duration::from_millis(rng.random_range(0..1500))))
            .collect();
        for e in q.enqueue_batch(t, jobs).await.unwrap() {
            expected.insert((t.to_string(), e.id));
        }
    }
    let hot = q.stats("hot").await.unwrap();
    assert_eq!((hot.partitions, hot.pool + hot.ready), (3, 300));
    for p in 0..3 {
        let s = q.stats(&partition_name("hot", p, 3)).await;
        // Partition names are not valid topic names for the high-level API.
        assert_eq!(s.unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    let seen: Arc<Mutex<HashMap<(String, String), usize>>> = Arc::default();
    let early: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &topics, &stop);
    let mut w = Worker::new(q.clone(), WorkerConfig::default().concurrency(32));
    for t in topics {
        let (seen, early) = (seen.clone(), early.clone());
        w = w.handle(t, move |d| {
            let (seen, early) = (seen.clone(), early.clone());
            async move {
                if d.claimed_us < d.due_ms * 1000 {
                    early.lock().unwrap().push(d.id.clone());
                }
                *seen
                    .lock()
                    .unwrap()
                    .entry((d.topic.clone(), d.id.clone()))
                    .or_default() += 1;
                Outcome::Done
            }
        });
    }
    let worker = tokio::spawn(w.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(30), "every job handled", || async {
        seen.lock().unwrap().len() == expected.len()
    })
    .await;
    for t in topics {
        eventually(Duration::from_secs(10), "acked", || async {
            total_live(&q, t).await == 0
        })
        .await;
    }
    stop.cancel();
    worker.await.unwrap().unwrap();
    sched.await.unwrap();
    assert!(
        early.lock().unwrap().is_empty(),
        "early: {:?}",
        early.lock().unwrap()
    );
    let seen = seen.lock().unwrap().clone();
    for key in &expected {
        assert_eq!(seen.get(key), Some(&1), "{key:?}");
    }
    // Handlers saw the topic, not the partition.
    assert!(seen.keys().all(|(t, _)| !t.contains('#')));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_holds_on_a_cluster() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    q.enqueue("f", Job::new("x").id("j").backoff(vec![Duration::ZERO]))
        .await
        .unwrap();
    let first = raw::claim(&q, &part("f"), 1, Duration::from_millis(100))
        .await
        .unwrap()
        .remove(0);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let t = raw::tick(
        &q,
        &part("f"),
        &TickLimits {
            promote_batch: 100,
            max_ready: 1000,
            reclaim_batch: 100,
        },
    )
    .await
    .unwrap();
    assert_eq!(t.reclaimed, 1);
    let second = raw::claim(&q, &part("f"), 1, Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    assert_ne!(first.token, second.token);
    assert_eq!(
        raw::ack(&q, &part("f"), &[Lease::new("j", first.token)])
            .await
            .unwrap(),
        vec![false]
    );
    let failed = raw::fail(
        &q,
        &part("f"),
        &Lease::new("j", first.token),
        "late",
        FailKind::Retry { after: None },
    )
    .await
    .unwrap();
    assert_eq!(failed, Failed::Stale);
    assert_eq!(
        q.get("f", "j").await.unwrap().unwrap().state,
        State::Running
    );
    assert_eq!(
        raw::ack(&q, &part("f"), &[Lease::new("j", second.token)])
            .await
            .unwrap(),
        vec![true]
    );
    assert!(q.get("f", "j").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_on_a_cluster_loses_nothing() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    let n = 40;
    let jobs = (0..n)
        .map(|i| Job::new(format!("{i}")).backoff(vec![Duration::ZERO]))
        .collect();
    let ids: Vec<String> = q
        .enqueue_batch("t", jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["t"], &stop);
    let mut child = spawn_child("slow", &c.seed_urls());
    eventually(Duration::from_secs(20), "child holds leases", || async {
        q.stats("t").await.unwrap().running > 0
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let mut second = spawn_child("slow", &c.seed_urls());
    eventually(Duration::from_secs(60), "every job done", || async {
        total_live(&q, "t").await == 0
    })
    .await;
    second.kill().unwrap();
    second.wait().unwrap();
    stop.cancel();
    sched.await.unwrap();
    // The child records done ids in `test:done`, a key of some shard.
    for id in &ids {
        let slot_node = c.cli(&["SISMEMBER", "test:done", id]).unwrap();
        assert_eq!(slot_node.trim(), "1", "job {id} lost");
    }
    assert!(q.check("t").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_topics_keep_dedup_lookup_and_the_one_state_rule() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    q.set_partitions("p", 3).await.unwrap();
    assert_eq!(q.partitions("p").await.unwrap(), 3);
    let ids: Vec<String> = (0..60).map(|i| format!("order:{i}")).collect();
    let jobs = ids
        .iter()
        .map(|id| Job::new("x").id(id.clone()).delay(Duration::from_secs(60)))
        .collect();
    q.enqueue_batch("p", jobs).await.unwrap();
    // Each id lives in the partition it maps to, and nowhere else.
    let parts: HashSet<u32> = ids.iter().map(|id| partition_of(id, 3)).collect();
    assert_eq!(parts.len(), 3, "ids spread over all partitions");
    for id in &ids {
        let home = partition_name("p", partition_of(id, 3), 3);
        let key = format!("punctual:{{{home}}}:jobs");
        assert_eq!(c.cli(&["HEXISTS", &key, id]).unwrap().trim(), "1");
    }
    // Dedup, get, reschedule and cancel by id.
    let dup = q
        .enqueue("p", Job::new("again").id("order:7"))
        .await
        .unwrap();
    assert!(dup.is_duplicate());
    assert_eq!(
        q.get("p", "order:7").await.unwrap().unwrap().state,
        State::Pool
    );
    assert_eq!(
        q.reschedule("p", "order:8", punctual::When::Now)
            .await
            .unwrap(),
        Some(State::Pool)
    );
    assert_eq!(
        q.get("p", "order:8").await.unwrap().unwrap().state,
        State::Ready
    );
    assert_eq!(q.cancel("p", "order:9").await.unwrap(), Some(State::Pool));
    // Generated ids route too.
    let g = q.enqueue("p", Job::new("gen")).await.unwrap();
    assert_eq!(q.get("p", &g.id).await.unwrap().unwrap().payload, b"gen");
    // 60 - order:8 (now ready) - order:9 (cancelled) wait; order:8 and the
    // generated one (due now) are ready.
    let s = q.stats("p").await.unwrap();
    assert_eq!((s.pool, s.ready), (58, 2));
    // Dead letters across partitions.
    for p in 0..3 {
        let name = partition_name("p", p, 3);
        for d in raw::claim(&q, &part(&name), 1000, Duration::from_secs(30))
            .await
            .unwrap()
        {
            raw::fail(&q, &part(&name), &d.lease(), "boom", FailKind::Permanent)
                .await
                .unwrap();
        }
    }
    assert_eq!(q.dead_list("p", 0, 10).await.unwrap().len(), 2);
    assert_eq!(
        q.dead_replay("p", DeadSelector::All).await.unwrap().len(),
        2
    );
    assert!(q.check("p").await.unwrap().is_empty());
    // Pause and resume reach every partition.
    q.pause("p").await.unwrap();
    for p in 0..3 {
        let name = partition_name("p", p, 3);
        assert!(raw::claim(&q, &part(&name), 1000, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty());
    }
    assert!(q.stats("p").await.unwrap().paused);
    q.resume("p").await.unwrap();
    assert!(!q.stats("p").await.unwrap().paused);
    // Changing the count of a topic that holds jobs is refused.
    let err = q.set_partitions("p", 2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("holds"));
    // An id put by hand in the wrong partition is reported.
    let wrong = (0..3)
        .map(|p| partition_name("p", p, 3))
        .find(|n| *n != partition_name("p", partition_of("order:1", 3), 3))
        .unwrap();
    let key = format!("punctual:{{{wrong}}}");
    c.cli(&["HSET", &format!("{key}:jobs"), "order:1", ":1:0::0:x"])
        .unwrap();
    c.cli(&["ZADD", &format!("{key}:pool"), "1", "order:1"])
        .unwrap();
    let v = q.check("p").await.unwrap();
    assert!(
        v.iter()
            .any(|v| v.id == "order:1" && v.problem.contains("maps to partition")),
        "{v:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_ride_out_a_master_failover() {
    let mut c = RedisCluster::start_with_replicas(1);
    let q = connect(&c).await;
    let handled: Arc<Mutex<HashSet<String>>> = Arc::default();
    let stop = CancellationToken::new();
    let sched = spawn_scheduler(&q, &["fo"], &stop);
    let h = handled.clone();
    let w = Worker::new(
        q.clone(),
        WorkerConfig::default().lease(Duration::from_secs(2)),
    )
    .handle("fo", move |d| {
        let h = h.clone();
        async move {
            h.lock().unwrap().insert(d.id.clone());
            Outcome::Done
        }
    });
    let worker = tokio::spawn(w.run(stop.clone().cancelled_owned()));
    let before: Vec<Job> = (0..20)
        .map(|i| Job::new("x").id(format!("before{i}")))
        .collect();
    q.enqueue_batch("fo", before).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "jobs before the failover",
        || async { handled.lock().unwrap().len() == 20 },
    )
    .await;

    // Kill the master of the topic's slot; its replica takes over.
    let master = c.master_of("punctual:{fo}:jobs").unwrap();
    c.kill(master);
    c.wait_ok(Duration::from_secs(30)).unwrap();
    // Producers retry until the cluster answers for the slot again.
    let mut enqueued = Vec::new();
    for i in 0..20 {
        let id = format!("after{i}");
        let mut tries = 0;
        loop {
            match q
                .enqueue(
                    "fo",
                    Job::new("y")
                        .id(id.clone())
                        .delay(Duration::from_millis(100)),
                )
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    tries += 1;
                    assert!(tries < 100, "enqueue never recovered: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        enqueued.push(id);
    }
    // The same worker and scheduler reconnect by themselves and run them.
    eventually(
        Duration::from_secs(30),
        "jobs after the failover",
        || async {
            let h = handled.lock().unwrap();
            enqueued.iter().all(|id| h.contains(id))
        },
    )
    .await;
    eventually(Duration::from_secs(10), "all acked", || async {
        total_live(&q, "fo").await == 0
    })
    .await;
    stop.cancel();
    worker.await.unwrap().unwrap();
    sched.await.unwrap();
    assert!(q.check("fo").await.unwrap().is_empty());
}

/// Topics with jobs missing from `P:topics` are found on every master of a
/// cluster (a SCAN of each), by their logical names; listed topics and
/// topics with settings only are not reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlisted_topics_are_found_on_every_master() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    let names = ["a", "b", "c", "d", "e", "f"];
    for t in names {
        q.enqueue(t, Job::new("x").id("1")).await.unwrap();
    }
    q.set_partitions("split", 3).await.unwrap();
    for i in 0..6 {
        q.enqueue("split", Job::new("p").id(format!("s{i}")))
            .await
            .unwrap();
    }
    q.set_topic_defaults("settings-only", Some(2), None)
        .await
        .unwrap();
    let masters: HashSet<usize> = names
        .iter()
        .map(|t| c.master_of(&format!("punctual:{{{t}}}:jobs")).unwrap())
        .collect();
    assert!(masters.len() > 1, "the topics are spread over masters");
    assert!(q.unlisted_topics(u64::MAX).await.unwrap().topics.is_empty());

    c.cli(&[
        "SREM",
        "punctual:topics",
        "a",
        "c",
        "d",
        "f",
        "split",
        "settings-only",
    ])
    .unwrap();
    let found = q.unlisted_topics(u64::MAX).await.unwrap();
    assert_eq!(found.topics, ["a", "c", "d", "f", "split"]);
    assert!(found.complete);
    // Bounded: with a limit of one key it stops early and says so.
    let cut = q.unlisted_topics(1).await.unwrap();
    assert!(!cut.complete && cut.scanned >= 1, "{cut:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_bulk_cancel_paced_replay_and_topic_deletion_work_across_shards() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    q.set_partitions("p", 3).await.unwrap();
    let ids: Vec<String> = (0..90).map(|i| format!("order:{i:02}")).collect();
    let jobs = ids
        .iter()
        .map(|id| Job::new("x").id(id.clone()).delay(Duration::from_secs(600)))
        .collect();
    q.enqueue_batch("p", jobs).await.unwrap();
    q.enqueue_batch(
        "p",
        vec![Job::new("y").id("user:1").delay(Duration::from_secs(600))],
    )
    .await
    .unwrap();

    // A cursor over every partition (each on its own master or not).
    let (mut seen, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = q
            .list("p", State::Pool, "order:", cursor.as_deref(), 20)
            .await
            .unwrap();
        seen.extend(page.jobs.into_iter().map(|j| j.id));
        match page.cursor {
            Some(cur) => cursor = Some(cur),
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ids);

    // Make ten dead, replay them paced; cancel the rest by prefix.
    for id in &ids[..10] {
        q.reschedule("p", id, punctual::When::Now).await.unwrap();
    }
    let mut dead = 0;
    while dead < 10 {
        let mut claimed = Vec::new();
        for name in q.partition_names("p").await.unwrap() {
            claimed.extend(
                raw::claim(&q, &part(&name), 10, Duration::from_secs(60))
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|d| (name.clone(), d)),
            );
        }
        for (name, d) in claimed {
            assert_eq!(
                raw::fail(&q, &part(&name), &d.lease(), "x", FailKind::Permanent)
                    .await
                    .unwrap(),
                Failed::Dead
            );
            dead += 1;
        }
    }
    let pace = punctual::ReplayPace::Spread(Duration::from_secs(100));
    let replayed = q
        .dead_replay_paced("p", DeadSelector::All, pace, |_| {})
        .await
        .unwrap();
    assert_eq!(replayed.len(), 10);
    let s = q.stats("p").await.unwrap();
    assert_eq!((s.dead, s.pool + s.ready), (0, 91));
    let dry = q.cancel_prefix("p", "order:", true).await.unwrap();
    assert_eq!(dry.len(), 90);
    assert_eq!(
        q.stats("p").await.unwrap().pool + q.stats("p").await.unwrap().ready,
        91
    );
    let done = q.cancel_prefix("p", "order:", false).await.unwrap();
    assert_eq!(done.len(), 90);

    // Deletion: refused while user:1 is there, then every key goes, the
    // schedules' (in the slot of {p}) and each partition's fired key too.
    q.schedule_put(
        "p",
        punctual::schedule::Schedule::every("sweep", Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    for name in q.partition_names("p").await.unwrap() {
        // As a firer leaves it once an occurrence ran (-c: to its node).
        let key = format!("punctual:{{{name}}}:fired");
        let out = c.node(0).cli(&["-c", "ZADD", &key, "1", "sweep@1"]);
        assert_eq!(out.unwrap().trim(), "1");
    }
    assert_eq!(
        q.delete_topic("p").await.unwrap(),
        punctual::TopicDeleted::HoldsJobs(1)
    );
    assert!(q.schedule("p", "sweep").await.unwrap().is_some());
    q.cancel("p", "user:1").await.unwrap();
    assert_eq!(
        q.delete_topic("p").await.unwrap(),
        punctual::TopicDeleted::Deleted
    );
    for node in 0..3 {
        let keys = c
            .node(node)
            .cli(&["--scan", "--pattern", "punctual:{p*"])
            .unwrap();
        assert_eq!(keys.trim(), "", "node {node} still holds {keys}");
    }
    assert!(!q.topics().await.unwrap().contains(&"p".to_string()));
    assert_eq!(q.partitions("p").await.unwrap(), 1);
}

/// The cold pool's keys are not among a script's KEYS (PROTOCOL.md "The
/// cold pool"): while the topic's slot migrates, a script fails at the
/// first one not on the node. Every script writes them first, so the
/// failure writes nothing: here an enqueue of a far job, whose record
/// would otherwise be left in no set and in no bucket (lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_fails_a_cold_placement_before_it_writes_anything() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    let t = "mig";
    let p: punctual::raw::Partition = t.parse().unwrap();
    // Every one of the nine keys exists on the source, so the node runs the
    // script (it answers ASK or TRYAGAIN when a declared key is missing).
    let limits = punctual::raw::TickLimits {
        promote_batch: 1000,
        max_ready: 1_000_000,
        reclaim_batch: 1000,
    };
    punctual::raw::tick(&q, &p, &limits).await.unwrap();
    for id in ["run", "die", "wait"] {
        q.enqueue(t, Job::new("x").id(id)).await.unwrap();
    }
    q.enqueue(t, Job::new("x").id("soon").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let got = punctual::raw::claim(&q, &p, 2, Duration::from_secs(60))
        .await
        .unwrap();
    let die = got.iter().find(|d| d.id == "die").expect("die claimed");
    punctual::raw::fail(
        &q,
        &p,
        &die.lease(),
        "x",
        punctual::raw::FailKind::Permanent,
    )
    .await
    .unwrap();
    let key = |n: &str| format!("punctual:{{{t}}}:{n}");
    let names = [
        "pool", "ready", "running", "dead", "jobs", "meta", "stats", "seq", "attempts",
    ];
    let src = c.master_of(&key("jobs")).unwrap();
    let dst = (src + 1) % 3;
    let id_of = |i: usize| {
        c.node(i)
            .cli(&["CLUSTER", "MYID"])
            .unwrap()
            .trim()
            .to_string()
    };
    let (src_id, dst_id) = (id_of(src), id_of(dst));
    for n in names {
        assert_eq!(
            c.node(src).cli(&["EXISTS", &key(n)]).unwrap().trim(),
            "1",
            "{n}"
        );
    }
    let slot = c.keyslot(&key("jobs")).unwrap().to_string();
    c.node(dst)
        .cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])
        .unwrap();
    c.node(src)
        .cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])
        .unwrap();

    let script = punctual::internal::script_source("enqueue").unwrap();
    let mut args: Vec<String> = vec!["EVAL".into(), script, "9".into()];
    args.extend(names.iter().map(|n| key(n)));
    for a in ["1048576", "0", "1", "far", "x", "d7200000", "", ""] {
        args.push(a.to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = c.node(src).cli(&args).unwrap_or_else(|e| e);
    assert!(
        out.contains("non local key") || out.contains("ERR") || out.contains("ASK"),
        "the script must fail on the cold keys: {out}"
    );
    // Nothing was written: no record of "far", and the others as before.
    assert_eq!(
        c.node(src)
            .cli(&["HEXISTS", &key("jobs"), "far"])
            .unwrap()
            .trim(),
        "0"
    );
    assert_eq!(
        c.node(src).cli(&["HLEN", &key("jobs")]).unwrap().trim(),
        "4"
    );

    for i in [src, dst] {
        c.node(i)
            .cli(&["CLUSTER", "SETSLOT", &slot, "STABLE"])
            .unwrap();
    }
    // After the migration is called off, the same enqueue places it cold.
    q.enqueue(t, Job::new("x").id("far").delay(Duration::from_secs(7200)))
        .await
        .unwrap();
    assert_eq!(q.get(t, "far").await.unwrap().unwrap().state, State::Pool);
    assert_eq!(
        c.node(src)
            .cli(&["ZSCORE", &key("pool"), "far"])
            .unwrap()
            .trim(),
        ""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_cancelled_in_flight_on_every_shard() {
    let c = RedisCluster::start();
    let q = connect(&c).await;
    // Topics on every master, and a partitioned one.
    q.set_partitions("hot", 3).await.unwrap();
    let topics = ["a", "b", "c", "d", "e", "f", "hot"];
    let masters: HashSet<usize> = topics[..6]
        .iter()
        .map(|t| c.master_of(&format!("punctual:{{{t}}}:jobs")).unwrap())
        .collect();
    assert_eq!(masters.len(), 3, "the topics cover every master");
    for t in topics {
        q.enqueue(t, Job::new("x").id(format!("{t}-1")))
            .await
            .unwrap();
    }
    // Handlers that end only when told: the lease (a minute) is not what
    // stops them.
    let heard: Arc<Mutex<HashSet<String>>> = Arc::default();
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let stop = CancellationToken::new();
    let mut worker = Worker::new(
        q.clone(),
        WorkerConfig::default()
            .concurrency(16)
            .lease(Duration::from_secs(60)),
    );
    for t in topics {
        let (heard, running) = (heard.clone(), running.clone());
        worker = worker.handle_with_timeout(t, Duration::from_secs(120), move |job| {
            let (heard, running) = (heard.clone(), running.clone());
            async move {
                running.lock().unwrap().insert(job.id.clone());
                job.cancelled.cancelled().await;
                heard.lock().unwrap().insert(job.id.clone());
                Outcome::Done
            }
        });
    }
    let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
    eventually(Duration::from_secs(20), "every job running", async || {
        running.lock().unwrap().len() == topics.len()
    })
    .await;
    // The operator connects through one node only.
    let operator = Queue::connect(c.urls()[2].clone()).await.unwrap();
    for t in topics {
        let was = operator.cancel(t, &format!("{t}-1")).await.unwrap();
        assert_eq!(was, Some(State::Running), "{t}");
    }
    eventually(
        Duration::from_secs(20),
        "every handler heard its cancel",
        async || heard.lock().unwrap().len() == topics.len(),
    )
    .await;
    stop.cancel();
    assert_eq!(w.await.unwrap().unwrap().abandoned, 0);
    for t in topics {
        let s = q.stats(t).await.unwrap();
        assert_eq!(s.pool + s.ready + s.running + s.dead, 0, "{t}: {s:?}");
        let n = |k: &str| s.counters.get(k).copied().unwrap_or(0);
        assert_eq!(
            (n("cancelled"), n("done"), n("retried")),
            (1, 0, 0),
            "{t}: {s:?}"
        );
    }
}
