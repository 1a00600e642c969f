//! Taking over the orders of a stalled consumer, by one consumer at a time, under a lease.
//!
//! Entries a consumer held unacknowledged longer than `reclaim_after` (it crashed, or it is
//! paused) are taken over with XAUTOCLAIM. Only the consumer holding the lease
//! [`RECLAIM_JOB`] on the deployment's Redis does it; the others try to acquire the lease at
//! each reclaim interval (one script call, never waiting) and otherwise leave reclaiming alone.
//! Their own reads and writes of new entries never wait on the lease.
//!
//! The holder claims the entries under a consumer name of their own (`<consumer>:reclaim`), so
//! they are only ever read back by the reclaim pass — never as the consumer's ordinary
//! entries —, and it inserts them in a transaction of their own that first records the
//! lease's fence in `job_fences` ([`crate::ledger::fences`]). A holder that paused past its
//! lease (a SIGSTOP, a long stall) while another consumer took over wakes up with a lower
//! fence: PostgreSQL refuses its transaction, nothing is written or acknowledged, and the
//! entries stay pending in the stream, where the current holder claims them once they have
//! been idle `reclaim_after`. Inserts are idempotent anyway; the fence makes the rule "one
//! reclaimer at a time" hold at the ledger, not only on the holder's clock.
//!
//! Trimming needs no lease: `ack.lua` trims only entries below the oldest one still pending in
//! the group (or, with none pending, below the newest one it acknowledged), which every
//! consumer has finished with, in one atomic script; its result does not depend on who runs it.

use std::time::Duration;

use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};

use super::{is_nogroup, Consumer, Step};
use crate::engine::scale_out::{Keys, RedisConn, GROUP};
use crate::lock::fenced::StaleFence;
use crate::lock::{redis::RedisLocks, Attempt, LeaseGuard, Locks};
use crate::pipeline::entry::Entry;

/// The lock (and `job_fences` row) of reclaiming the order streams.
pub const RECLAIM_JOB: &str = "seckill-pipeline-reclaim";

/// The reclaim lease of one consumer.
pub(super) struct Reclaim {
    locks: Locks,
    lease: Option<LeaseGuard>,
    /// Another consumer held the lease at the last attempt (logged once per change).
    elsewhere: bool,
}

impl Reclaim {
    pub(super) fn new(conn: &RedisConn) -> Self {
        Self {
            locks: Locks::new(std::sync::Arc::new(RedisLocks::new(conn.clone()))),
            lease: None,
            elsewhere: false,
        }
    }

    /// Releases the lease (at shutdown), so another consumer takes reclaiming over at once.
    pub(super) async fn release(&mut self) {
        if let Some(g) = self.lease.take() {
            let _ = g.release().await;
        }
    }
}

impl Consumer {
    pub(super) fn reclaim_every(&self) -> Duration {
        (self.opts.reclaim_after / 2).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The lease's TTL: a few reclaim intervals, at least 2 s (a busy machine can stall a
    /// process for a second without it losing the lease).
    pub(super) fn reclaim_ttl(&self) -> Duration {
        (self.reclaim_every() * 4).max(Duration::from_secs(2))
    }

    fn reclaimer(&self) -> String {
        format!("{}:reclaim", self.opts.consumer)
    }

    /// The fence of the reclaim lease if this consumer holds it (acquiring it if it is free).
    async fn reclaim_fence(&mut self) -> Option<u64> {
        if let Some(reason) = self.reclaim.lease.as_ref().and_then(|g| g.lost_reason()) {
            tracing::warn!(
                consumer = self.name(),
                reason,
                "lost the pipeline's reclaim lease"
            );
            self.reclaim.lease = None;
        }
        if let Some(g) = &self.reclaim.lease {
            return Some(g.fence());
        }
        let (owner, ttl) = (self.opts.consumer.clone(), self.reclaim_ttl());
        match self
            .reclaim
            .locks
            .acquire(RECLAIM_JOB, &owner, ttl, Duration::ZERO)
            .await
        {
            Ok(Attempt::Granted(lease)) => {
                tracing::info!(consumer = %owner, fence = lease.fence, ttl_ms = ttl.as_millis() as u64, "holding the pipeline's reclaim lease");
                let guard = LeaseGuard::start(self.reclaim.locks.clone(), lease);
                let fence = guard.fence();
                self.reclaim.lease = Some(guard);
                self.reclaim.elsewhere = false;
                Some(fence)
            }
            Ok(Attempt::Held { .. }) => {
                if !self.reclaim.elsewhere {
                    tracing::info!(consumer = %owner, "another consumer holds the pipeline's reclaim lease; leaving reclaiming to it");
                    self.reclaim.elsewhere = true;
                }
                None
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot try the reclaim lease");
                None
            }
        }
    }

    /// One reclaim pass, if this consumer holds the lease: its earlier reclaimed entries not
    /// yet written, then entries idle longer than `reclaim_after`, written under the fence.
    pub(super) async fn reclaim_step(&mut self) -> anyhow::Result<Step> {
        let Some(fence) = self.reclaim_fence().await else {
            return Ok(Step::default());
        };
        let mut entries = Vec::new();
        for id in self.campaigns.clone() {
            let room = self.opts.batch.saturating_sub(entries.len());
            if room == 0 {
                break;
            }
            match self.gather_reclaim(&id, room).await {
                Ok(mut e) => entries.append(&mut e),
                Err(e) if is_nogroup(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        if entries.is_empty() {
            return Ok(Step::default());
        }
        crate::faults::after_reclaim();
        let n = entries.len();
        match self.process(entries, Some(fence)).await {
            Err(e) if e.downcast_ref::<StaleFence>().is_some() => {
                tracing::warn!(
                    consumer = self.name(),
                    fence,
                    entries = n,
                    "reclaimed orders refused by the ledger's fence: another consumer took over \
                     reclaiming; they stay in the stream for it"
                );
                self.reclaim.lease = None;
                Ok(Step::default())
            }
            other => other,
        }
    }

    /// Entries of campaign `id` for the reclaim pass, at most `room`.
    async fn gather_reclaim(&mut self, id: &str, room: usize) -> redis::RedisResult<Vec<Entry>> {
        let stream = Keys::new(id).orders();
        let me = self.reclaimer();
        let wrap = |s: StreamId| Entry::new(id.to_owned(), s.id, s.map);
        // Reclaimed before and not written yet (the ledger failed, or this pass was cut).
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(&me)
            .arg("COUNT")
            .arg(room)
            .arg("STREAMS")
            .arg(&stream)
            .arg("0")
            .query_async(&mut self.conn)
            .await?;
        let mut out: Vec<Entry> = reply
            .map(|r| r.keys)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|k| k.ids)
            .filter(|s| !s.map.is_empty())
            .flat_map(|s| wrap(s).expand())
            .collect();
        let mut cursor = "0-0".to_owned();
        while out.len() < room {
            let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(GROUP)
                .arg(&me)
                .arg(self.opts.reclaim_after.as_millis() as u64)
                .arg(&cursor)
                .arg("COUNT")
                .arg(room - out.len())
                .query_async(&mut self.conn)
                .await?;
            if !reply.claimed.is_empty() {
                tracing::warn!(
                    campaign = id,
                    consumer = self.name(),
                    entries = reply.claimed.len(),
                    "took over orders of a stalled consumer"
                );
            }
            out.extend(reply.claimed.into_iter().flat_map(|s| wrap(s).expand()));
            cursor = reply.next_stream_id;
            if cursor == "0-0" {
                break;
            }
        }
        Ok(out)
    }
}
