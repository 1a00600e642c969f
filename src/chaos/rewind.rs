//! The nemesis that sends Redis back in time: a snapshot taken during the storm, and later
//! redis-server killed -9 and started from that snapshot, with the worker (a consumer holding
//! entries it read but has not acknowledged) killed at the same moment. PostgreSQL is stalled
//! (SIGSTOP) for the last moment before the kill and until just after the restore, so the
//! consumers do hold entries then: the worker's die with it, instance 1's consumer survives
//! and writes what it read from the Redis that no longer exists.
//!
//! This is what an operator's restore from last night's backup does, or a managed Redis that
//! fails over to a node restored from an older RDB: every decision after the snapshot is gone
//! from the gate — wins, their stream entries, Idempotency-Key answers, order numbers —
//! while PostgreSQL and a consumer still alive (instance 1's) keep what they already had.
//! The promise under that fault (docs/PROTOCOL.md): the gate is fenced and rebuilt from the
//! ledger before it sells again, so nothing is oversold, no code or order number goes to two
//! live orders, no buyer exceeds the limit; what cannot be kept is a `won` answered after the
//! snapshot, which is lost with it, or refused by the ledger and recorded in `failed_orders`
//! when a consumer writes an older decision for the same unit later. The checker
//! ([`super::excuse`]) excuses exactly those and nothing else.
//!
//! The snapshot is the real thing: `BGSAVE`'s RDB file, installed as the base of an AOF
//! directory of its own (`appendonly.aof.1.base.rdb` and its manifest), because a Redis with
//! `appendonly yes` ignores a bare `dump.rdb` and starts empty.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::cluster::Cluster;
use super::schedule::Target;
use crate::engine::scale_out::info_field;

/// The decisions a restore may take back: those of requests sent before the kill and
/// answered after the snapshot's fork. Only the killed Redis can have decided them; a request
/// answered before `from` is in the snapshot, one sent after `killed` reached the restored
/// Redis. (A request sent just before the kill and decided by the restored Redis is excused
/// too: the bench cannot tell which Redis decided it.)
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: Instant,
    /// `from` as wall-clock time, to compare with the ledger's timestamps (`failed_orders.at`).
    pub from_wall: std::time::SystemTime,
    pub killed: Instant,
    /// Whether a `won` answered after the window that the ledger refused is excused too: a
    /// snapshot restore keeps a consumer alive holding decisions of the Redis it replaced
    /// (documented: its older decision reaches the ledger first); a Cluster failover promises
    /// that everything answered after the promotion holds, so it excuses none.
    pub refused_after: bool,
}

impl Window {
    /// Whether a request sent at `sent` and answered at `answered` may have been decided by
    /// the Redis the restore replaced.
    pub fn contains(&self, sent: Instant, answered: Instant) -> bool {
        answered >= self.from && sent <= self.killed
    }
}

/// Takes a snapshot now, waits `hold`, then restores it with the worker killed alongside;
/// returns the window of lost decisions and a note for the report.
pub async fn run(cluster: &Cluster, hold: Duration) -> anyhow::Result<(Window, String)> {
    let dir = cluster.dir().join("redis");
    let saved = dir.join("rewind-snapshot.rdb");
    let (from, from_wall) = {
        let _redis = cluster.slot(Target::Redis).lock().await;
        snapshot(cluster.redis_port, &dir, &saved).await?
    };
    // PostgreSQL stalls for the last moment before the kill, so both consumers hold entries
    // they read and could not write yet: the worker's die with it, instance 1's are written
    // once PostgreSQL is back, after Redis went back in time. Every lock is taken before the
    // stall begins, so another fault still holding one cannot stretch it.
    let stall = (hold / 2).min(Duration::from_secs(1));
    tokio::time::sleep(hold.saturating_sub(stall).saturating_sub(from.elapsed())).await;
    let mut redis = cluster.slot(Target::Redis).lock().await;
    let mut worker = cluster.slot(Target::Worker).lock().await;
    let mut postgres = cluster.slot(Target::Postgres).lock().await;
    let (Some(redis), Some(worker), Some(postgres)) =
        (redis.as_mut(), worker.as_mut(), postgres.as_mut())
    else {
        anyhow::bail!("this deployment has no single redis-server, worker and PostgreSQL");
    };
    postgres.freeze();
    tokio::time::sleep(stall).await;
    redis.kill().await;
    worker.kill().await;
    let killed = Instant::now();
    let restored = async {
        install(&dir, &saved)?;
        cluster.start_proc(Target::Redis, redis).await?;
        anyhow::Ok(Instant::now())
    }
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    postgres.thaw();
    let to = restored?;
    cluster.start_proc(Target::Worker, worker).await?;
    let note = format!(
        "snapshot {:.2}s before the kill, PostgreSQL stalled for the last {:.2}s, Redis \
         serving the snapshot {:.2}s after",
        (killed - from).as_secs_f64(),
        stall.as_secs_f64(),
        (to - killed).as_secs_f64()
    );
    Ok((
        Window {
            from,
            from_wall,
            killed,
            refused_after: true,
        },
        note,
    ))
}

/// `BGSAVE`, waited for, and its file copied to `saved`; returns the moment just before the
/// `BGSAVE` that forked (every decision answered before it is in the snapshot).
async fn snapshot(
    port: u16,
    dir: &Path,
    saved: &Path,
) -> anyhow::Result<(Instant, std::time::SystemTime)> {
    let mut c = super::servers::node_conn(port).await?;
    let field = |info: &str, name: &str| info_field(info, name).unwrap_or("").to_owned();
    // `rdb_saves` counts snapshots since start (LASTSAVE has one-second steps, and a Redis
    // that just started reports its start as its last save).
    let before = field(&persistence(&mut c).await?, "rdb_saves");
    let deadline = Instant::now() + Duration::from_secs(30);
    // A plain BGSAVE forks at once or answers an error (an AOF rewrite or another save in
    // progress), retried; `BGSAVE SCHEDULE` would fork at an unknown later moment, and the
    // window would start too early.
    let from = loop {
        let (from, wall) = (Instant::now(), std::time::SystemTime::now());
        match redis::cmd("BGSAVE").query_async::<String>(&mut c).await {
            Ok(_) => break (from, wall),
            Err(e) => anyhow::ensure!(Instant::now() < deadline, "BGSAVE refused for 30 s: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    loop {
        let now = persistence(&mut c).await?;
        if field(&now, "rdb_bgsave_in_progress") == "0" && field(&now, "rdb_saves") != before {
            anyhow::ensure!(
                field(&now, "rdb_last_bgsave_status") == "ok",
                "BGSAVE failed: {now}"
            );
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "BGSAVE took over 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::copy(dir.join("dump.rdb"), saved).context("copying the snapshot")?;
    Ok(from)
}

/// `INFO persistence`.
async fn persistence(c: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<String> {
    Ok(redis::cmd("INFO").arg("persistence").query_async(c).await?)
}

/// Replaces the AOF directory with one whose only file is the snapshot.
fn install(dir: &Path, saved: &Path) -> anyhow::Result<()> {
    let aof: PathBuf = dir.join("appendonlydir");
    if aof.exists() {
        std::fs::remove_dir_all(&aof)?;
    }
    std::fs::create_dir_all(&aof)?;
    std::fs::copy(saved, aof.join("appendonly.aof.1.base.rdb"))?;
    std::fs::write(
        aof.join("appendonly.aof.manifest"),
        "file appendonly.aof.1.base.rdb seq 1 type b\n",
    )?;
    // A Redis restarted as another user (as root the chaos drops privileges) must own them.
    if let Ok(meta) = std::fs::metadata(dir) {
        use std::os::unix::fs::MetadataExt;
        for entry in std::fs::read_dir(&aof)? {
            std::os::unix::fs::chown(entry?.path(), Some(meta.uid()), Some(meta.gid()))?;
        }
        std::os::unix::fs::chown(&aof, Some(meta.uid()), Some(meta.gid()))?;
    }
    Ok(())
}
