//! Redis Sentinel: find the current primary through the sentinels, and find it again after a
//! failover.
//!
//! The connection to the primary is a plain multiplexed connection, deliberately without
//! automatic reconnection (which would keep knocking at a dead primary's address). When a
//! request fails the way a failover makes requests fail — connection refused or dropped, a
//! timeout, or `READONLY` because the old primary came back as a replica — the sentinels are
//! asked for the primary again and a fresh connection replaces the broken one. That request
//! still fails (its outcome may be unknown, see the claim path); the next one goes to the new
//! primary, where scripts are reloaded on the first NOSCRIPT.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline,
    RedisError, Value,
};
use tokio::sync::{Mutex, RwLock};

pub struct Sentinel {
    sentinels: Vec<ConnectionInfo>,
    master: String,
    current: RwLock<(ConnectionAddr, MultiplexedConnection)>,
    resolving: Mutex<()>,
}

fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Duration::from_secs(2))
        .set_response_timeout(Duration::from_secs(5))
}

fn moved_away(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.code() == Some("READONLY")
}

impl Sentinel {
    /// `sentinels` are the sentinels' URLs; their db and credentials are used for the primary.
    pub async fn connect(sentinels: &[String], master: &str) -> anyhow::Result<Arc<Self>> {
        let sentinels: Vec<ConnectionInfo> = sentinels
            .iter()
            .map(|u| u.as_str().into_connection_info())
            .collect::<Result<_, _>>()
            .context("invalid sentinel URL")?;
        let addr = resolve(&sentinels, master).await?;
        let conn = open(&sentinels[0], addr.clone()).await?;
        tracing::info!(master, primary = %addr, "found the Redis primary through Sentinel");
        Ok(Arc::new(Self {
            sentinels,
            master: master.to_owned(),
            current: RwLock::new((addr, conn)),
            resolving: Mutex::new(()),
        }))
    }

    async fn conn(&self) -> MultiplexedConnection {
        self.current.read().await.1.clone()
    }

    /// Asks the sentinels where the primary is and connects to it afresh.
    async fn follow(&self) {
        let Ok(_one_at_a_time) = self.resolving.try_lock() else {
            return;
        };
        let addr = match resolve(&self.sentinels, &self.master).await {
            Ok(a) => a,
            Err(e) => return tracing::warn!(error = %format!("{e:#}"), "no sentinel answered"),
        };
        match open(&self.sentinels[0], addr.clone()).await {
            Ok(conn) => {
                let mut current = self.current.write().await;
                if current.0 != addr {
                    tracing::warn!(master = %self.master, primary = %addr, "Redis primary moved; switched to it");
                }
                *current = (addr, conn);
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), primary = %addr, "cannot reach the Redis primary yet")
            }
        }
    }

    pub async fn request(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        let result = self.conn().await.req_packed_command(cmd).await;
        if let Err(e) = &result {
            if moved_away(e) {
                self.follow().await;
            }
        }
        result
    }

    pub async fn request_many(
        &self,
        cmd: &Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let result = self
            .conn()
            .await
            .req_packed_commands(cmd, offset, count)
            .await;
        if let Err(e) = &result {
            if moved_away(e) {
                self.follow().await;
            }
        }
        result
    }
}

async fn resolve(sentinels: &[ConnectionInfo], master: &str) -> anyhow::Result<ConnectionAddr> {
    let mut last = None;
    for s in sentinels {
        let attempt = async {
            let client = redis::Client::open(s.clone())?;
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&connection_config())
                .await?;
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async(&mut conn)
                .await?;
            let (host, port) =
                addr.with_context(|| format!("sentinel does not know {master:?}"))?;
            anyhow::Ok(ConnectionAddr::Tcp(host, port))
        };
        match attempt.await {
            Ok(addr) => return Ok(addr),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no sentinel given")))
}

async fn open(
    template: &ConnectionInfo,
    addr: ConnectionAddr,
) -> anyhow::Result<MultiplexedConnection> {
    let info = ConnectionInfo {
        addr,
        redis: template.redis.clone(),
    };
    redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(&connection_config())
        .await
        .context("cannot connect to the Redis primary")
}
