//! The third-party servers of the scale-out deployment: how redis-server and a throwaway
//! PostgreSQL are started (and restarted on the same port and directory), and when each is
//! ready. Kept apart from `cluster.rs`, which only decides what runs and in which order.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::procs::Spec;
use crate::testing::{find_binary, postgres_user};

/// Redis's AOF fsync policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fsync {
    Always,
    Everysec,
}

pub async fn redis_ready(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    // PING answers LOADING while the AOF is replayed.
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .is_ok()
}

/// Redis's name of an `appendfsync` policy.
pub fn fsync_name(fsync: Fsync) -> &'static str {
    match fsync {
        Fsync::Always => "always",
        Fsync::Everysec => "everysec",
    }
}

/// A connection to the redis-server (or sentinel) on `port`, with short timeouts.
pub async fn node_conn(port: u16) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let cfg = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Duration::from_secs(1))
        .set_response_timeout(Duration::from_secs(2));
    Ok(client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await?)
}

/// A redis-server (or sentinel, with `--sentinel` in `extra`) run from its own config file,
/// `<root>/<name>/<file>` holding `conf`, which it may rewrite (a node's role after a
/// failover, a Cluster node's `nodes.conf` beside it), as a supervisor's would.
pub fn conf_spec(
    root: &Path,
    name: &str,
    (file, conf): (&str, String),
    extra: &[&str],
    log: std::path::PathBuf,
) -> anyhow::Result<Spec> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(file);
    std::fs::write(&file, conf.replace("{dir}", &dir.display().to_string()))?;
    let mut args = vec![file.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    Ok(Spec {
        name: name.to_owned(),
        program: find_binary("redis-server")?,
        args,
        env: vec![],
        user: None,
        log,
    })
}

pub fn redis_spec(root: &Path, port: u16, fsync: Fsync) -> anyhow::Result<Spec> {
    let dir = root.join("redis");
    std::fs::create_dir_all(&dir)?;
    let fsync = fsync_name(fsync);
    let args = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--protected-mode",
        "no",
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync,
        "--maxmemory-policy",
        "noeviction",
        "--dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Ok(Spec {
        name: "redis-server".into(),
        program: find_binary("redis-server")?,
        args,
        env: vec![],
        user: None,
        log: root.join("redis.log"),
    })
}

pub fn postgres_spec(root: &Path, port: u16) -> anyhow::Result<Spec> {
    let user = postgres_user()?;
    let pgdir = root.join("pg");
    std::fs::create_dir_all(&pgdir)?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(root, Some(uid), Some(gid))?;
        std::os::unix::fs::chown(&pgdir, Some(uid), Some(gid))?;
    }
    let data = pgdir.join("data");
    let mut initdb = std::process::Command::new(find_binary("initdb")?);
    initdb
        .args([
            "-U", "postgres", "-A", "trust", "-N", "-E", "UTF8", "--locale", "C", "-D",
        ])
        .arg(&data)
        .stdout(std::process::Stdio::null());
    if let Some((uid, gid)) = user {
        use std::os::unix::process::CommandExt;
        initdb.uid(uid).gid(gid);
    }
    let out = initdb.output().context("run initdb")?;
    anyhow::ensure!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // fsync off: the nemesis kills processes, never the machine, so the page cache survives
    // every fault it injects, and the campaign runs faster on a shared machine.
    let args = [
        "-D",
        &data.display().to_string(),
        "-p",
        &port.to_string(),
        "-c",
        "listen_addresses=127.0.0.1",
        "-k",
        &pgdir.display().to_string(),
        "-c",
        "fsync=off",
        "-c",
        "max_connections=200",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Ok(Spec {
        name: "postgres".into(),
        program: find_binary("postgres")?,
        args,
        env: vec![],
        user,
        log: pgdir.join("postgres.log"),
    })
}

/// Creates the `seckill` database once PostgreSQL accepts connections (again).
pub async fn create_db(port: u16) -> anyhow::Result<()> {
    use sqlx::Connection;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let mut conn = None;
    for _ in 0..200 {
        match sqlx::PgConnection::connect(&url).await {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            // Starting up, or recovering after a kill.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let mut conn = conn.context("PostgreSQL accepts no connection")?;
    let exists: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = 'seckill'")
            .fetch_optional(&mut conn)
            .await?;
    if exists.is_none() {
        sqlx::query("CREATE DATABASE seckill")
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}
