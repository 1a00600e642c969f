//! The Redis lock backend: one Redis, a Sentinel-managed primary or a Redis Cluster.
//!
//! Every operation is one Lua script (`lua/`), so a grant, an extension or a release is one
//! atomic step on the node that owns the name's slot: no `GET` then `DEL`, no `SETNX` then
//! `EXPIRE`. The fence counter never expires and is floored by the server clock (see
//! `acquire.lua`), which is what keeps fences increasing when Redis restarts without
//! persistence or Sentinel promotes a replica that had not received the last increments.
//!
//! Mutual exclusion is only as durable as Redis: a restart without AOF, or a failover to a
//! replica the grant had not reached, forgets the holder and the lock can be granted again
//! before the old lease ends. The fence exposes that to a fenced resource (docs/LOCKS.md).

use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::scripts::{Acquired, LockScripts};
use super::{new_token, now_ms, Attempt, Lease, LockBackend, LockError};
use crate::redis_conn::RedisConn;

/// Longest a lock operation waits for Redis.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

pub struct RedisLocks {
    conn: RedisConn,
    scripts: LockScripts,
}

impl RedisLocks {
    pub fn new(conn: RedisConn) -> Self {
        Self {
            conn,
            scripts: LockScripts::default(),
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> LockError {
    LockError::Unavailable(format!("Redis: {e}"))
}

async fn timed<T>(
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, LockError> {
    match tokio::time::timeout(OP_TIMEOUT, fut).await {
        Ok(r) => r.map_err(unavailable),
        Err(_) => Err(unavailable("no answer within 2 s")),
    }
}

#[async_trait]
impl LockBackend for RedisLocks {
    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Attempt, LockError> {
        let token = new_token();
        let ttl_ms = ttl.as_millis() as u64;
        let sent = Instant::now();
        let now = now_ms();
        let mut conn = self.conn.clone();
        match timed(self.scripts.acquire(&mut conn, name, &token, ttl_ms, owner)).await? {
            Acquired::Granted { fence } => Ok(Attempt::Granted(Lease {
                name: name.to_owned(),
                token,
                fence,
                ttl,
                valid_until: sent + ttl,
                expires_ms: now + ttl_ms,
            })),
            Acquired::Held { pttl_ms } => Ok(Attempt::Held {
                retry_after: Duration::from_millis(pttl_ms.max(1)),
            }),
        }
    }

    async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Lease, LockError> {
        let ttl_ms = ttl.as_millis() as u64;
        let sent = Instant::now();
        let now = now_ms();
        let mut conn = self.conn.clone();
        let fence = timed(self.scripts.extend(&mut conn, name, token, ttl_ms))
            .await?
            .ok_or_else(|| LockError::NotHolder(name.to_owned()))?;
        Ok(Lease {
            name: name.to_owned(),
            token: token.to_owned(),
            fence,
            ttl,
            valid_until: sent + ttl,
            expires_ms: now + ttl_ms,
        })
    }

    async fn release(&self, name: &str, token: &str) -> Result<(), LockError> {
        let mut conn = self.conn.clone();
        if timed(self.scripts.release(&mut conn, name, token)).await? {
            Ok(())
        } else {
            Err(LockError::NotHolder(name.to_owned()))
        }
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
