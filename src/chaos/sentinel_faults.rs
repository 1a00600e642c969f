//! The Sentinel deployment's faults: the primary killed (-9) or handed over (`SENTINEL
//! FAILOVER`), and a replica stopped, cut off or lagging; each waits until the topology
//! settled again (`sentinel.rs` starts the topology and tells when it settled).

use std::time::{Duration, Instant};

use anyhow::Context;

use super::cluster::Cluster;
use super::schedule::{Kind, Target};
use super::sentinel::{primary, settle, MASTER, SETTLE};
use super::servers::node_conn;

/// A fault on whichever node is the primary now: kill -9 (restarted after `hold`) or
/// `SENTINEL FAILOVER`. Returns whether the primary moved, and what happened, e.g.
/// `failover redis-0 -> redis-1, promoted within 2.3s, settled after 9.8s`.
pub async fn fault(
    cluster: &Cluster,
    kind: Kind,
    hold: Duration,
) -> anyhow::Result<(bool, String)> {
    let ports = cluster
        .sentinel
        .as_ref()
        .context("this deployment has no sentinels")?;
    let before = settle(ports).await?;
    let t0 = Instant::now();
    let mut promoted = None;
    match kind {
        Kind::Kill => {
            let node = Target::Node(before);
            let mut slot = cluster.slot(node).lock().await;
            let p = slot.as_mut().context("a Redis node has no process")?;
            p.kill().await;
            // Watch the sentinels promote the replica while the old primary is down.
            while t0.elapsed() < hold {
                if promoted.is_none() && primary(ports).await.is_some_and(|n| n != before) {
                    promoted = Some(t0.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Restarted as a replica of the new primary, as an orchestrator's start script
            // does (it asks the sentinels first); else it would come back a primary with old
            // data until the sentinels notice and convert it, seconds later.
            if let Some(now) = primary(ports).await.filter(|&n| n != before) {
                let conf = cluster
                    .dir()
                    .join(format!("redis-{before}"))
                    .join("redis.conf");
                let line = format!("replicaof 127.0.0.1 {}\n", ports.nodes[now as usize]);
                let mut f = std::fs::OpenOptions::new().append(true).open(&conf)?;
                std::io::Write::write_all(&mut f, line.as_bytes())?;
            }
            cluster.start_proc(node, p).await?;
        }
        Kind::Failover => {
            // As long as a settle may take: on a loaded machine the sentinels can refuse for
            // more than 10 s after a kill -9 failover (the restarted node still syncing).
            let deadline = Instant::now() + SETTLE;
            loop {
                let mut c = node_conn(ports.sentinels[0]).await?;
                let r: redis::RedisResult<()> = redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(MASTER)
                    .query_async(&mut c)
                    .await;
                match r {
                    Ok(()) => break,
                    // INPROG, NOGOODSLAVE: the sentinels are still busy with the last one.
                    Err(e) if Instant::now() < deadline => {
                        tracing::debug!(error = %e, "SENTINEL FAILOVER refused; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => return Err(e).context("SENTINEL FAILOVER"),
                }
            }
            // Accepted: the sentinels name the replica once they promoted it.
            let deadline = Instant::now() + SETTLE;
            while promoted.is_none() && Instant::now() < deadline {
                if primary(ports).await.is_some_and(|n| n != before) {
                    promoted = Some(t0.elapsed());
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        _ => anyhow::bail!("{kind} is not a fault of the Redis primary"),
    }
    let after = settle(ports).await?;
    if after == before {
        let note = format!(
            "redis-{before} is still the primary (no failover), settled after {:.1}s",
            t0.elapsed().as_secs_f64()
        );
        return Ok((false, note));
    }
    let promoted = promoted.unwrap_or_else(|| t0.elapsed());
    let note = format!(
        "failover redis-{before} -> redis-{after}, promoted within {:.1}s, settled after {:.1}s",
        promoted.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    Ok((true, note))
}

/// A fault on the lowest-numbered replica: kill -9 (restarted after `hold`), SIGSTOP for
/// `hold` (it lags, then catches up), or its replication link cut every 100 ms for `hold`
/// (`CLIENT KILL TYPE master` on the replica, which reconnects and resynchronises each time).
/// Returns what happened, e.g. `redis-2 (a replica of redis-0), settled after 6.1s`.
pub async fn replica_fault(
    cluster: &Cluster,
    kind: Kind,
    hold: Duration,
) -> anyhow::Result<String> {
    let ports = cluster
        .sentinel
        .as_ref()
        .context("this deployment has no sentinels")?;
    let p = settle(ports).await?;
    let node = (0..ports.nodes.len() as u8)
        .find(|&i| i != p)
        .context("the primary has no replica")?;
    let t0 = Instant::now();
    match kind {
        Kind::Kill | Kind::Freeze => {
            let target = Target::Node(node);
            let mut slot = cluster.slot(target).lock().await;
            let proc = slot.as_mut().context("a Redis node has no process")?;
            if kind == Kind::Kill {
                proc.kill().await;
            } else {
                proc.freeze();
            }
            tokio::time::sleep(hold).await;
            cluster.start_proc(target, proc).await?;
        }
        Kind::Partition => {
            let mut c = node_conn(ports.nodes[node as usize]).await?;
            while t0.elapsed() < hold {
                let cut: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("master")
                    .query_async(&mut c)
                    .await;
                if let Err(e) = cut {
                    tracing::debug!(error = %e, "CLIENT KILL TYPE master on the replica");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        _ => anyhow::bail!("{kind} is not a fault of a Redis replica"),
    }
    settle(ports).await?;
    Ok(format!(
        "redis-{node} (a replica of redis-{p}), settled after {:.1}s",
        t0.elapsed().as_secs_f64()
    ))
}
