//! Private `redis-server` processes for tests: each on a free port, in its own
//! temp dir, stopped on drop. Tests can kill, pause and restart them.
//!
//! - [`RedisServer`]: one standalone server.
//! - [`RedisCluster`]: a local Redis Cluster (3 masters by default, optionally
//!   with replicas), joined with `redis-cli --cluster create`.
//! - [`eventually`]: wait in an async test until a condition holds.
//!
//! punctual's own tests use it, and so can a program that uses punctual, for
//! its own integration tests: add `punctual-testkit` as a dev-dependency
//! (it needs `redis-server` and `redis-cli` on the `PATH`, and never touches
//! a Redis it did not start). A test of a handler, end to end:
//!
//! ```ignore
//! use std::time::Duration;
//! use punctual::{CancellationToken, Job, Outcome, Queue, Scheduler, SchedulerConfig, Worker, WorkerConfig};
//! use punctual_testkit::{eventually, RedisServer};
//!
//! #[tokio::test]
//! async fn an_order_is_closed() {
//!     let redis = RedisServer::start(); // stopped when dropped
//!     let queue = Queue::connect(redis.url()).await.unwrap();
//!     queue.enqueue("orders", Job::new("42")).await.unwrap();
//!     let stop = CancellationToken::new();
//!     let scheduler = Scheduler::new(queue.clone(), SchedulerConfig::default()).topic("orders");
//!     let worker = Worker::new(queue.clone(), WorkerConfig::default())
//!         .handle("orders", |_job| async { Outcome::Done });
//!     let s = tokio::spawn(scheduler.run(stop.clone().cancelled_owned()));
//!     let w = tokio::spawn(worker.run(stop.clone().cancelled_owned()));
//!     eventually(Duration::from_secs(10), "the job is done", async || {
//!         let s = queue.stats("orders").await.unwrap();
//!         s.pool + s.ready + s.running + s.dead == 0
//!     })
//!     .await;
//!     stop.cancel();
//!     s.await.unwrap().unwrap();
//!     w.await.unwrap().unwrap();
//! }
//! ```
//!
//! (The same test runs as a doc test of `punctual::Worker`.)
//!
//! The servers themselves, with `redis-cli`:
//!
//! ```
//! use punctual_testkit::RedisServer;
//! let mut redis = RedisServer::start();
//! assert_eq!(redis.cli(&["SET", "greeting", "hello"]).unwrap().trim(), "OK");
//! assert_eq!(redis.cli(&["GET", "greeting"]).unwrap().trim(), "hello");
//! redis.kill(); // an outage
//! assert!(redis.cli(&["PING"]).is_err());
//! redis.restart(); // persistence is off: the data is gone
//! assert_eq!(redis.cli(&["EXISTS", "greeting"]).unwrap().trim(), "0");
//! ```

mod cluster;
mod eventually;
mod server;

pub use cluster::{ClusterBuilder, RedisCluster, CLUSTER_SLOTS};
pub use eventually::{eventually, eventually_every};
pub use server::{free_port, RedisServer, MAKE_COLD_LUA, POOL_JOBS_LUA};
