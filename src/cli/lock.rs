//! `seckill lock run NAME -- COMMAND…`: run a command while holding a lock, like `flock`,
//! `etcdctl lock` or `consul lock`, and `seckill lock bench`.
//!
//! The lock comes from a running seckill over HTTP (`--url`), from Redis directly (`--redis`,
//! with `--redis-sentinel`/`--redis-cluster`), from Redlock masters (`--lock-redis`) or from
//! an embedded data directory (`--data`). While the command runs, the lease is extended in
//! the background; the command sees its fence in `SECKILL_LOCK_FENCE` (and the lock name in
//! `SECKILL_LOCK_NAME`) and must pass it to what it writes. If the lease is lost, the command
//! is stopped at once (SIGTERM to its process group, SIGKILL after `--kill-after`): it may
//! already have sent a write, which the fence makes the resource refuse.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};

use super::lock_target::LockTarget;
use crate::lock::{Attempt, LeaseGuard, Locks};

/// Exit status when the lock is still held by another owner after `--wait`.
pub const EXIT_HELD: u8 = 75;
/// Exit status when the lease was lost while the command ran (the command was stopped).
pub const EXIT_LOST: u8 = 74;
/// Exit status when the lock store cannot be reached or refuses the request.
pub const EXIT_UNAVAILABLE: u8 = 69;

#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Run COMMAND while holding lock NAME; the command gets SECKILL_LOCK_FENCE.
    Run(RunOpts),
    /// Measure acquire and release latency and throughput of a lock store.
    Bench(super::lock_bench::BenchOpts),
}

#[derive(Debug, Args)]
pub struct RunOpts {
    /// The lock name (1–64 of A-Z a-z 0-9 _ -).
    pub name: String,
    /// Lease TTL (`30s`, `500ms`, `2m`: a unit is required); extended every third of it.
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse)]
    pub ttl: Duration,
    /// How long to wait for the lock; unset waits as long as it takes, `0` does not wait.
    #[arg(long, value_parser = crate::duration::parse)]
    pub wait: Option<Duration>,
    /// Owner recorded with the lease (default: host name and process id).
    #[arg(long)]
    pub owner: Option<String>,
    /// Grace between SIGTERM and SIGKILL when the command must stop.
    #[arg(long, default_value = "2s", value_parser = crate::duration::parse)]
    pub kill_after: Duration,
    #[command(flatten)]
    pub target: LockTarget,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub async fn run(cmd: LockCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        LockCommand::Run(opts) => run_locked(opts).await,
        LockCommand::Bench(opts) => super::lock_bench::run(opts).await,
    }
}

/// Acquires, waiting up to `wait` (forever when `None`) in steps the API allows.
async fn acquire(locks: &Locks, opts: &RunOpts, owner: &str) -> anyhow::Result<Option<LeaseGuard>> {
    let step = Duration::from_millis(crate::lock::MAX_WAIT_MS);
    let deadline = opts.wait.map(|w| Instant::now() + w);
    loop {
        let wait = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(step),
            None => step,
        };
        match locks.acquire(&opts.name, owner, opts.ttl, wait).await? {
            Attempt::Granted(lease) => return Ok(Some(LeaseGuard::start(locks.clone(), lease))),
            Attempt::Held { .. } if deadline.is_some_and(|d| Instant::now() >= d) => {
                return Ok(None)
            }
            Attempt::Held { .. } => {}
        }
    }
}

async fn run_locked(opts: RunOpts) -> anyhow::Result<ExitCode> {
    let locks = opts.target.open().await?;
    let owner = opts.owner.clone().unwrap_or_else(default_owner);
    let guard = match acquire(&locks, &opts, &owner).await {
        Ok(Some(g)) => g,
        Ok(None) => {
            tracing::warn!(lock = %opts.name, "the lock is held by another owner; not running");
            return Ok(ExitCode::from(EXIT_HELD));
        }
        Err(e) => {
            tracing::error!(lock = %opts.name, error = %e, "cannot acquire the lock");
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        }
    };
    tracing::info!(lock = %opts.name, fence = guard.fence(), store = locks.kind(), "lock acquired");
    let mut child = {
        let mut c = tokio::process::Command::new(&opts.command[0]);
        c.args(&opts.command[1..])
            .env("SECKILL_LOCK_FENCE", guard.fence().to_string())
            .env("SECKILL_LOCK_NAME", &opts.name)
            .process_group(0)
            .kill_on_drop(true);
        c.spawn()
            .with_context(|| format!("cannot start {:?}", opts.command[0]))?
    };
    let pgid = child.id().map(|p| p as i32);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let lost = guard.watch_lost();
    let status = loop {
        let mut lost_rx = lost.clone();
        tokio::select! {
            status = child.wait() => break status?,
            reason = lost_rx.wait_for(Option::is_some) => {
                let reason = reason.ok().and_then(|r| r.clone()).unwrap_or_default();
                tracing::error!(lock = %opts.name, fence = guard.fence(), %reason, "lease lost; stopping the command");
                stop(&mut child, pgid, opts.kill_after).await;
                return Ok(ExitCode::from(EXIT_LOST));
            }
            _ = term.recv() => signal_group(pgid, libc::SIGTERM),
            _ = int.recv() => signal_group(pgid, libc::SIGINT),
        }
    };
    match guard.release().await {
        Ok(()) => {}
        Err(crate::lock::LockError::NotHolder(_)) => {
            // The command finished, but not (all of it) under the lock: say so.
            tracing::error!(lock = %opts.name, "the lease was lost while the command ran");
            return Ok(ExitCode::from(EXIT_LOST));
        }
        Err(e) => {
            tracing::warn!(lock = %opts.name, error = %e, "releasing the lock failed; it ends at its TTL")
        }
    }
    let code = status.code().unwrap_or(128 + status_signal(&status));
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

fn status_signal(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().unwrap_or(0)
}

fn signal_group(pgid: Option<i32>, sig: i32) {
    if let Some(pgid) = pgid {
        // SAFETY: kill(2) on the command's own process group; no memory is involved.
        unsafe { libc::kill(-pgid, sig) };
    }
}

/// SIGTERM to the command's process group, SIGKILL after `grace`.
async fn stop(child: &mut tokio::process::Child, pgid: Option<i32>, grace: Duration) {
    signal_group(pgid, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        signal_group(pgid, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned());
    format!("{host}:{}", std::process::id())
}
