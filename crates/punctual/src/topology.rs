//! What a Redis says about its layout, parsed: `CLUSTER NODES` and `INFO`
//! replies, and the URL of another node of a cluster. No connections: a
//! leaf that `conn.rs`, `unlisted.rs` and `nodes.rs` share (re-exported as
//! [`crate::internal::nodes`]).

use std::collections::HashMap;

/// One line of a `CLUSTER NODES` reply (see [`parse_cluster_nodes`]).
///
/// ```
/// let nodes = punctual::internal::nodes::parse_cluster_nodes(
///     "2920 10.0.0.4:7003@17003 slave 07c3 0 1 2 connected",
/// );
/// assert!(!nodes[0].master && !nodes[0].failed && nodes[0].slots.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterNode {
    /// `host:port` (the cluster bus port and hostname left out).
    pub addr: String,
    /// Flagged `master`.
    pub master: bool,
    /// Flagged `fail`, `fail?`, `noaddr` or `handshake`: not to be used.
    pub failed: bool,
    /// The slot ranges it serves, inclusive (empty for a replica).
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    /// Whether it serves `slot`.
    ///
    /// ```
    /// let n = &punctual::internal::nodes::parse_cluster_nodes(
    ///     "07c3 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460",
    /// )[0];
    /// assert!(n.serves(5460) && !n.serves(5461));
    /// ```
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
    }

    /// The host and port of [`ClusterNode::addr`].
    ///
    /// ```
    /// let n = &punctual::internal::nodes::parse_cluster_nodes(
    ///     "07c3 10.0.0.1:7000@17000 master - 0 0 1 connected 0-16383",
    /// )[0];
    /// assert_eq!(n.host_port(), Some(("10.0.0.1", 7000)));
    /// ```
    pub fn host_port(&self) -> Option<(&str, u16)> {
        let (host, port) = self.addr.rsplit_once(':')?;
        (!host.is_empty()).then_some(())?;
        Some((host, port.parse().ok()?))
    }
}

/// Parses a `CLUSTER NODES` reply; lines that are not a node are left out.
///
/// ```
/// let text = "\
/// 07c3 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460
/// 2920 127.0.0.1:7104@17104,host2 slave 07c3 0 1 2 connected
/// 9d2a 127.0.0.1:7103@17103 master,fail - 0 1 3 disconnected 10923-16383
/// ";
/// let nodes = punctual::internal::nodes::parse_cluster_nodes(text);
/// assert_eq!(nodes[0].addr, "127.0.0.1:7101");
/// assert_eq!(nodes[0].slots, vec![(0, 5460)]);
/// assert!(!nodes[1].master && nodes[1].addr == "127.0.0.1:7104");
/// assert!(nodes[2].failed);
/// ```
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            // ip:port@cport[,hostname]
            let addr = f[1].split(['@', ',']).next()?.to_string();
            let flags: Vec<&str> = f[2].split(',').collect();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|x| (x, x)),
                })
                .collect();
            Some(ClusterNode {
                addr,
                master: flags.contains(&"master"),
                failed: flags
                    .iter()
                    .any(|x| matches!(*x, "fail" | "fail?" | "noaddr" | "handshake")),
                slots,
            })
        })
        .collect()
}

/// Parses an `INFO` reply into field -> value (section headers left out).
///
/// ```
/// let info = punctual::internal::nodes::parse_info(
///     "# Server\r\nredis_version:7.2.4\r\ncmdstat_get:calls=3,usec=9\r\n",
/// );
/// assert_eq!(info["redis_version"], "7.2.4");
/// assert_eq!(info["cmdstat_get"], "calls=3,usec=9");
/// ```
pub fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `url` with its host:port replaced by `hostport`, its scheme,
/// credentials and database kept: the URL of another node of a cluster.
///
/// ```
/// use punctual::internal::nodes::node_url;
/// assert_eq!(
///     node_url("redis://u:p@10.0.0.1:7000/0", "10.0.0.2:7001").as_deref(),
///     Some("redis://u:p@10.0.0.2:7001/0")
/// );
/// ```
pub fn node_url(url: &str, hostport: &str) -> Option<String> {
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
    use super::*;

    #[test]
    fn cluster_nodes_give_masters_and_their_slots() {
        let text = "\
07c3 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460
67ed 127.0.0.1:7102@17102,host2 master - 0 1 2 connected 5461-10922 12000 [12001->-abc]
2920 127.0.0.1:7104@17104 slave 67ed 0 1 2 connected
9d2a 127.0.0.1:7103@17103 master,fail - 0 1 3 disconnected 10923-16383
";
        let n = parse_cluster_nodes(text);
        assert_eq!(n.len(), 4);
        assert_eq!(
            n[0],
            ClusterNode {
                addr: "127.0.0.1:7101".into(),
                master: true,
                failed: false,
                slots: vec![(0, 5460)]
            }
        );
        assert_eq!(n[1].addr, "127.0.0.1:7102");
        assert_eq!(n[1].slots, vec![(5461, 10922), (12000, 12000)]);
        assert!(!n[2].master && n[2].slots.is_empty());
        assert!(n[3].failed);
        assert_eq!(n[1].host_port(), Some(("127.0.0.1", 7102)));
    }

    #[test]
    fn host_and_port_are_replaced_keeping_credentials() {
        assert_eq!(
            node_url("redis://u:p@10.0.0.1:7000/0", "10.0.0.2:7001").as_deref(),
            Some("redis://u:p@10.0.0.2:7001/0")
        );
        assert_eq!(
            node_url("redis://127.0.0.1:7000", "127.0.0.1:7002").as_deref(),
            Some("redis://127.0.0.1:7002")
        );
    }
}
