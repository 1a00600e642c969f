//! The nemesis: applies a schedule's faults to the running deployment, on time.
//!
//! Each fault is its own task: it sleeps until its time, takes its process's lock, injects
//! the fault (SIGKILL, SIGSTOP, a full disk, PostgreSQL shut down), holds it, and heals it
//! (restart on the same port and directory and wait until it serves, SIGCONT, free the disk,
//! start PostgreSQL again). Faults on different processes therefore overlap as the schedule
//! says; a fault whose process is still busy with an earlier one waits for it, and is
//! skipped if that pushed it past the end of the fault window, so the storm's last part and
//! the drain always run on a whole deployment. Network faults switch the mode of the fault
//! proxy between instance 0 and Redis ([`super::proxy`]) and switch it back to pass. Faults
//! on the Redis primary of the Sentinel deployment find the primary when they land and kill
//! it or hand it over ([`super::sentinel`]), then wait for the topology to settle; faults on a
//! replica find the lowest-numbered replica the same way. Faults on a Cluster master find the
//! master serving the campaign and kill it or hand it over to its replica ([`super::shards`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cluster::Cluster;
use super::proxy::{Dir, Mode};
use super::schedule::{Fault, Kind, Target};

/// What became of one fault.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub fault: Fault,
    /// Seconds into the storm it was injected (None: skipped).
    pub injected_s: Option<f64>,
    pub healed_s: Option<f64>,
    pub error: Option<String>,
    /// Faults on the Sentinel primary: whether the primary moved to another node.
    pub failed_over: Option<bool>,
    /// Sentinel faults: what the sentinels did, e.g. `failover redis-0 -> redis-1, …`, or
    /// which replica was hit.
    pub note: Option<String>,
    /// Snapshot restores: the decisions the restore took back (see [`super::rewind`]).
    #[serde(skip)]
    pub rewound: Option<super::rewind::Window>,
}

/// Runs every fault of `faults` against `cluster`, from `start`; returns once all are healed.
/// Faults that could not start before `cutoff` (after `start`) are skipped.
pub async fn run(
    cluster: Arc<Cluster>,
    faults: Vec<Fault>,
    start: Instant,
    cutoff: Duration,
) -> Vec<Applied> {
    let tasks: Vec<_> = faults
        .into_iter()
        .map(|fault| {
            let cluster = cluster.clone();
            tokio::spawn(async move { one(&cluster, fault, start, cutoff).await })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok(a) => out.push(a),
            Err(e) => tracing::error!(error = %e, "a nemesis task panicked"),
        }
    }
    out
}

async fn one(cluster: &Cluster, fault: Fault, start: Instant, cutoff: Duration) -> Applied {
    tokio::time::sleep_until((start + fault.at).into()).await;
    let mut applied = Applied {
        fault,
        injected_s: None,
        healed_s: None,
        error: None,
        failed_over: None,
        note: None,
        rewound: None,
    };
    let since = |s: Instant| s.elapsed().as_secs_f64();
    if fault.kind == Kind::Rewind {
        // Two processes and two moments: the module takes their locks itself.
        if start.elapsed() + fault.hold > cutoff {
            applied.error = Some("skipped: past the fault window".into());
            return applied;
        }
        applied.injected_s = Some(since(start));
        match super::rewind::run(cluster, fault.hold).await {
            Ok((window, note)) => {
                applied.rewound = Some(window);
                applied.note = Some(note);
            }
            Err(e) => applied.error = Some(format!("{e:#}")),
        }
        applied.healed_s = Some(since(start));
        return applied;
    }
    // A clock step holds the server's lock: no restart falls inside it (see `super::clock`).
    let process = match fault.target {
        Target::Clock => Target::Instance(0),
        t => t,
    };
    if fault.target == Target::Clock && cluster.clock_file.is_none() {
        let why = super::clock::library().err().map(|e| format!("{e:#}"));
        applied.error = Some(format!(
            "skipped: {}",
            why.unwrap_or_else(|| "the server does not run under libfaketime".into())
        ));
        return applied;
    }
    let mut slot = cluster.slot(process).lock().await;
    if start.elapsed() + fault.hold > cutoff {
        applied.error = Some("skipped: its process was busy with an earlier fault".into());
        return applied;
    }
    tracing::info!(%fault, "injecting");
    applied.injected_s = Some(since(start));
    let result = match (fault.kind, slot.as_mut()) {
        (kind, _) if fault.target == Target::Primary => {
            super::sentinel_faults::fault(cluster, kind, fault.hold)
                .await
                .map(|(moved, note)| {
                    tracing::info!(%fault, %note, "Sentinel fault done");
                    applied.failed_over = Some(moved);
                    applied.note = Some(note);
                })
        }
        (kind, _) if fault.target == Target::Master => {
            super::shard_faults::fault(cluster, kind, fault.hold)
                .await
                .map(|(moved, window, note)| {
                    tracing::info!(%fault, %note, "Cluster fault done");
                    applied.failed_over = Some(moved);
                    applied.rewound = window;
                    applied.note = Some(note);
                })
        }
        (kind, _) if fault.target == Target::Replica => {
            super::sentinel_faults::replica_fault(cluster, kind, fault.hold)
                .await
                .map(|note| applied.note = Some(note))
        }
        (Kind::ClockStep(by), _) => super::clock::step(cluster, by, fault.hold)
            .await
            .map(|note| applied.note = Some(note)),
        (Kind::DiskFull, _) => disk_full(cluster, fault.hold).await,
        (Kind::IoError, _) => io_error(cluster, fault.hold).await,
        (Kind::Partition | Kind::DropUp | Kind::DropDown | Kind::Latency | Kind::Reset, _) => {
            link(cluster, fault.kind, fault.hold).await
        }
        (kind, Some(p)) => {
            match kind {
                Kind::Kill => p.kill().await,
                Kind::Freeze => p.freeze(),
                // Fast shutdown: PostgreSQL closes every connection and stops listening.
                Kind::Outage => p.stop_with(libc::SIGINT).await,
                _ => {}
            }
            tokio::time::sleep(fault.hold).await;
            cluster.start_proc(fault.target, p).await
        }
        (_, None) => Err(anyhow::anyhow!("{} has no process", fault.target)),
    };
    applied.healed_s = Some(since(start));
    if let Err(e) = result {
        tracing::error!(%fault, error = %format!("{e:#}"), "could not heal the fault");
        applied.error = Some(format!("{e:#}"));
    }
    applied
}

/// The embedded ledger's disk is full for `hold`: its tmpfs filled with a file, or the
/// server's `SECKILL_FAULTS` hook failing every batch as `SQLITE_FULL` ([`super::disk`]).
async fn disk_full(cluster: &Cluster, hold: Duration) -> anyhow::Result<()> {
    let disk = cluster
        .disk
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("this deployment has no data disk"))?;
    disk.fill().await?;
    tokio::time::sleep(hold).await;
    disk.free()
}

/// Every commit of the embedded ledger ends in a disk I/O error for `hold` (the server's
/// `SECKILL_FAULTS` hook `io_error_while`: half committed, half rolled back).
async fn io_error(cluster: &Cluster, hold: Duration) -> anyhow::Result<()> {
    let flag = cluster
        .io_error_flag
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("this deployment has no embedded ledger"))?;
    std::fs::write(flag, b"fsync fails")?;
    tokio::time::sleep(hold).await;
    std::fs::remove_file(flag)?;
    Ok(())
}

/// A network fault between instance 0 and Redis, through the cluster's fault proxy.
async fn link(cluster: &Cluster, kind: Kind, hold: Duration) -> anyhow::Result<()> {
    let proxy = cluster
        .proxy
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("this deployment has no Redis link"))?;
    let mode = match kind {
        Kind::Reset => {
            proxy.reset();
            return Ok(());
        }
        Kind::Partition => Mode::Blackhole,
        Kind::DropUp => Mode::Stall(Dir::Up),
        Kind::DropDown => Mode::Stall(Dir::Down),
        _ => Mode::Latency {
            min: Duration::from_millis(50),
            max: Duration::from_millis(300),
        },
    };
    proxy.set(mode);
    tokio::time::sleep(hold).await;
    proxy.set(Mode::Pass);
    Ok(())
}

/// Counts of injected faults per (target, kind), for the report.
pub fn tally(applied: &[Applied]) -> Vec<(Target, Kind, u64)> {
    let mut m = std::collections::BTreeMap::new();
    for a in applied.iter().filter(|a| a.injected_s.is_some()) {
        *m.entry((a.fault.target, a.fault.kind)).or_insert(0u64) += 1;
    }
    m.into_iter().map(|((t, k), n)| (t, k, n)).collect()
}
