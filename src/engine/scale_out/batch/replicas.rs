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

use crate::engine::scale_out::{Health, RedisConn};
use crate::redis_conn::link::Link;
use crate::redis_conn::promotable::{self, Addr, Promotable};
use redis::ConnectionAddr;

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

    /// What a claim batch checks before it runs (`claims.lua` `ARGV[5]`): how many replicas
    /// must be online and in sync — behind Sentinel, among which ones (`promotable.rs`) — or
    /// `NONE_WILL_DO` when no wait could count (a failover near, a favourite replica not
    /// connected, too few sentinels answering): the batch then changes nothing.
    pub async fn required(&self, conn: &RedisConn) -> String {
        let Some(link) = conn.link() else {
            return self.replicas.to_string();
        };
        let Some(p) = link.promotable() else {
            return self.replicas.to_string();
        };
        let ahead = async {
            let (_, addr) = link.server().context("the Redis connection is down")?;
            self.sentinel_need(p, link, &addr).await
        };
        match ahead.await {
            Ok((k, ahead)) => {
                let mut spec = k.to_string();
                for (host, port) in ahead {
                    spec.push_str(&format!(" {host}:{port}"));
                }
                spec
            }
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "no replica wait can count before a claim batch");
                NONE_WILL_DO.to_string()
            }
        }
    }

    /// Behind Sentinel: what a write to `addr` waits for (`View::need`), from a view asked at
    /// most [`VIEW_REUSE`] ago.
    async fn sentinel_need(
        &self,
        p: &Promotable,
        link: &Link,
        addr: &ConnectionAddr,
    ) -> anyhow::Result<(u32, Vec<Addr>)> {
        let recent = Instant::now()
            .checked_sub(VIEW_REUSE)
            .unwrap_or_else(Instant::now);
        p.view_since(recent, replication_info(link))
            .await?
            .need(self.replicas, addr)
    }

    /// Ok once `replicas` replicas that could carry the writes through a failover — behind
    /// Sentinel, ones it would pick before any replica without them — have everything written
    /// on `conn`'s server so far, and the link is still the one of `before` (so the writes
    /// checked are the caller's).
    pub async fn confirm(&self, conn: &RedisConn, before: Option<Health>) -> anyhow::Result<()> {
        let link = conn
            .link()
            .ok_or_else(|| anyhow::anyhow!("WAIT is not used with Redis Cluster"))?;
        let (generation, addr) = link.server().context("the Redis connection is down")?;
        let same_link = |why: &str| -> anyhow::Result<()> {
            let now = Some(link.health());
            anyhow::ensure!(
                now == before && before.is_some_and(|h| h.up && h.generation == generation),
                "the Redis connection changed {why}"
            );
            Ok(())
        };
        same_link("before waiting for replicas")?;
        let sentinel = link.promotable();
        let need = match sentinel {
            Some(p) => self.sentinel_need(p, link, &addr).await?.0,
            None => self.replicas,
        };
        let started = Instant::now();
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg(FENCE_KEY);
        if sentinel.is_some() {
            // The offset the write reached, to tell which replicas have it afterwards.
            pipe.cmd("INFO").arg("replication");
        }
        pipe.cmd("WAIT")
            .arg(need)
            .arg(self.timeout.as_millis() as u64);
        // The fence write is not a claim: it goes over the plain (ungated) link.
        let replies = if sentinel.is_some() { 3 } else { 2 };
        let reply = link
            .request_many(&pipe, 0, replies)
            .await
            // Not a `RedisError` any more: a failed WAIT never means "not executed".
            .map_err(|e| anyhow::anyhow!("WAIT for replicas failed: {e}"))?;
        let acked_at = Instant::now();
        let (written, acked): (u64, i64) = match reply.as_slice() {
            [_, info, v] => (
                promotable::primary_offset(&redis::from_redis_value_ref::<String>(info)?)?,
                redis::from_redis_value_ref(v)?,
            ),
            [_, v] => (0, redis::from_redis_value_ref(v)?),
            _ => anyhow::bail!("WAIT for replicas answered {reply:?}"),
        };
        same_link("while waiting for replicas")?;
        match sentinel {
            // Which replicas have the write, from their offsets, asked after they answered:
            // a promotion begun before shows in it too.
            Some(p) => {
                let view = p.view_since(acked_at, replication_info(link)).await?;
                same_link("while asking the sentinels")?;
                let Err(short) = view.acked(self.replicas, &addr, written) else {
                    return Ok(());
                };
                // `WAIT k` can be met by a replica that does not count (a priority-0 backup
                // acknowledging first while the promotable one catches up after a restart):
                // with time left, wait for every online replica and look once more.
                let online = view.replicas.iter().filter(|r| r.online).count() as u32;
                let left = (started + self.timeout).saturating_duration_since(Instant::now());
                if online <= need || left.is_zero() {
                    return Err(short);
                }
                let mut pipe = redis::pipe();
                pipe.cmd("WAIT")
                    .arg(online)
                    .arg(left.as_millis().max(1) as u64);
                link.request_many(&pipe, 0, 1)
                    .await
                    .map_err(|e| anyhow::anyhow!("WAIT for replicas failed: {e}"))?;
                let acked_at = Instant::now();
                same_link("while waiting for replicas")?;
                let view = p.view_since(acked_at, replication_info(link)).await?;
                same_link("while asking the sentinels")?;
                view.acked(self.replicas, &addr, written)
            }
            None => {
                anyhow::ensure!(
                    acked >= i64::from(need),
                    "{acked} of {need} replicas acknowledged within {:?}",
                    self.timeout
                );
                Ok(())
            }
        }
    }
}

/// The primary's `INFO replication`, on the link the writes went through.
async fn replication_info(link: &Link) -> anyhow::Result<String> {
    let info = link
        .request(redis::cmd("INFO").arg("replication"))
        .await
        .map_err(|e| anyhow::anyhow!("INFO replication of the primary failed: {e}"))?;
    Ok(redis::from_redis_value_ref::<String>(&info)?)
}
