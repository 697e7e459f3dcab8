//! The connection to Redis: one node (a reconnecting multiplexed connection)
//! or a Redis Cluster (slot-aware, following MOVED/ASK and failovers). Only
//! this module and `wake.rs` open connections.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::{Error, Result};

/// A connection to one Redis or to a cluster; cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
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
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// What `connect` made: the connection, and the nodes a pub/sub listener
/// may subscribe on (any node of a cluster sees every PUBLISH).
pub(crate) struct Connected {
    pub conn: Conn,
    pub pubsub: Vec<redis::Client>,
    pub cluster: bool,
}

fn open(url: &str) -> Result<redis::Client> {
    redis::Client::open(url).map_err(|e| {
        Error::invalid(format!(
            "invalid Redis URL {:?}: {e} (expected redis://[user:password@]host:port[/db] or rediss://...; several comma-separated URLs for a cluster)",
            crate::queue::redact(url)
        ))
    })
}

/// Connects to `url`: several comma-separated URLs are the seeds of a
/// cluster; a single URL is a cluster too when that node says so.
pub(crate) async fn connect(
    url: &str,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Connected> {
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
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
            });
        }
    }
    let cluster = ClusterClientBuilder::new(urls.clone())
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .retries(6)
        .build()
        .map_err(|e| Error::invalid(format!("invalid cluster URLs: {e}")))?;
    let mut conn = cluster.get_async_connection().await.map_err(Error::Redis)?;
    // Subscribe on any node: the seeds, then every node the cluster knows.
    let mut pubsub = clients;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(Error::Redis)?;
    for line in nodes.lines() {
        let Some(addr) = line.split_whitespace().nth(1) else {
            continue;
        };
        let hostport = addr.split('@').next().unwrap_or(addr);
        if let Some(u) = with_hostport(urls[0], hostport) {
            if !urls.iter().any(|s| s.contains(hostport)) {
                if let Ok(c) = redis::Client::open(u.as_str()) {
                    pubsub.push(c);
                }
            }
        }
    }
    Ok(Connected {
        conn: Conn::Cluster(conn),
        pubsub,
        cluster: true,
    })
}

/// `url` with its host:port replaced (scheme and credentials kept).
fn with_hostport(url: &str, hostport: &str) -> Option<String> {
    let start = url.find("://")? + 3;
    let auth_end = url[start..]
        .rfind('@')
        .map(|i| start + i + 1)
        .unwrap_or(start);
    let rest = &url[auth_end..];
    let end = rest.find('/').map(|i| auth_end + i).unwrap_or(url.len());
    Some(format!("{}{hostport}{}", &url[..auth_end], &url[end..]))
}

#[cfg(test)]
mod tests {
    use super::with_hostport;

    #[test]
    fn host_and_port_are_replaced_keeping_credentials() {
        assert_eq!(
            with_hostport("redis://u:p@10.0.0.1:7000/0", "10.0.0.2:7001").as_deref(),
            Some("redis://u:p@10.0.0.2:7001/0")
        );
        assert_eq!(
            with_hostport("redis://127.0.0.1:7000", "127.0.0.1:7002").as_deref(),
            Some("redis://127.0.0.1:7002")
        );
    }
}
