//! The test kit: what the integration tests (`tests/it/servers/`) and the fault campaign
//! (`crate::chaos`) both need to run real servers on this machine: finding a server binary,
//! the user PostgreSQL must run as when seckill runs as root, free ports, whether a port
//! listens, the tail of a log. One copy, so a server found (or refused with its install hint)
//! by one is found the same way by the other.

use std::path::{Path, PathBuf};

use anyhow::Context;

pub mod process;
pub mod servers;

/// What to install when a server binary is missing.
pub const INSTALL_HINT: &str =
    "install it with: apt-get install redis-server redis-sentinel postgresql";

/// A free loopback port.
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(l.local_addr()?.port())
}

/// A free loopback port whose +10000 neighbour (a Redis Cluster node's bus port) is free too.
pub fn free_port_with_bus() -> anyhow::Result<u16> {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
        let port = l.local_addr()?.port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
}

/// A server binary: PostgreSQL's versioned directories first, then PATH.
pub fn find_binary(name: &str) -> anyhow::Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.exists())
        .with_context(|| format!("`{name}` is not installed; {INSTALL_HINT}"))
}

/// (uid, gid) of the `postgres` user when this process is root.
pub fn postgres_user() -> anyhow::Result<Option<(u32, u32)>> {
    // SAFETY: plain libc queries.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = c"postgres";
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    anyhow::ensure!(
        !pw.is_null(),
        "running as root needs a `postgres` user for PostgreSQL (apt-get install postgresql)"
    );
    Ok(Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) }))
}

/// Whether something accepts TCP connections on `port`.
pub async fn listening(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_ok()
}

/// The last `n` lines of a log, for error messages.
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
