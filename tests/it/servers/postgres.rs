//! A throwaway PostgreSQL cluster (`initdb` + `postgres` in a temp dir, as the `postgres` user
//! when the tests run as root) and one fresh database per test.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::{as_user, find_binary, free_port, postgres_user, wait_until, Daemon};

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
        // As root the server runs as `postgres`, which must be able to reach its directory:
        // /tmp is world-traversable whatever TMPDIR says.
        let dir = match user {
            Some(_) => tempfile::Builder::new()
                .prefix("seckill-pg")
                .tempdir_in("/tmp"),
            None => tempfile::tempdir(),
        }
        .unwrap();
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
