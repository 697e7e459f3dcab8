//! `punctual::internal::nodes`: every node behind a URL, per-node `INFO` and the
//! deletion of one prefix's keys (and only those), on one Redis and on a
//! cluster.

use std::time::Duration;

use punctual::internal::nodes::Nodes;
use punctual::internal::TopicKeys;
use punctual::{Job, Queue};
use punctual_testkit::{RedisCluster, RedisServer};
use redis::AsyncCommands;

const T: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_redis_is_one_master_and_only_the_matching_keys_go() {
    let server = RedisServer::start();
    let nodes = Nodes::connect(&server.url(), T, T).await.unwrap();
    assert!(!nodes.is_cluster());
    assert_eq!(nodes.masters().len(), 1);
    assert!(nodes.replicas().is_empty());
    assert_eq!(
        nodes.masters()[0].addr(),
        format!("127.0.0.1:{}", server.port())
    );
    let info = nodes.masters()[0].info(&["server"]).await.unwrap();
    assert!(info.contains_key("redis_version"), "{info:?}");

    let mut keyed = nodes.keyed();
    for i in 0..2500 {
        let _: () = keyed.set(format!("scratch:{i}"), i).await.unwrap();
    }
    let _: () = keyed.set("other:1", 1).await.unwrap();
    assert_eq!(nodes.delete_matching("scratch:*").await.unwrap(), 2500);
    let left: Vec<String> = keyed.keys("*").await.unwrap();
    assert_eq!(left, vec!["other:1".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_gives_every_master_and_replica_and_deletes_on_each() {
    let c = RedisCluster::start_with_replicas(1);
    let nodes = Nodes::connect(&c.urls()[0], T, T).await.unwrap();
    assert!(nodes.is_cluster());
    assert_eq!(nodes.masters().len(), 3);
    assert_eq!(nodes.replicas().len(), 3);
    let served: u32 = nodes
        .masters()
        .iter()
        .flat_map(|m| m.slots())
        .map(|(a, b)| u32::from(*b) - u32::from(*a) + 1)
        .sum();
    assert_eq!(served, 16384);

    // Jobs of topics on every master, under two prefixes.
    let q = Queue::builder(c.seed_urls())
        .prefix("scratch")
        .connect()
        .await
        .unwrap();
    let keep = Queue::builder(c.seed_urls())
        .prefix("keep")
        .connect()
        .await
        .unwrap();
    for t in ["a", "b", "c", "d", "e", "f"] {
        q.enqueue(t, Job::new("x").id("1")).await.unwrap();
        keep.enqueue(t, Job::new("x").id("1")).await.unwrap();
    }
    let mut keyed = nodes.keyed();
    let jobs = TopicKeys::new("scratch", "a");
    assert!(keyed.exists::<_, bool>(jobs.jobs()).await.unwrap());
    assert!(nodes.delete_matching("scratch:*").await.unwrap() >= 12);
    for m in nodes.masters() {
        let mut conn = m.conn();
        let left: Vec<String> = conn.keys("*").await.unwrap();
        assert!(
            left.iter().all(|k| k.starts_with("keep:")),
            "{}: {left:?}",
            m.addr()
        );
    }
    assert_eq!(keep.topics().await.unwrap().len(), 6);
    assert!(!keyed.exists::<_, bool>(jobs.jobs()).await.unwrap());
}
