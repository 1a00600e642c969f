//! Connections to Redis: one type for a single node, a Sentinel-managed primary and a Redis
//! Cluster, so every script call and stream command is written once. The gate
//! (`engine::scale_out`), the order pipeline and the Redis lock stores all connect here.
//!
//! A single node and a Sentinel primary go through [`Link`], which refuses requests at once
//! while Redis is unreachable and reconnects by itself within about 250 ms of Redis answering
//! again (see [`link`] for why redis-rs's `ConnectionManager` is not used); a cluster uses the
//! async cluster client, which follows slot moves and reconnects to a node on the next request
//! for its slots, with retry waits shortened from its 1.28 s minimum to 20–200 ms, and which is
//! made again if it stops answering altogether (`cluster.rs`). Both are cheap to clone and
//! multiplex many concurrent requests over one socket.

use std::sync::Arc;

use anyhow::Context;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

mod cluster;
pub mod link;
pub mod promotable;
mod sentinel;
pub mod tls;

use cluster::ClusterLink;
use link::{Endpoint, Health, Link, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

/// How the gate is reached: `urls` are one node, or cluster seed nodes.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    pub urls: Vec<String>,
    /// Use the cluster protocol even with one seed URL.
    pub cluster: bool,
    /// `urls` are Redis Sentinels; the primary is the one they name so.
    pub sentinel_master: Option<String>,
}

/// `urls` parsed.
fn infos(urls: &[String]) -> redis::RedisResult<Vec<redis::ConnectionInfo>> {
    urls.iter()
        .map(|u| u.as_str().into_connection_info())
        .collect()
}

impl RedisTarget {
    pub fn is_cluster(&self) -> bool {
        self.sentinel_master.is_none() && (self.cluster || self.urls.len() > 1)
    }
}

#[derive(Clone)]
pub enum RedisConn {
    /// A single node or a Sentinel-managed primary.
    Link(Arc<Link>),
    /// The same link, for claims: commands go out only once the Redis behind it was checked
    /// against the ledger since the last reconnect (`fresh.rs`).
    Gated(Arc<Link>),
    /// A Redis Cluster, made again when it stops answering (`cluster.rs`).
    Cluster(Arc<ClusterLink>),
}

impl RedisConn {
    /// Opens a new connection (each caller that needs its own socket calls this again).
    pub async fn connect(target: &RedisTarget) -> anyhow::Result<Self> {
        anyhow::ensure!(!target.urls.is_empty(), "no Redis URL given");
        if let Some(master) = &target.sentinel_master {
            anyhow::ensure!(
                !target.cluster,
                "--redis-sentinel and --redis-cluster exclude each other"
            );
            let sentinels = infos(&target.urls).context("invalid sentinel URL")?;
            tls::one_scheme(&sentinels)?;
            let endpoint = Endpoint::Sentinel {
                sentinels,
                master: master.clone(),
            };
            let link = Link::connect(endpoint)
                .await
                .context("cannot reach the Redis primary through Sentinel")?;
            tracing::info!(master, "found the Redis primary through Sentinel");
            return Ok(Self::Link(link));
        }
        if target.is_cluster() {
            let over_tls =
                tls::one_scheme(&infos(&target.urls).context("invalid Redis Cluster URL")?)?;
            tls::provider();
            let mut builder = ClusterClient::builder(target.urls.clone());
            if let Some(certs) = tls::certs().filter(|_| over_tls) {
                builder = builder.certs(certs);
            }
            let client = builder
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                // No retries inside the client: after a connection reset it cannot know whether
                // the script it sent ran, and a retry could run a claim batch (or a release, a
                // restock) twice: a second order for one claim, or `already_claimed` told to the
                // buyer whose first run won. A failed call is answered as such (a claim: the
                // outcome-unknown 503, which a retry with the same Idempotency-Key settles), and
                // the client refreshes its slot map for the next call.
                .retries(0)
                .build()
                .context("invalid Redis Cluster URLs")?;
            let conn = ClusterLink::connect(client)
                .await
                .context("cannot connect to the Redis Cluster")?;
            Ok(Self::Cluster(conn))
        } else {
            let info = target.urls[0]
                .as_str()
                .into_connection_info()
                .context("invalid --redis URL (expected redis://host:port[/db])")?;
            let link = Link::connect(Endpoint::Node(info))
                .await
                .context("cannot connect to Redis")?;
            Ok(Self::Link(link))
        }
    }

    /// Reachability changes of this connection (`None` for a cluster, whose client tracks
    /// each node itself).
    pub fn watch(&self) -> Option<tokio::sync::watch::Receiver<Health>> {
        match self {
            Self::Link(l) | Self::Gated(l) => Some(l.watch()),
            Self::Cluster(_) => None,
        }
    }

    /// The link behind this connection (`None` for a cluster).
    pub fn link(&self) -> Option<&Arc<Link>> {
        match self {
            Self::Link(l) | Self::Gated(l) => Some(l),
            Self::Cluster(_) => None,
        }
    }

    /// Whether this is a Redis Cluster connection (its scripts check the campaign's lineage,
    /// `lineage.rs`, instead of a link's check).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// This connection for claims: refused until Redis was checked against the ledger. A
    /// cluster is returned as is: its scripts check each campaign's lineage (`lineage.rs`).
    pub fn gated(&self) -> Self {
        match self {
            Self::Link(l) | Self::Gated(l) => Self::Gated(l.clone()),
            Self::Cluster(c) => Self::Cluster(c.clone()),
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Link(l) => Box::pin(l.request(cmd)),
            Self::Gated(l) => Box::pin(l.request_gated(cmd)),
            Self::Cluster(c) => Box::pin(c.request(cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            // Pipelines never carry claims.
            Self::Link(l) | Self::Gated(l) => Box::pin(l.request_many(cmd, offset, count)),
            Self::Cluster(c) => Box::pin(c.request_many(cmd, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Link(l) | Self::Gated(l) => l.db(),
            Self::Cluster(c) => c.db(),
        }
    }
}
