//! Which lock store a `seckill lock` subcommand talks to: a running seckill, Redis, Redlock
//! masters or an embedded data directory, named by exactly one flag.

use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::guard::secret::Secret;
use crate::lock::Locks;

/// Where the locks are.
#[derive(Debug, Clone, Args)]
pub struct LockTarget {
    /// A running seckill (its /v1/locks routes, with the admin token).
    #[arg(long, env = "SECKILL_URL")]
    pub url: Option<String>,
    /// Admin token of the server at --url.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<Secret>,
    /// Redis directly: one node, Cluster seed nodes, or Sentinels with --redis-sentinel.
    #[arg(
        long,
        env = "SECKILL_REDIS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis: Vec<String>,
    /// The --redis URLs are Sentinels; lock on the primary they call this name.
    #[arg(long, env = "SECKILL_REDIS_SENTINEL")]
    pub redis_sentinel: Option<String>,
    /// Speak the Cluster protocol with a single --redis seed URL.
    #[arg(long, env = "SECKILL_REDIS_CLUSTER")]
    pub redis_cluster: bool,
    /// Independent Redis masters for Redlock (comma-separated, e.g. three).
    #[arg(
        long,
        env = "SECKILL_LOCK_REDIS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub lock_redis: Vec<String>,
    /// The embedded store of a data directory no server is using.
    #[arg(long, env = "SECKILL_DATA")]
    pub data: Option<std::path::PathBuf>,
    /// TLS to Redis (`rediss://` URLs): a private CA, a client certificate.
    #[command(flatten)]
    pub redis_tls: crate::redis_conn::tls::RedisTlsArgs,
}

impl LockTarget {
    /// Opens the one store the flags name.
    pub async fn open(&self) -> anyhow::Result<Locks> {
        let chosen = [
            self.url.is_some(),
            !self.redis.is_empty(),
            !self.lock_redis.is_empty(),
            self.data.is_some(),
        ];
        anyhow::ensure!(
            chosen.iter().filter(|c| **c).count() == 1,
            "name exactly one lock store: --url, --redis, --lock-redis or --data"
        );
        if let Some(url) = &self.url {
            let token = self
                .admin_token
                .as_ref()
                .context("--url needs --admin-token (or SECKILL_ADMIN_TOKEN)")?;
            let http = crate::lock::http::HttpLocks::new(url, token.expose());
            return Ok(Locks::new(Arc::new(http)));
        }
        crate::redis_conn::tls::configure(&self.redis_tls)?;
        if !self.redis.is_empty() {
            let target = crate::engine::scale_out::RedisTarget {
                urls: self.redis.clone(),
                cluster: self.redis_cluster,
                sentinel_master: self.redis_sentinel.clone(),
            };
            let conn = crate::engine::scale_out::RedisConn::connect(&target).await?;
            let store = crate::lock::redis::RedisLocks::new(conn);
            return Ok(Locks::new(Arc::new(store)));
        }
        if !self.lock_redis.is_empty() {
            let store = crate::lock::redlock::Redlock::new(&self.lock_redis)?;
            return Ok(Locks::new(Arc::new(store)));
        }
        let dir = self.data.as_ref().expect("checked above");
        let ledger = crate::ledger::SqliteLedger::open(dir, true).await?;
        let store = crate::lock::embedded::EmbeddedLocks::new(Arc::new(ledger));
        Ok(Locks::new(Arc::new(store)))
    }
}
