//! One deployment of seckill on this machine, made of real processes the nemesis can hit.
//!
//! - **embedded**: one `seckill serve` (this very binary, `std::env::current_exe`) on a SQLite
//!   data directory on a 256 MiB tmpfs the nemesis fills up and frees ([`super::disk`]), or,
//!   where mounting is refused, in a temp dir with the `SECKILL_FAULTS` hook
//!   `disk_full_while` (every batch fails as `SQLITE_FULL` while a flag file exists);
//! - **scale-out**: redis-server with AOF (`appendfsync always`, or `everysec` to measure that
//!   trade-off), a throwaway PostgreSQL (`initdb` in a temp dir), instance 0 serving with
//!   `--no-worker`, instance 1 serving with its own pipeline consumer, and a `seckill worker`:
//!   two consumers, so a frozen one has its pending orders reclaimed by the other and then
//!   wakes up believing they are still its own. Instance 0 reaches Redis through an
//!   in-process fault proxy ([`super::proxy`]), so the network between it and Redis can fail
//!   while the others' does not;
//! - **sentinel**: the same, except that Redis is a primary and one or two replicas (all AOF)
//!   behind three sentinels ([`super::sentinel`]), and every seckill process finds the primary
//!   through them (no fault proxy: the sentinels hand out the primary's real address);
//! - **cluster**: the same on a Redis Cluster of three masters, each with a replica
//!   ([`super::shards`]); every seckill process is given all six nodes as seeds.
//!
//! Every process keeps its port and directory across restarts, as a supervisor would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::BTreeMap;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Context;
use tokio::sync::Mutex;

use super::disk::DataDisk;
use super::proxy::{Mode, Proxy};
use super::schedule::{Deployment, Target};
use super::sentinel;
use crate::testing::process::Proc;
use crate::testing::{listening, log_tail};

mod layout;

pub use super::servers::Fsync;
use super::servers::{create_db, redis_ready};
use super::shards;

pub const ADMIN_TOKEN: &str = "chaos-admin-token";

/// Orders left unacknowledged this long by a consumer are taken over by the other one.
pub const RECLAIM_AFTER_MS: u64 = 2_000;

pub struct Cluster {
    pub deployment: Deployment,
    /// Each process behind its own lock: faults on one process apply one after the other,
    /// faults on different processes overlap.
    procs: BTreeMap<Target, Mutex<Option<Proc>>>,
    pub ports: Vec<u16>,
    pub redis_port: u16,
    pub pg_port: u16,
    /// Embedded: the SQLite ledger file.
    pub sqlite: Option<PathBuf>,
    /// Embedded: the data directory's disk (a real tmpfs, or the fault hook's flag).
    pub disk: Option<DataDisk>,
    /// Embedded: while this file exists, every ledger batch ends in a disk I/O error at its
    /// commit (the server's `SECKILL_FAULTS` hook `io_error_while`).
    pub io_error_flag: Option<PathBuf>,
    /// Embedded, with clock steps: the offset file of the server's libfaketime.
    pub clock_file: Option<PathBuf>,
    /// Scale-out: the PostgreSQL ledger.
    pub pg_url: Option<String>,
    /// Scale-out: the fault proxy instance 0 reaches Redis through.
    pub proxy: Option<Proxy>,
    /// Sentinel: the ports of the Redis nodes and the sentinels.
    pub sentinel: Option<sentinel::Ports>,
    /// Cluster: the ports of the six Redis nodes.
    pub shards: Option<Vec<u16>>,
    /// Exits nobody asked for: (a crash, description).
    exits: parking_lot::Mutex<Vec<(bool, String)>>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// `replicas`: Sentinel's replicas of the primary. `wait_replicas`:
    /// `--redis-wait-replicas` of the seckill processes (None: their default).
    pub async fn start(
        deployment: Deployment,
        replicas: u8,
        fsync: Fsync,
        wait_replicas: Option<u32>,
        clock_steps: bool,
    ) -> anyhow::Result<Cluster> {
        let exe = std::env::current_exe().context("the seckill binary's path")?;
        // As root, PostgreSQL runs as `postgres`, which must reach its directory: /tmp is
        // world-traversable whatever TMPDIR says.
        let dir = tempfile::Builder::new()
            .prefix("seckill-chaos")
            .tempdir_in("/tmp")?;
        let mut c = Cluster {
            deployment,
            procs: BTreeMap::new(),
            ports: Vec::new(),
            redis_port: 0,
            pg_port: 0,
            sqlite: None,
            disk: None,
            io_error_flag: None,
            clock_file: None,
            pg_url: None,
            proxy: None,
            sentinel: None,
            shards: None,
            exits: parking_lot::Mutex::new(Vec::new()),
            dir,
        };
        match deployment {
            Deployment::Embedded => c.embedded(&exe, clock_steps)?,
            Deployment::ScaleOut | Deployment::Sentinel | Deployment::Cluster => {
                let (redis, via_proxy) = c.redis(replicas, fsync).await?;
                c.scale_out(&exe, (&redis, &via_proxy), wait_replicas)?;
            }
        }
        for t in c.targets() {
            c.start_target(t).await?;
            if let (Target::Sentinel(2), Some(ports)) = (t, &c.sentinel) {
                // The sentinels found the replica and each other before anything uses them.
                sentinel::settle(ports).await?;
            }
            if let (Target::Node(n), Some(ports)) = (t, &c.shards) {
                if usize::from(n) + 1 == ports.len() {
                    shards::create(ports).await?;
                }
            }
        }
        Ok(c)
    }

    /// The processes, in the order they start.
    pub fn targets(&self) -> Vec<Target> {
        match self.deployment {
            Deployment::Embedded => vec![Target::Instance(0)],
            Deployment::ScaleOut => vec![
                Target::Redis,
                Target::Postgres,
                Target::Instance(0),
                Target::Instance(1),
                Target::Worker,
            ],
            Deployment::Cluster => {
                let nodes = self.shards.as_ref().map_or(0, Vec::len);
                let mut v: Vec<Target> = (0..nodes as u8).map(Target::Node).collect();
                v.extend([
                    Target::Postgres,
                    Target::Instance(0),
                    Target::Instance(1),
                    Target::Worker,
                ]);
                v
            }
            Deployment::Sentinel => {
                let nodes = self.sentinel.as_ref().map_or(0, |p| p.nodes.len());
                let mut v: Vec<Target> = (0..nodes as u8).map(Target::Node).collect();
                v.extend([
                    Target::Sentinel(0),
                    Target::Sentinel(1),
                    Target::Sentinel(2),
                    Target::Postgres,
                    Target::Instance(0),
                    Target::Instance(1),
                    Target::Worker,
                ]);
                v
            }
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    /// The lock of a target's process (None inside for the disk).
    pub fn slot(&self, t: Target) -> &Mutex<Option<Proc>> {
        &self.procs[&t]
    }

    /// Starts a process that is not running and waits until it serves.
    pub async fn start_target(&self, t: Target) -> anyhow::Result<()> {
        let mut slot = self.slot(t).lock().await;
        match slot.as_mut() {
            Some(p) => self.start_proc(t, p).await,
            None => Ok(()),
        }
    }

    /// Starts `p` (the process of `t`, whose lock the caller holds) if it is not running,
    /// and waits until it serves. Like a supervisor (systemd's `Restart=always`), it starts
    /// the process again when it exits on its own meanwhile (a `serve` that cannot reach
    /// Redis at start exits; a killed PostgreSQL's backends may hold its shared memory for a
    /// moment); every such exit is recorded.
    pub async fn start_proc(&self, t: Target, p: &mut Proc) -> anyhow::Result<()> {
        p.thaw();
        if p.is_running() {
            return Ok(());
        }
        let port = match t {
            Target::Instance(i) => self.ports[i as usize],
            _ => 0,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        p.start()?;
        let started = Instant::now();
        loop {
            if let Some(status) = p.exited_by_itself() {
                self.record_exit(t, status, &p.spec.log);
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{t} keeps exiting; its log ends with:\n{}",
                    log_tail(&p.spec.log, 20)
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                p.start()?;
                continue;
            }
            let ready = match t {
                Target::Instance(_) => serving(port).await,
                Target::Redis => redis_ready(self.redis_port).await,
                Target::Node(i) => match (&self.sentinel, &self.shards) {
                    (Some(s), _) => redis_ready(s.nodes[i as usize]).await,
                    (_, Some(ports)) => redis_ready(ports[i as usize]).await,
                    _ => true,
                },
                Target::Sentinel(i) => match &self.sentinel {
                    Some(s) => redis_ready(s.sentinels[i as usize]).await,
                    None => true,
                },
                Target::Postgres => {
                    listening(self.pg_port).await && create_db(self.pg_port).await.is_ok()
                }
                // The worker has no port: alive for a second is started. (A snapshot restore
                // starts no process of its own.)
                Target::Worker
                | Target::Snapshot
                | Target::Clock
                | Target::Disk
                | Target::Link
                | Target::Primary
                | Target::Master
                | Target::Replica => started.elapsed() > Duration::from_secs(1),
            };
            if ready {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{t} did not become ready in 120 s; its log ends with:\n{}",
                log_tail(&p.spec.log, 20)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn record_exit(&self, t: Target, status: ExitStatus, log: &Path) {
        // Status 1 is a clean refusal (a dependency unreachable, logged); anything else
        // (a panic, a signal nobody sent) is a crash.
        let crash = status.code() != Some(1);
        let line = format!(
            "{t} exited by itself ({status}){}",
            if crash {
                format!(": a crash; its log ends with:\n{}", log_tail(log, 15))
            } else {
                ", restarted as a supervisor would".to_owned()
            }
        );
        tracing::warn!("{line}");
        self.exits.lock().push((crash, line));
    }

    /// Supervises every process not held by the nemesis until `stop` is set: one that exited
    /// on its own is started again.
    pub async fn supervise(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            for t in self.targets() {
                if let Ok(mut slot) = self.slot(t).try_lock() {
                    if let Some(p) = slot.as_mut() {
                        if let Some(status) = p.exited_by_itself() {
                            self.record_exit(t, status, &p.spec.log);
                            if let Err(e) = self.start_proc(t, p).await {
                                tracing::error!(%t, error = %format!("{e:#}"), "cannot restart");
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every exit nobody asked for so far: (crash, description).
    pub async fn exits(&self) -> Vec<(bool, String)> {
        for t in self.targets() {
            if let Some(p) = self.slot(t).lock().await.as_mut() {
                if let Some(status) = p.exited_by_itself() {
                    self.record_exit(t, status, &p.spec.log);
                }
            }
        }
        self.exits.lock().clone()
    }

    /// Every process running and thawed, the disk freed.
    pub async fn heal(&self) -> anyhow::Result<()> {
        if let Some(d) = &self.disk {
            d.free()?;
        }
        if let Some(p) = &self.proxy {
            p.set(Mode::Pass);
        }
        for t in self.targets() {
            self.start_target(t).await?;
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Copies every process's log (the servers', Redis's, the sentinels', PostgreSQL's) to a
    /// new directory that outlives the deployment, for a schedule with findings; its path.
    pub fn keep_logs(&self) -> anyhow::Result<PathBuf> {
        let kept = tempfile::Builder::new()
            .prefix("seckill-chaos-logs")
            .tempdir_in("/tmp")?
            .keep();
        for entry in std::fs::read_dir(self.dir.path())? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "log") {
                if let Some(name) = path.file_name() {
                    std::fs::copy(&path, kept.join(name))?;
                }
            }
        }
        Ok(kept)
    }
}

/// An HTTP answer (any status) from `/healthz`.
async fn serving(port: u16) -> bool {
    let url = format!("http://127.0.0.1:{port}/healthz");
    reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_ok()
}
