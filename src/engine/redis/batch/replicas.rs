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
//!
//! Behind Sentinel every connected replica must acknowledge, every replica Sentinel could
//! promote must be one of them, and none counts while a failover is near (`promotable.rs`).

use std::time::{Duration, Instant};

use anyhow::Context;

use crate::engine::redis::link::Link;
use crate::engine::redis::{Health, RedisConn};

/// The key every `WAIT` is preceded by a write to.
const FENCE_KEY: &str = "seckill:replicated";

/// The replica count no primary reaches: a claim batch asked for it changes nothing.
pub const NONE_WILL_DO: u32 = u32::MAX;

/// A Sentinel view this recent is reused before a claim batch (every wait asks a new one
/// after its replicas answered, so under load it is milliseconds old).
const VIEW_REUSE: Duration = Duration::from_secs(1);

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

    /// How many connected replicas a claim batch needs in sync before it runs: `replicas`,
    /// or behind Sentinel every connected replica (`promotable.rs`), or [`NONE_WILL_DO`]
    /// when no wait could count (a failover near, a candidate not connected, too few
    /// sentinels answering): the batch then changes nothing.
    pub async fn required(&self, conn: &RedisConn) -> u32 {
        let Some(link) = conn.link() else {
            return self.replicas;
        };
        if link.promotable().is_none() {
            return self.replicas;
        }
        let recent = Instant::now()
            .checked_sub(VIEW_REUSE)
            .unwrap_or_else(Instant::now);
        match self.sentinel_need(link, recent).await {
            Ok(need) => need,
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "no replica wait can count before a claim batch");
                NONE_WILL_DO
            }
        }
    }

    /// Behind Sentinel: the replicas a write to the linked server must reach, from a view
    /// asked at or after `since`.
    async fn sentinel_need(&self, link: &Link, since: Instant) -> anyhow::Result<u32> {
        let p = link.promotable().context("not behind Sentinel")?;
        let view = p.view_since(since, link).await?;
        let (_, addr) = link.server().context("the Redis connection is down")?;
        view.need(self.replicas, &addr)
    }

    /// Ok once `replicas` replicas that could carry the writes through a failover — behind
    /// Sentinel, every replica it could pick — have everything written on `conn`'s server so
    /// far, and the link is still the one of `before` (so the writes checked are the
    /// caller's).
    pub async fn confirm(&self, conn: &RedisConn, before: Option<Health>) -> anyhow::Result<()> {
        let link = conn
            .link()
            .ok_or_else(|| anyhow::anyhow!("WAIT is not used with Redis Cluster"))?;
        let recent = Instant::now()
            .checked_sub(VIEW_REUSE)
            .unwrap_or_else(Instant::now);
        let need = match link.promotable() {
            Some(_) => self.sentinel_need(link, recent).await?,
            None => self.replicas,
        };
        let server = link.server();
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg(FENCE_KEY);
        pipe.cmd("WAIT")
            .arg(need)
            .arg(self.timeout.as_millis() as u64);
        // The fence write is not a claim: it goes over the plain (ungated) link.
        let reply = link
            .request_many(&pipe, 0, 2)
            .await
            // Not a `RedisError` any more: a failed WAIT never means "not executed".
            .map_err(|e| anyhow::anyhow!("WAIT for replicas failed: {e}"))?;
        let acked_at = Instant::now();
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
            acked >= i64::from(need),
            "{acked} of {need} replicas acknowledged within {:?}",
            self.timeout
        );
        if link.promotable().is_some() {
            // Asked after the replicas answered: a promotion begun before shows in it, and a
            // replica that connected meanwhile raises what the write must have reached.
            let (generation, _) = server.context("the Redis connection is down")?;
            anyhow::ensure!(
                before.is_some_and(|h| h.generation == generation),
                "the Redis connection changed while waiting for replicas"
            );
            let now_need = self.sentinel_need(link, acked_at).await?;
            anyhow::ensure!(
                acked >= i64::from(now_need),
                "{acked} replicas acknowledged, {now_need} connected now"
            );
        }
        Ok(())
    }
}
