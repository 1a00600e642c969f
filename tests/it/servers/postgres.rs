//! A throwaway PostgreSQL cluster (`initdb` + `postgres` in a temp dir, as the `postgres` user
//! when the tests run as root) and one fresh database per test.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use seckill::testing::process::Proc;
use seckill::testing::servers;

use super::{find_binary, free_port, start, wait_until};

/// A PostgreSQL cluster in a temp dir.
pub struct PgServer {
    pub port: u16,
    dir: tempfile::TempDir,
    proc: Mutex<Proc>,
}

impl PgServer {
    pub fn start() -> PgServer {
        Self::start_with(None)
    }

    /// A cluster that takes only TLS connections (`hostssl` in pg_hba.conf), serving the
    /// PEM certificate `cert` (its chain) and key `key`.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> PgServer {
        Self::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&std::path::Path, &std::path::Path)>) -> PgServer {
        let as_postgres = seckill::testing::postgres_user()
            .unwrap_or_else(|e| panic!("{e:#}"))
            .is_some();
        // As root the server runs as `postgres`, which must be able to reach its directory:
        // /tmp is world-traversable whatever TMPDIR says.
        let dir = match as_postgres {
            true => tempfile::Builder::new()
                .prefix("seckill-pg")
                .tempdir_in("/tmp"),
            false => tempfile::tempdir(),
        }
        .unwrap();
        let user = servers::postgres_init(dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
        let port = free_port();
        let mut settings: Vec<String> = [
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=400",
            "shared_buffers=64MB",
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some((cert, key)) = tls {
            let data = dir.path().join("data");
            for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
                let at = data.join(to);
                std::fs::copy(from, &at).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o600)).unwrap();
                if let Some((uid, gid)) = user {
                    std::os::unix::fs::chown(&at, Some(uid), Some(gid)).unwrap();
                }
            }
            let hba = data.join("pg_hba.conf");
            let rules = std::fs::read_to_string(&hba).unwrap();
            let only_tls: String = rules
                .lines()
                .map(|l| match l.strip_prefix("host ") {
                    Some(rest) => format!("hostssl {rest}\n"),
                    None => format!("{l}\n"),
                })
                .collect();
            std::fs::write(&hba, only_tls).unwrap();
            settings.push("ssl=on".into());
        }
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        let spec = servers::postgres_spec(dir.path(), port, user, &settings);
        let pg = PgServer {
            port,
            dir,
            proc: Mutex::new(start(spec)),
        };
        pg.wait_ready();
        pg
    }

    fn wait_ready(&self) {
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
        self.proc.lock().stop_blocking(libc::SIGINT);
    }

    pub fn restart(&mut self) {
        self.stop();
        self.proc.lock().start().expect("PostgreSQL starts again");
        self.wait_ready();
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
        // The name is made here, of the process id and a counter.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create a test database");
        self.url(&name)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Immediate shutdown: the backends exit and release their shared memory.
        self.proc.lock().stop_blocking(libc::SIGQUIT);
    }
}

/// The PostgreSQL cluster shared by this test process (one database per test).
static PG: OnceLock<PgServer> = OnceLock::new();

/// The shared cluster. A static is never dropped, so the cluster is stopped and its directory
/// (up to 1.5 GB after a full run) removed when the process exits (`atexit`), and directories
/// that earlier runs left behind (a test binary killed, or older builds) are removed before a
/// new one is made: left alone they once filled the disk of the machine CI runs on.
pub fn pg() -> &'static PgServer {
    PG.get_or_init(|| {
        remove_stale_dirs();
        let pg = PgServer::start();
        // SAFETY: registers a plain `extern "C"` function; it runs once, at exit.
        unsafe { libc::atexit(remove_shared) };
        pg
    })
}

extern "C" fn remove_shared() {
    if let Some(pg) = PG.get() {
        pg.proc.lock().stop_blocking(libc::SIGQUIT);
        let _ = std::fs::remove_dir_all(pg.dir.path());
    }
}

/// Removes `/tmp/seckill-pg*` directories older than ten minutes whose server is not running.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("seckill-pg"));
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(600));
        if ours && old && !postmaster_alive(&path.join("data")) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Whether the server whose pid `data/postmaster.pid` names is running.
fn postmaster_alive(data: &std::path::Path) -> bool {
    let Ok(pidfile) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let Some(pid) = pidfile
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
    else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}
