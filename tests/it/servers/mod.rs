//! Throwaway redis-server and PostgreSQL instances for the scale-out tests.
//!
//! Each test gets a fresh redis-server (free port, temp dir, killed on drop) and a fresh
//! PostgreSQL database in one cluster per test process (`initdb` + `postgres` on a free port in
//! a temp dir). PostgreSQL refuses to run as root, so as root the helper runs its binaries as
//! the `postgres` user. Every server is started from a dedicated thread that waits on it, with
//! a parent-death signal, so none outlives the test binary. A missing binary fails the test
//! with the command that installs it; nothing is skipped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use seckill::testing::INSTALL_HINT;

/// A free loopback port whose +10000 neighbour (Redis Cluster bus) is free too.
pub fn free_port() -> u16 {
    seckill::testing::free_port_with_bus().expect("bind a free port")
}

/// A server binary (PostgreSQL's versioned directories first, then PATH); fails the test with
/// the install hint when it is missing.
pub fn find_binary(name: &str) -> PathBuf {
    seckill::testing::find_binary(name).unwrap_or_else(|e| panic!("{e:#}"))
}

/// (uid, gid) to run PostgreSQL as when this process is root.
pub fn postgres_user() -> Option<(u32, u32)> {
    seckill::testing::postgres_user().unwrap_or_else(|e| panic!("{e:#}; {INSTALL_HINT}"))
}

pub fn as_user(cmd: &mut Command, user: Option<(u32, u32)>, death_signal: i32) {
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = user {
                if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // After setuid, which clears it: die with the thread that started us.
            libc::prctl(libc::PR_SET_PDEATHSIG, death_signal);
            Ok(())
        });
    }
}

/// A server process started from its own waiting thread.
pub struct Daemon {
    pub pid: u32,
    exited: parking_lot::Mutex<mpsc::Receiver<ExitStatus>>,
}

impl Daemon {
    pub fn spawn(mut cmd: Command, user: Option<(u32, u32)>, death: i32, log: &Path) -> Daemon {
        let log = std::fs::File::create(log).expect("server log file");
        cmd.stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null());
        as_user(&mut cmd, user, death);
        let (pid_tx, pid_rx) = mpsc::channel();
        let (exit_tx, exited) = mpsc::channel();
        std::thread::spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let _ = pid_tx.send(Ok(child.id()));
                if let Ok(status) = child.wait() {
                    let _ = exit_tx.send(status);
                }
            }
            Err(e) => {
                let _ = pid_tx.send(Err(e));
            }
        });
        let pid = pid_rx.recv().unwrap().expect("the server binary starts");
        Daemon {
            pid,
            exited: parking_lot::Mutex::new(exited),
        }
    }

    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.pid as i32, sig) };
    }

    /// Sends `sig` and waits for the process to exit.
    pub fn stop(&self, sig: i32) {
        self.signal(sig);
        let _ = self.exited.lock().recv_timeout(Duration::from_secs(60));
    }
}

pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} did not become ready");
        std::thread::sleep(Duration::from_millis(50));
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

mod postgres;
mod redis;

pub use postgres::{pg, PgServer};
pub use redis::{RedisCluster, RedisServer, SentinelSetup};
