//! The third-party servers of the scale-out deployment: how redis-server and a throwaway
//! PostgreSQL are started (and restarted on the same port and directory), and when each is
//! ready. Kept apart from `cluster.rs`, which only decides what runs and in which order.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::testing::process::Spec;
use crate::testing::servers;

/// Redis's AOF fsync policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fsync {
    Always,
    Everysec,
}

pub async fn redis_ready(port: u16) -> bool {
    let Ok(mut conn) = node_conn(port).await else {
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
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    Ok(client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await?)
}

/// The single redis-server of the scale-out deployment: AOF with the campaign's fsync policy,
/// never evicting, its data in `<root>/redis`.
pub fn redis_spec(root: &Path, port: u16, fsync: Fsync) -> anyhow::Result<Spec> {
    let persistence = ["--appendonly", "yes", "--appendfsync", fsync_name(fsync)];
    let extra: Vec<&str> = persistence
        .into_iter()
        .chain(["--maxmemory-policy", "noeviction"])
        .collect();
    servers::redis_spec(
        "redis-server",
        &root.join("redis"),
        port,
        &extra,
        root.join("redis.log"),
    )
}

/// The deployment's PostgreSQL, a new cluster in `<root>/pg`.
pub fn postgres_spec(root: &Path, port: u16) -> anyhow::Result<Spec> {
    if let Some((uid, gid)) = crate::testing::postgres_user()? {
        // The `postgres` user must reach `<root>/pg`.
        std::os::unix::fs::chown(root, Some(uid), Some(gid))?;
    }
    let pgdir = root.join("pg");
    let user = servers::postgres_init(&pgdir)?;
    servers::postgres_spec(&pgdir, port, user, &["max_connections=200"])
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
