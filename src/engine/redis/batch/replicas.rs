//! `--redis-wait-replicas`: nothing counts until a replica has it.
//!
//! Redis replicates asynchronously. When Sentinel promotes a replica, the writes the old
//! primary had not yet sent are gone: after a kill, the last acknowledged claims; after a
//! graceful `SENTINEL FAILOVER`, everything the old primary accepted between the replica's
//! promotion and its own demotion a few seconds later — while the instances connected to it
//! keep selling there and the pipeline keeps moving those orders into the ledger, so the
//! units are sold twice (measured by `seckill chaos --deployment sentinel`, see
//! docs/RELIABILITY.md).
//!
//! With `n` > 0, a claim batch is answered only after `WAIT n` says that many replicas have
//! everything the primary had when the batch finished, and the pipeline moves orders into the
//! ledger only under the same condition; otherwise the batch answers the outcome-unknown 503
//! (a retry with the same Idempotency-Key learns what became of it) and the orders stay in the
//! stream. A demoted primary's writes never reach a replica, so they are neither answered
//! `won` nor written to the ledger.
//!
//! `WAIT` covers the writes of the connection it is sent on, so it follows an `INCR` of a
//! fence key on the same connection: the `INCR` is a write made after everything this batch
//! read (including another instance's unreplicated win replayed by an Idempotency-Key), so
//! waiting for it waits for all of that. The link's generation must not change between the
//! batch and the `WAIT`, else the `WAIT` could have reached another server.

use std::time::Duration;

use crate::engine::redis::{Health, RedisConn};

/// The key every `WAIT` is preceded by a write to.
const FENCE_KEY: &str = "seckill:replicated";

/// How many replicas must acknowledge, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    pub replicas: u32,
    pub timeout: Duration,
}

impl WaitReplicas {
    /// `None` when `replicas` is 0 (off).
    pub fn new(replicas: u32, timeout_ms: u64) -> Option<Self> {
        (replicas > 0).then_some(Self {
            replicas,
            timeout: Duration::from_millis(timeout_ms.max(1)),
        })
    }

    /// The link's health to compare after the `WAIT` (`None` for a cluster, never waited on).
    pub fn before(conn: &RedisConn) -> Option<Health> {
        conn.link().map(|l| l.health())
    }

    /// Ok once `replicas` replicas have everything written on `conn`'s server so far, and the
    /// link is still the one of `before` (so the writes checked are the caller's).
    pub async fn confirm(&self, conn: &RedisConn, before: Option<Health>) -> anyhow::Result<()> {
        let link = conn
            .link()
            .ok_or_else(|| anyhow::anyhow!("WAIT is not used with Redis Cluster"))?;
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg(FENCE_KEY);
        pipe.cmd("WAIT")
            .arg(self.replicas)
            .arg(self.timeout.as_millis() as u64);
        // The fence write is not a claim: it goes over the plain (ungated) link.
        let reply = link
            .request_many(&pipe, 0, 2)
            .await
            // Not a `RedisError` any more: a failed WAIT never means "not executed".
            .map_err(|e| anyhow::anyhow!("WAIT for replicas failed: {e}"))?;
        let acked: i64 = match reply.as_slice() {
            [_, v] => redis::from_redis_value(v)?,
            _ => anyhow::bail!("WAIT for replicas answered {reply:?}"),
        };
        let after = Some(link.health());
        anyhow::ensure!(
            after == before && before.is_some_and(|h| h.up),
            "the Redis connection changed while waiting for replicas"
        );
        anyhow::ensure!(
            acked >= i64::from(self.replicas),
            "{acked} of {} replicas acknowledged within {:?}",
            self.replicas,
            self.timeout
        );
        Ok(())
    }
}
