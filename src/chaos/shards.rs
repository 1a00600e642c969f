//! The Cluster deployment's Redis: three masters, each with one replica (all AOF), created
//! with `redis-cli --cluster create --cluster-replicas 1`, and the two faults that move a
//! master.
//!
//! Why a replica per master and a node timeout of 1 s: a Cluster master that dies is replaced
//! by its replica once the other masters agree it is down (`cluster-node-timeout`), which is
//! the failover a production Cluster goes through; without a replica its slots are simply
//! unavailable until it is back. Each node keeps its `nodes.conf` across restarts, so a killed
//! master comes back, learns that its replica was promoted (a higher config epoch), and turns
//! itself into that replica's replica, as under a supervisor.
//!
//! - **kill -9 of the master serving the campaign's slot**: the replica is promoted after about
//!   the node timeout; the old master restarts after the fault's hold. Replication is
//!   asynchronous and seckill cannot wait for it on a Cluster (docs/SCALE_OUT.md), so the
//!   promoted replica may miss the last writes the master answered: the fault reports a
//!   [`Window`](super::rewind::Window) of decisions it may take back (the last second before the kill), which the
//!   checker treats as it treats a snapshot restore. Everything answered *after* the
//!   promotion must hold. A replica on loopback is rarely more than a few bytes behind, so the
//!   fault also comes with the replica frozen (SIGSTOP) 100–800 ms before the kill and thawed
//!   with it: the replica promoted is then surely behind what the master answered, as a
//!   replica on a congested link or a slow disk is.
//! - **`CLUSTER FAILOVER`** on that replica: the graceful hand-over an operator starts (the
//!   master stops writes until the replica caught up). It must lose nothing.
//!
//! After each, the fault waits until the topology settled (every node up and `cluster_state:
//! ok`, three masters each with a connected replica whose link is up), so the next fault of
//! the schedule again has a replica to promote.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::schedule::Target;
use super::servers::Fsync;
use super::servers::{fsync_name, node_conn};
use crate::testing::process::Spec;
use crate::testing::servers::conf_spec;

/// Nodes of the deployment: three masters and a replica of each.
pub const NODES: usize = 6;

/// Longest a fault waits for the topology to settle afterwards.
pub(super) const SETTLE: Duration = Duration::from_secs(40);

/// How far behind its master a replica can be when the master is killed: the decisions of
/// requests answered this long before the kill may be missing from the promoted replica.
/// (Replication over loopback lags by milliseconds; the margin covers a loaded machine.)
pub(super) const LAG_BOUND: Duration = Duration::from_secs(1);

/// One node as `CLUSTER NODES` lists it.
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) id: String,
    pub(super) port: u16,
    master: bool,
    /// The master's id, for a replica.
    pub(super) of: Option<String>,
    healthy: bool,
    slots: bool,
}

/// The processes of the Cluster's six nodes.
pub fn specs(
    root: &Path,
    ports: &[u16],
    fsync: Fsync,
    log: impl Fn(&str) -> PathBuf,
) -> anyhow::Result<Vec<(Target, Spec)>> {
    let fsync = fsync_name(fsync);
    let mut out = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        // `cluster-replica-validity-factor 0`: a replica is promoted however long its link was
        // down before, as a deployment that prefers availability configures it.
        let conf = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {{dir}}\nappendonly yes\n\
             appendfsync {fsync}\nsave \"\"\nmaxmemory-policy noeviction\n\
             cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 1000\n\
             cluster-replica-validity-factor 0\nrepl-diskless-sync-delay 0\n"
        );
        let name = format!("redis-{i}");
        let spec = conf_spec(root, &name, ("redis.conf", conf), &[], log(&name))?;
        out.push((Target::Node(i as u8), spec));
    }
    Ok(out)
}

/// Joins the six started nodes into a Cluster (three masters, a replica each) and waits until
/// it settled.
pub async fn create(ports: &[u16]) -> anyhow::Result<()> {
    let out = tokio::process::Command::from(crate::testing::servers::cluster_create(ports, 1)?)
        .output()
        .await
        .context("running redis-cli --cluster create")?;
    anyhow::ensure!(
        out.status.success(),
        "redis-cli --cluster create failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    settle(ports).await.map(|_| ())
}

pub(super) async fn query(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let mut c = node_conn(port).await?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    Ok(cmd.query_async(&mut c).await?)
}

/// `CLUSTER NODES` as node `port` sees the Cluster.
pub(super) async fn nodes(port: u16) -> anyhow::Result<Vec<Node>> {
    let text = query(port, &["CLUSTER", "NODES"]).await?;
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let port = f[1]
            .split('@')
            .next()
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let flags: Vec<&str> = f[2].split(',').collect();
        let bad = ["fail", "fail?", "handshake", "noaddr"];
        out.push(Node {
            id: f[0].to_owned(),
            port,
            master: flags.contains(&"master"),
            of: (f[3] != "-").then(|| f[3].to_owned()),
            healthy: f[7] == "connected" && !flags.iter().any(|x| bad.contains(x)),
            slots: f.len() > 8,
        });
    }
    Ok(out)
}

/// Whether the Cluster is whole, as every node sees it: all up with `cluster_state:ok`, three
/// masters serving slots, each with a healthy replica whose replication link is up. The
/// masters' ports then.
pub async fn settled(ports: &[u16]) -> Option<Vec<u16>> {
    let mut masters: Option<Vec<u16>> = None;
    for &p in ports {
        let info = query(p, &["CLUSTER", "INFO"]).await.ok()?;
        if !info.contains("cluster_state:ok") {
            return None;
        }
        let seen = nodes(p).await.ok()?;
        let serving: Vec<&Node> = seen.iter().filter(|n| n.master && n.slots).collect();
        if serving.len() != 3 || !seen.iter().all(|n| n.healthy) {
            return None;
        }
        for m in &serving {
            if !seen.iter().any(|r| r.of.as_ref() == Some(&m.id)) {
                return None;
            }
        }
        let mut these: Vec<u16> = serving.iter().map(|n| n.port).collect();
        these.sort_unstable();
        if masters.as_ref().is_some_and(|m| *m != these) {
            return None;
        }
        masters = Some(these);
    }
    let masters = masters?;
    for &p in ports.iter().filter(|p| !masters.contains(p)) {
        let info = query(p, &["INFO", "replication"]).await.ok()?;
        if !(info.contains("role:slave") && info.contains("master_link_status:up")) {
            return None;
        }
    }
    Some(masters)
}

/// Waits until [`settled`]; the masters' ports then.
pub async fn settle(ports: &[u16]) -> anyhow::Result<Vec<u16>> {
    let deadline = Instant::now() + SETTLE;
    loop {
        if let Some(m) = settled(ports).await {
            return Ok(m);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Redis Cluster did not settle in {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
