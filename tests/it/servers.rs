//! Throwaway redis-server and PostgreSQL instances for the scale-out tests.
//!
//! Each test gets a fresh redis-server (free port, temp dir, killed on drop) and a fresh
//! PostgreSQL database in one cluster per test process (`initdb` + `postgres` on a free port in
//! a temp dir). PostgreSQL refuses to run as root, so as root the helper runs its binaries as
//! the `postgres` user. Every server is started from a dedicated thread that waits on it, with
//! a parent-death signal, so none outlives the test binary. A missing binary fails the test
//! with the command that installs it; nothing is skipped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "install it with: apt-get install redis-server postgresql";

/// A free loopback port whose +10000 neighbour (Redis Cluster bus) is free too.
pub fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = l.local_addr().unwrap().port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn find_binary(name: &str) -> PathBuf {
    let mut pg_dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    pg_dirs.sort();
    for dir in pg_dirs.iter().rev() {
        if dir.join(name).exists() {
            return dir.join(name);
        }
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("`{name}` is not installed; {INSTALL_HINT}");
}

/// (uid, gid) to run PostgreSQL as when this process is root.
fn postgres_user() -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::ffi::CString::new("postgres").unwrap();
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root needs a `postgres` user for initdb; {INSTALL_HINT}"
    );
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn as_user(cmd: &mut Command, user: Option<(u32, u32)>, death_signal: i32) {
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
    fn spawn(mut cmd: Command, user: Option<(u32, u32)>, death: i32, log: &Path) -> Daemon {
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

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
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

/// A redis-server on a free port with its own directory.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    daemon: Option<Daemon>,
}

impl RedisServer {
    /// A plain server (no persistence) unless `args` say otherwise.
    pub fn start(args: &[&str]) -> RedisServer {
        let mut r = RedisServer {
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            args: args.iter().map(|s| s.to_string()).collect(),
            daemon: None,
        };
        r.boot();
        r
    }

    /// With AOF persistence fsynced on every write.
    pub fn start_aof() -> RedisServer {
        Self::start(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    fn boot(&mut self) {
        let mut cmd = Command::new(find_binary("redis-server"));
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args);
        let log = self.dir.path().join("redis.log");
        self.daemon = Some(Daemon::spawn(cmd, None, libc::SIGKILL, &log));
        let port = self.port;
        wait_until("redis-server", || {
            redis_raw(port, "PING").is_some_and(|r| r.starts_with("+PONG"))
        });
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// kill -9, then start again on the same port and directory.
    pub fn kill_and_restart(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop(libc::SIGKILL);
        }
        self.boot();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop(libc::SIGKILL);
        }
    }
}

/// Three Redis Cluster masters on loopback ports, slots spread by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        let mut cmd = Command::new(find_binary("redis-cli"));
        cmd.arg("--cluster").arg("create");
        for n in &nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = cmd
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(out.status.success(), "cluster create failed: {out:?}");
        for n in &nodes {
            let port = n.port;
            wait_until("the Redis Cluster", || {
                redis_raw(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
            });
        }
        RedisCluster { nodes }
    }

    /// The seed URLs, as `--redis` takes them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// A PostgreSQL cluster in a temp dir.
pub struct PgServer {
    pub port: u16,
    dir: tempfile::TempDir,
    daemon: Option<Daemon>,
    user: Option<(u32, u32)>,
}

impl PgServer {
    pub fn start() -> PgServer {
        let user = postgres_user();
        let dir = tempfile::tempdir().unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(find_binary("initdb"));
        initdb
            .args([
                "-U", "postgres", "-A", "trust", "-N", "-E", "UTF8", "--locale", "C", "-D",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        as_user(&mut initdb, user, libc::SIGKILL);
        let out = initdb.output().expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = PgServer {
            port: free_port(),
            dir,
            daemon: None,
            user,
        };
        pg.boot();
        pg
    }

    fn boot(&mut self) {
        let mut cmd = Command::new(find_binary("postgres"));
        cmd.arg("-D")
            .arg(self.dir.path().join("data"))
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
            ])
            .arg("-k")
            .arg(self.dir.path())
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ])
            .args(["-c", "max_connections=400", "-c", "shared_buffers=64MB"]);
        let log = self.dir.path().join("postgres.log");
        if let Some((uid, gid)) = self.user {
            std::fs::File::create(&log).unwrap();
            std::os::unix::fs::chown(&log, Some(uid), Some(gid)).unwrap();
        }
        self.daemon = Some(Daemon::spawn(cmd, self.user, libc::SIGQUIT, &log));
        let isready = find_binary("pg_isready");
        let port = self.port.to_string();
        wait_until("PostgreSQL", || {
            Command::new(&isready)
                .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    }

    /// Fast shutdown (connections are cut), as an outage looks to clients.
    pub fn stop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop(libc::SIGINT);
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.boot();
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A new empty database; its URL.
    pub async fn fresh_db(&self) -> String {
        use sqlx::Connection;
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut conn = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .expect("connect to the test PostgreSQL");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create a test database");
        self.url(&name)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop(libc::SIGQUIT);
        }
    }
}

/// The PostgreSQL cluster shared by this test process (one database per test).
pub fn pg() -> &'static PgServer {
    static PG: OnceLock<PgServer> = OnceLock::new();
    PG.get_or_init(PgServer::start)
}

/// A primary, one replica and one Sentinel watching them as `mymaster`.
pub struct SentinelSetup {
    pub primary: RedisServer,
    pub replica: RedisServer,
    pub sentinel_port: u16,
    _sentinel: Daemon,
    _dir: tempfile::TempDir,
}

impl SentinelSetup {
    pub const MASTER: &'static str = "mymaster";

    pub fn start() -> SentinelSetup {
        let aof = ["--appendonly", "yes", "--appendfsync", "always"];
        let primary = RedisServer::start(&aof);
        let primary_port = primary.port.to_string();
        let mut replica_args = aof.to_vec();
        replica_args.extend(["--replicaof", "127.0.0.1", &primary_port]);
        let replica = RedisServer::start(&replica_args);
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {m} 127.0.0.1 {primary_port} 1\n\
                 sentinel down-after-milliseconds {m} 1000\n\
                 sentinel failover-timeout {m} 5000\n",
                dir.path().display(),
                m = Self::MASTER
            ),
        )
        .unwrap();
        let mut cmd = Command::new(find_binary("redis-server"));
        cmd.arg(&conf).arg("--sentinel");
        let sentinel = Daemon::spawn(cmd, None, libc::SIGKILL, &dir.path().join("sentinel.log"));
        let replica_port = replica.port.to_string();
        wait_until("the Sentinel to see the replica", || {
            redis_raw(port, &format!("SENTINEL replicas {}", Self::MASTER))
                .is_some_and(|r| r.contains(&replica_port))
        });
        SentinelSetup {
            primary,
            replica,
            sentinel_port: port,
            _sentinel: sentinel,
            _dir: dir,
        }
    }

    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    /// Waits until the replica has everything the primary acknowledged.
    pub fn wait_replicated(&self) {
        let reply = redis_raw(self.primary.port, "WAIT 1 10000").unwrap_or_default();
        assert!(reply.starts_with(":1"), "the replica caught up: {reply}");
    }

    /// kill -9 of the primary; returns once the Sentinel promoted the replica.
    pub fn kill_primary_and_fail_over(&mut self) {
        if let Some(d) = self.primary.daemon.take() {
            d.stop(libc::SIGKILL);
        }
        let replica_port = self.replica.port.to_string();
        let port = self.sentinel_port;
        wait_until("the Sentinel failover", || {
            redis_raw(
                port,
                &format!("SENTINEL get-master-addr-by-name {}", Self::MASTER),
            )
            .is_some_and(|r| r.contains(&replica_port))
        });
    }
}
