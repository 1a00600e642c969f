//! The Sentinel deployment's Redis: a primary and one or two replicas (all with AOF) watched by
//! three sentinels (quorum 2), the two faults that move the primary, and the faults on a
//! replica.
//!
//! Why three sentinels: with one, a failover needs no agreement and the test would not see
//! the election a production deployment goes through (subjective then objective down, a
//! leader voted by a majority). Each node and sentinel runs from its own config file, which
//! the sentinels rewrite on every failover (`CONFIG REWRITE`), so a node restarted after a
//! kill comes back with the role the sentinels last gave it, as under a supervisor.
//!
//! - **kill -9 of the primary**: the sentinels see it down after 1 s, agree, and promote the
//!   replica; the old primary restarts a few seconds later and is turned into a replica of
//!   the new one. The replica is asynchronous: writes the primary acknowledged but had not
//!   yet sent can be lost; `seckill chaos` measures how many answered wins that costs.
//! - **`SENTINEL FAILOVER`**: the graceful hand-over an operator starts (maintenance, an
//!   upgrade). It must lose nothing.
//! - **a replica** killed -9, frozen (SIGSTOP: it lags, then catches up), or cut off (its
//!   replication link dropped every 100 ms). With one replica and the default
//!   `--redis-wait-replicas 1`, nothing can be sold or confirmed meanwhile; with two, the
//!   other one acknowledges.
//!
//! After each, the fault waits until the topology settled (the sentinels agree on a primary,
//! every other node replicates from it with its link up, and the sentinels list each as a
//! healthy replica), so the next fault of the schedule again has a replica to promote.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::schedule::Target;
use super::servers::Fsync;
use super::servers::{fsync_name, node_conn};
use crate::testing::process::Spec;
use crate::testing::servers::conf_spec;

/// The name the sentinels know the primary by.
pub const MASTER: &str = "seckill";

/// Longest a fault waits for the topology to settle afterwards.
pub(super) const SETTLE: Duration = Duration::from_secs(40);

/// Ports of the Redis nodes (two or three) and the three sentinels.
#[derive(Debug, Clone)]
pub struct Ports {
    pub nodes: Vec<u16>,
    pub sentinels: [u16; 3],
}

impl Ports {
    /// The `--redis` value of `serve` and `worker`: every sentinel.
    pub fn urls(&self) -> String {
        let urls: Vec<String> = self
            .sentinels
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect();
        urls.join(",")
    }

    fn node_of(&self, port: u16) -> Option<u8> {
        self.nodes.iter().position(|&p| p == port).map(|i| i as u8)
    }
}

/// The processes of the Sentinel deployment's Redis, node 0 the first primary.
pub fn specs(
    root: &Path,
    ports: &Ports,
    fsync: Fsync,
    log: impl Fn(&str) -> std::path::PathBuf,
) -> anyhow::Result<Vec<(Target, Spec)>> {
    let fsync = fsync_name(fsync);
    let primary = ports.nodes[0];
    let mut out = Vec::new();
    for (i, port) in ports.nodes.iter().enumerate() {
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {{dir}}\nappendonly yes\n\
             appendfsync {fsync}\nsave \"\"\nmaxmemory-policy noeviction\n\
             repl-diskless-sync-delay 0\n"
        );
        if i > 0 {
            conf.push_str(&format!("replicaof 127.0.0.1 {primary}\n"));
        }
        let name = format!("redis-{i}");
        let spec = conf_spec(root, &name, ("redis.conf", conf), &[], log(&name))?;
        out.push((Target::Node(i as u8), spec));
    }
    for (i, port) in ports.sentinels.iter().enumerate() {
        let conf = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {{dir}}\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 5000\n\
             sentinel parallel-syncs {MASTER} 1\n"
        );
        let name = format!("sentinel-{i}");
        let spec = conf_spec(
            root,
            &name,
            ("sentinel.conf", conf),
            &["--sentinel"],
            log(&name),
        )?;
        out.push((Target::Sentinel(i as u8), spec));
    }
    Ok(out)
}

/// The primary's port as sentinel `port` names it.
async fn named_by(port: u16) -> anyhow::Result<u16> {
    let mut c = node_conn(port).await?;
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER)
        .query_async(&mut c)
        .await?;
    Ok(addr.context("the sentinel knows no primary")?.1)
}

/// The node a majority of the sentinels name the primary.
pub async fn primary(ports: &Ports) -> Option<u8> {
    let mut votes = vec![0usize; ports.nodes.len()];
    for &s in &ports.sentinels {
        if let Some(i) = named_by(s).await.ok().and_then(|p| ports.node_of(p)) {
            votes[i as usize] += 1;
        }
    }
    (0..ports.nodes.len() as u8).find(|&i| votes[i as usize] >= 2)
}

/// `INFO replication` of a node, as `field:value` lines.
async fn replication(port: u16) -> anyhow::Result<String> {
    let mut c = node_conn(port).await?;
    Ok(redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut c)
        .await?)
}

/// Whether the topology is whole: the sentinels agree on a primary that says so, every other
/// node replicates from it with its link up, and a majority of the sentinels see each of
/// them as a healthy replica.
pub async fn settled(ports: &Ports) -> Option<u8> {
    let p = primary(ports).await?;
    let info = replication(ports.nodes[p as usize]).await.ok()?;
    if !info.contains("role:master") {
        return None;
    }
    let expect = format!("master_port:{}", ports.nodes[p as usize]);
    let others: Vec<u16> = replicas_of(ports, p);
    for &other in &others {
        let info = replication(other).await.ok()?;
        if !(info.contains("role:slave")
            && info.contains(&expect)
            && info.contains("master_link_status:up"))
        {
            return None;
        }
    }
    let mut healthy = vec![0usize; others.len()];
    for &s in &ports.sentinels {
        let Ok(mut c) = node_conn(s).await else {
            continue;
        };
        let listed: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("replicas")
            .arg(MASTER)
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        for (n, other) in others.iter().enumerate() {
            let port = other.to_string();
            if listed.iter().any(|r| {
                r.get("port") == Some(&port)
                    && r.get("flags").map(String::as_str) == Some("slave")
                    && r.get("master-link-status").map(String::as_str) == Some("ok")
            }) {
                healthy[n] += 1;
            }
        }
    }
    healthy.iter().all(|&h| h >= 2).then_some(p)
}

/// The ports of every node but the primary `p`.
fn replicas_of(ports: &Ports, p: u8) -> Vec<u16> {
    (0..ports.nodes.len())
        .filter(|&i| i != p as usize)
        .map(|i| ports.nodes[i])
        .collect()
}

/// Waits until [`settled`]; the primary then.
pub async fn settle(ports: &Ports) -> anyhow::Result<u8> {
    let deadline = Instant::now() + SETTLE;
    loop {
        if let Some(p) = settled(ports).await {
            return Ok(p);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Sentinel topology did not settle in {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
