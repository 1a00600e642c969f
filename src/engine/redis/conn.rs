//! One connection type for a single Redis node, a Sentinel-managed primary and a Redis Cluster,
//! so every script call and stream command is written once.
//!
//! A single node uses redis-rs's `ConnectionManager`, which reconnects by itself after Redis
//! restarts or fails over; a cluster uses the async cluster client, which follows slot moves.
//! Both are cheap to clone and multiplex many concurrent requests over one socket.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::sentinel::Sentinel;

/// How the gate is reached: `urls` are one node, or cluster seed nodes.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    pub urls: Vec<String>,
    /// Use the cluster protocol even with one seed URL.
    pub cluster: bool,
    /// `urls` are Redis Sentinels; the primary is the one they name so.
    pub sentinel_master: Option<String>,
}

impl RedisTarget {
    pub fn is_cluster(&self) -> bool {
        self.sentinel_master.is_none() && (self.cluster || self.urls.len() > 1)
    }
}

#[derive(Clone)]
pub enum RedisConn {
    Single(Box<ConnectionManager>),
    Cluster(ClusterConnection),
    Sentinel(Arc<Sentinel>),
}

const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisConn {
    /// Opens a new connection (each caller that needs its own socket calls this again).
    pub async fn connect(target: &RedisTarget) -> anyhow::Result<Self> {
        anyhow::ensure!(!target.urls.is_empty(), "no Redis URL given");
        if let Some(master) = &target.sentinel_master {
            anyhow::ensure!(
                !target.cluster,
                "--redis-sentinel and --redis-cluster exclude each other"
            );
            return Ok(Self::Sentinel(
                Sentinel::connect(&target.urls, master).await?,
            ));
        }
        if target.is_cluster() {
            let client = ClusterClient::builder(target.urls.clone())
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(3)
                .build()
                .context("invalid Redis Cluster URLs")?;
            let conn = client
                .get_async_connection()
                .await
                .context("cannot connect to the Redis Cluster")?;
            Ok(Self::Cluster(conn))
        } else {
            let client = redis::Client::open(target.urls[0].as_str())
                .context("invalid --redis URL (expected redis://host:port[/db])")?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(CONNECT_TIMEOUT)
                .set_response_timeout(RESPONSE_TIMEOUT)
                .set_number_of_retries(2);
            let conn = ConnectionManager::new_with_config(client, config)
                .await
                .context("cannot connect to Redis")?;
            Ok(Self::Single(Box::new(conn)))
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(s) => Box::pin(s.request(cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Self::Sentinel(s) => Box::pin(s.request_many(cmd, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(_) => 0,
        }
    }
}
