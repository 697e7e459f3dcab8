//! The connection to Redis: one node (a reconnecting multiplexed connection)
//! or a Redis Cluster (slot-aware, following MOVED/ASK and failovers). Only
//! this module, `nodes.rs` (a plain connection per node, for admin work)
//! and `wake.rs` open connections.
//!
//! No call that must not run twice is ever sent twice by the client. The
//! single-node `ConnectionManager` never resends a command (it reconnects
//! and returns the error). The cluster client resends a command after any
//! error, also after a dropped connection or a timeout, when the command
//! may have run: fine for the calls that may run twice (fenced `ack`,
//! `fail` and `extend`, `tick`, reads, `reschedule`, `dead_replay` and
//! `dead_purge` by ids, `enqueue` of jobs that all carry an id), wrong for
//! `claim` (a resent claim leases more jobs to nobody, each losing an
//! attempt), for `cancel` (a resent one reports "no such job" for the job
//! it cancelled) and for `enqueue` of a job without an id or with replace
//! (a resent one is a second job). Those go over a second cluster
//! connection without automatic resends, and are resent here only after an
//! error that proves Redis did not run them (see `did_not_run`).
//!
//! Each operation's file in `ops/` owns its rule (`ops::must_not_repeat`
//! lists the scripts in this second group), which whoever connects hands in
//! as a [`ResendRule`]: this module knows no operation. A script that is
//! safe to resend must stay so. The `"oldest", n` mode of
//! `dead_replay` and `dead_purge` is not (a second run takes the next n), so
//! `Queue` never sends it: it reads the oldest ids and sends those.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    Arg, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use crate::error::{Error, Result};
use crate::topology::{node_url, parse_cluster_nodes, ClusterNode};

/// A connection to one Redis or to a cluster; cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster {
        /// Follows redirections and failovers by itself, resending a command
        /// after any error: for everything that may run twice.
        retrying: ClusterConnection,
        /// Resends nothing by itself: for the scripts that must not run
        /// twice (`must_not_repeat`), resent by `send_once` only.
        once: ClusterConnection,
        /// Which script calls go over `once`.
        rule: ResendRule,
    },
}

/// Whether a call of the script whose SHA is the first argument could do
/// harm if it ran twice, given its ARGV (None when the call does not parse:
/// then it counts as unsafe). The operations own it: `ops::must_not_repeat`.
pub(crate) type ResendRule = fn(&[u8], Option<&[&[u8]]>) -> bool;

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster { once, rule, .. } if must_not_repeat(cmd, *rule) => {
                Box::pin(send_once(once.clone(), cmd))
            }
            Conn::Cluster { retrying, .. } => retrying.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster { retrying, .. } => retrying.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster { retrying, .. } => retrying.get_db(),
        }
    }
}

/// Whether running `cmd` twice could do harm: an `EVALSHA` of a script
/// whose operation says so by `rule` (`crate::ops::must_not_repeat`: a
/// `claim`, a `cancel`, an `enqueue` of a job without an id or with replace).
pub(crate) fn must_not_repeat(cmd: &Cmd, rule: ResendRule) -> bool {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .map(|a| match a {
            Arg::Simple(a) => a,
            _ => &[][..],
        })
        .collect();
    let Some(name) = args.first() else {
        return false;
    };
    if !name.eq_ignore_ascii_case(b"EVALSHA") || args.len() < 3 {
        return false;
    }
    let num = |a: &[u8]| std::str::from_utf8(a).ok()?.parse::<usize>().ok();
    let argv = num(args[2]).and_then(|k| args.get(3 + k..));
    rule(args[1], argv)
}

/// Whether Redis certainly did not run the command that failed with `e`:
/// it was refused before it ran (a redirect, a cluster or a replica not
/// ready), or it was never sent (no connection).
fn did_not_run(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        ) | ErrorKind::ClusterConnectionNotFound
    ) || e.is_connection_refusal()
}

/// Sends `cmd` over the connection without automatic resends, and resends it
/// (with backoff, a few times) only while Redis certainly did not run it.
/// Any other error is returned: the command may or may not have run.
async fn send_once(mut conn: ClusterConnection, cmd: &Cmd) -> RedisResult<Value> {
    let mut backoff = Duration::from_millis(50);
    for _ in 0..6 {
        match conn.req_packed_command(cmd).await {
            Err(e) if did_not_run(&e) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            r => return r,
        }
    }
    conn.req_packed_command(cmd).await
}

/// What `connect` made: the connection, the nodes a pub/sub listener
/// may subscribe on (any node of a cluster sees every PUBLISH), and a
/// cluster's `CLUSTER NODES` (empty for a single Redis).
pub(crate) struct Connected {
    pub conn: Conn,
    pub pubsub: Vec<redis::Client>,
    pub cluster: bool,
    pub nodes: Vec<ClusterNode>,
}

fn open(url: &str) -> Result<redis::Client> {
    redis::Client::open(url).map_err(|e| {
        Error::invalid(format!(
            "invalid Redis URL {:?}: {e} (expected redis://[user:password@]host:port[/db] or rediss://...; several comma-separated URLs for a cluster)",
            crate::redact::redact(url)
        ))
    })
}

/// Connects to `url`: several comma-separated URLs are the seeds of a
/// cluster; a single URL is a cluster too when that node says so. `rule`
/// picks the calls that a cluster connection must not resend blindly.
pub(crate) async fn connect(
    url: &str,
    connect_timeout: Duration,
    response_timeout: Duration,
    rule: ResendRule,
) -> Result<Connected> {
    // Split only before a scheme, as `redact` does: a ',' may be in a password.
    let urls: Vec<&str> = crate::redact::split_seeds(url);
    if urls.is_empty() {
        return Err(Error::invalid("empty Redis URL"));
    }
    let clients = urls.iter().map(|u| open(u)).collect::<Result<Vec<_>>>()?;
    if urls.len() == 1 {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let mut single = ConnectionManager::new_with_config(clients[0].clone(), config)
            .await
            .map_err(Error::Redis)?;
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut single)
            .await
            .map_err(Error::Redis)?;
        if !info.contains("cluster_enabled:1") {
            return Ok(Connected {
                conn: Conn::Single(single),
                pubsub: clients,
                cluster: false,
                nodes: Vec::new(),
            });
        }
    }
    let client = |retries: u32| {
        ClusterClientBuilder::new(urls.clone())
            .connection_timeout(connect_timeout)
            .response_timeout(response_timeout)
            .retries(retries)
            .build()
            .map_err(|e| Error::invalid(format!("invalid cluster URLs: {e}")))
    };
    let mut conn = client(6)?
        .get_async_connection()
        .await
        .map_err(Error::Redis)?;
    let once = client(0)?
        .get_async_connection()
        .await
        .map_err(Error::Redis)?;
    // Subscribe on any node: the seeds, then every node the cluster knows.
    let mut pubsub = clients;
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(Error::Redis)?;
    let nodes = parse_cluster_nodes(&text);
    for n in &nodes {
        if let Some(u) = node_url(urls[0], &n.addr) {
            if !urls.iter().any(|s| s.contains(&n.addr)) {
                if let Ok(c) = redis::Client::open(u.as_str()) {
                    pubsub.push(c);
                }
            }
        }
    }
    Ok(Connected {
        conn: Conn::Cluster {
            retrying: conn,
            once,
            rule,
        },
        pubsub,
        cluster: true,
        nodes,
    })
}
