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
//!   [`Window`] of decisions it may take back (the last second before the kill), which the
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
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use super::cluster::{Cluster, Fsync};
use super::procs::{find_binary, Spec};
use super::rewind::Window;
use super::schedule::{Kind, Target};
use super::servers::{conf_spec, fsync_name, node_conn};

/// Nodes of the deployment: three masters and a replica of each.
pub const NODES: usize = 6;

/// Longest a fault waits for the topology to settle afterwards.
const SETTLE: Duration = Duration::from_secs(40);

/// How far behind its master a replica can be when the master is killed: the decisions of
/// requests answered this long before the kill may be missing from the promoted replica.
/// (Replication over loopback lags by milliseconds; the margin covers a loaded machine.)
const LAG_BOUND: Duration = Duration::from_secs(1);

/// One node as `CLUSTER NODES` lists it.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    port: u16,
    master: bool,
    /// The master's id, for a replica.
    of: Option<String>,
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
    let mut cmd = tokio::process::Command::new(find_binary("redis-cli")?);
    cmd.args(["--cluster", "create"]);
    for p in ports {
        cmd.arg(format!("127.0.0.1:{p}"));
    }
    let out = cmd
        .args(["--cluster-replicas", "1", "--cluster-yes"])
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

async fn query(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let mut c = node_conn(port).await?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    Ok(cmd.query_async(&mut c).await?)
}

/// `CLUSTER NODES` as node `port` sees the Cluster.
async fn nodes(port: u16) -> anyhow::Result<Vec<Node>> {
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

/// The campaign gates (`{c:…}:meta` keys) master `port` holds, scanning all its keys, and
/// its number of keys.
async fn gates(port: u16) -> anyhow::Result<(Vec<String>, u64)> {
    let mut c = node_conn(port).await?;
    let mut cursor = 0u64;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("{c:*}:meta")
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut c)
            .await?;
        found.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let size: u64 = redis::cmd("DBSIZE").query_async(&mut c).await?;
    Ok((found, size))
}

/// The master serving the campaign and its replica, as node indexes: the master holding a
/// campaign's gate, the busiest one if several do (the storm's campaign keeps its
/// Idempotency-Key answers in its slot); the first master while no campaign exists yet.
async fn campaign_master(ports: &[u16], masters: &[u16]) -> anyhow::Result<(usize, usize)> {
    let mut chosen = (masters[0], 0u64);
    for &m in masters {
        let (found, size) = gates(m).await?;
        if !found.is_empty() {
            tracing::debug!(master = m, gates = ?found, keys = size, "campaign gates");
            if size >= chosen.1 {
                chosen = (m, size.max(1));
            }
        }
    }
    let chosen = chosen.0;
    let seen = nodes(chosen).await?;
    let me = seen
        .iter()
        .find(|n| n.port == chosen)
        .context("the master does not list itself")?;
    let replica = seen
        .iter()
        .find(|n| n.of.as_ref() == Some(&me.id))
        .context("the master has no replica")?;
    let index = |port: u16| ports.iter().position(|&p| p == port);
    Ok((
        index(chosen).context("unknown master")?,
        index(replica.port).context("unknown replica")?,
    ))
}

/// `master_repl_offset` of a node (0 if unreadable).
async fn offset(port: u16) -> u64 {
    let info = query(port, &["INFO", "replication"])
        .await
        .unwrap_or_default();
    crate::engine::redis::info_field(&info, "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Whether node `port` says it is a master now.
async fn is_master(port: u16) -> bool {
    query(port, &["INFO", "replication"])
        .await
        .is_ok_and(|i| i.contains("role:master"))
}

/// A fault on the master serving the campaign: kill -9 (restarted after `hold`), the same
/// with its replica frozen a moment before (it lags, then is promoted) or `CLUSTER FAILOVER`
/// on its replica. Returns whether the master moved, the window of decisions a kill
/// may have taken back, and what happened, e.g. `kill redis-0 (its replica redis-4 was 212
/// bytes behind) -> redis-4 promoted within 1.9s, settled after 7.2s`.
pub async fn fault(
    cluster: &Cluster,
    kind: Kind,
    hold: Duration,
) -> anyhow::Result<(bool, Option<Window>, String)> {
    let ports = cluster
        .shards
        .as_deref()
        .context("this deployment is no Redis Cluster")?;
    let masters = settle(ports).await?;
    let (m, r) = campaign_master(ports, &masters).await?;
    let (mport, rport) = (ports[m], ports[r]);
    let t0 = Instant::now();
    let mut promoted = None;
    let mut window = None;
    let what;
    match kind {
        Kind::Kill | Kind::KillLagging(_) => {
            let node = Target::Node(m as u8);
            let mut slot = cluster.slot(node).lock().await;
            let p = slot.as_mut().context("a Redis node has no process")?;
            // The replica stops taking the master's writes `lag` before the kill: the
            // promoted replica then misses everything the master answered meanwhile.
            let (mut from, mut from_wall) = (Instant::now(), SystemTime::now());
            if let Kind::KillLagging(ms) = kind {
                let mut replica = cluster.slot(Target::Node(r as u8)).lock().await;
                let rp = replica.as_mut().context("a Redis node has no process")?;
                (from, from_wall) = (Instant::now(), SystemTime::now());
                rp.freeze();
                // Its link cut too: what the master wrote to the socket before would reach
                // the replica once thawed.
                if let Err(e) = query(mport, &["CLIENT", "KILL", "TYPE", "replica"]).await {
                    tracing::warn!(error = %format!("{e:#}"), "cutting the replica's link");
                }
                tokio::time::sleep(Duration::from_millis(ms.into())).await;
                let behind = offset(mport).await;
                p.kill().await;
                rp.thaw();
                what = format!(
                    "kill redis-{m} {ms} ms after its replica redis-{r} stopped taking its \
                     writes (master at offset {behind})"
                );
            } else {
                let behind = offset(mport).await.saturating_sub(offset(rport).await);
                p.kill().await;
                what = format!("kill redis-{m} (its replica redis-{r} was {behind} bytes behind)");
            }
            let killed = Instant::now();
            window = Some(Window {
                from: from - LAG_BOUND,
                from_wall: from_wall - LAG_BOUND,
                killed,
                refused_after: false,
            });
            while t0.elapsed() < hold || promoted.is_none() && t0.elapsed() < SETTLE {
                if promoted.is_none() && is_master(rport).await {
                    promoted = Some(t0.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            cluster.start_proc(node, p).await?;
        }
        Kind::Handover => {
            what = format!("CLUSTER FAILOVER on redis-{r}, the replica of redis-{m}");
            let reply = query(rport, &["CLUSTER", "FAILOVER"]).await;
            reply.context("CLUSTER FAILOVER")?;
            let deadline = Instant::now() + SETTLE;
            while promoted.is_none() && Instant::now() < deadline {
                if is_master(rport).await {
                    promoted = Some(t0.elapsed());
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        _ => anyhow::bail!("{kind} is not a fault of a Redis Cluster master"),
    }
    settle(ports).await?;
    let note = match promoted {
        Some(at) => format!(
            "{what} -> redis-{r} promoted within {:.1}s, settled after {:.1}s",
            at.as_secs_f64(),
            t0.elapsed().as_secs_f64()
        ),
        None => format!(
            "{what}: no promotion, settled after {:.1}s",
            t0.elapsed().as_secs_f64()
        ),
    };
    Ok((promoted.is_some(), window, note))
}
