//! Throwaway redis-server and PostgreSQL instances for the scale-out tests.
//!
//! Each test gets a fresh redis-server (free port, temp dir, killed on drop) and a fresh
//! PostgreSQL database in one cluster per test process (`initdb` + `postgres` on a free port in
//! a temp dir). How each server is started, killed and started again is the fault campaign's
//! too (`seckill::testing::{process, servers}`): these fixtures add only the synchronous waits
//! a test needs. A missing binary fails the test with the command that installs it; nothing is
//! skipped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use seckill::testing::process::{Proc, Spec};

/// Connection settings for a test's own Redis commands. redis-rs's default response timeout
/// (500 ms) would fail a test whose command waits behind a storm on a busy machine; a test
/// that hangs is stopped by its own deadlines instead.
pub fn patient() -> ::redis::AsyncConnectionConfig {
    ::redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)))
}

/// A free loopback port whose +10000 neighbour (Redis Cluster bus) is free too.
pub fn free_port() -> u16 {
    seckill::testing::free_port_with_bus().expect("bind a free port")
}

/// A server binary (PostgreSQL's versioned directories first, then PATH); fails the test with
/// the install hint when it is missing.
pub fn find_binary(name: &str) -> PathBuf {
    seckill::testing::find_binary(name).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Starts the process `spec` describes; fails the test if it cannot.
pub fn start(spec: anyhow::Result<Spec>) -> Proc {
    let mut p = Proc::new(spec.unwrap_or_else(|e| panic!("{e:#}")));
    p.start().unwrap_or_else(|e| panic!("{e:#}"));
    p
}

pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} did not become ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to `limit` for `child` to exit; kills it and answers `None` if it does not.
pub fn exit_within(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends one inline command to a Redis on `port` and returns the raw reply.
pub fn redis_raw(port: u16, command: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 65536];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The last `n` lines of the file at `path` (empty if it cannot be read).
pub fn tail(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

mod postgres;
mod redis;
mod sentinel;

pub use postgres::{pg, PgServer};
pub use redis::{RedisCluster, RedisServer};
pub use sentinel::SentinelSetup;
