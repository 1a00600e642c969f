//! The Cluster deployment's faults, on the master serving the storm's campaign: kill -9 (its
//! replica promoted), a kill while its replica lags, or `CLUSTER FAILOVER`; each waits until
//! the Cluster settled again (`shards.rs` creates it and tells when it settled).

use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use super::cluster::Cluster;
use super::rewind::Window;
use super::schedule::{Kind, Target};
use super::servers::node_conn;
use super::shards::{nodes, query, settle, LAG_BOUND, SETTLE};

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
    crate::engine::scale_out::info_field(&info, "master_repl_offset")
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
