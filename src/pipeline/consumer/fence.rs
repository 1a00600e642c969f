//! Reissued order ids: when the ledger already holds a different order under an id the gate
//! handed out, Redis lost acknowledged writes. The campaign is fenced at once (its claims answer
//! 503 on every instance), the buyers told `won` for reissued ids are recorded, and the gate is
//! rebuilt from the ledger once the campaign's stream is drained, which lifts the fence.
//!
//! Orders the ledger took under a number above the gate's own are the same loss seen from the
//! other side (a consumer wrote what it read from a Redis that forgot it since): fenced and
//! rebuilt likewise ([`Consumer::check_numbering`]).

use futures::StreamExt;
use redis::AsyncCommands;

use super::Consumer;
use crate::domain::{now, parse_order_id, Order};
use crate::engine::scale_out::{Keys, RedisConn};
use crate::ledger::{FailedOrder, PipelineWrite};
use crate::pipeline::entry::Entry;

impl Consumer {
    /// Takes over fences set by any consumer (one that crashed leaves its fence behind).
    pub(super) async fn adopt_fences(&mut self) -> anyhow::Result<()> {
        if self.campaigns.is_empty() {
            return Ok(());
        }
        // One pipeline on a single node; on a Cluster one HGET per campaign (their keys are in
        // different slots, and the cluster client refuses a pipeline across slots: a fence left
        // by a consumer that died was then never lifted).
        let flags: Vec<Option<String>> = if matches!(self.conn, RedisConn::Cluster(_)) {
            let conn = self.conn.clone();
            futures::stream::iter(self.campaigns.clone())
                .map(|id| {
                    let mut conn = conn.clone();
                    async move { conn.hget(Keys::new(&id).meta(), "fenced").await }
                })
                .buffered(16)
                .collect::<Vec<redis::RedisResult<Option<String>>>>()
                .await
                .into_iter()
                .collect::<redis::RedisResult<_>>()?
        } else {
            let mut pipe = redis::pipe();
            for id in &self.campaigns {
                pipe.hget(Keys::new(id).meta(), "fenced");
            }
            pipe.query_async(&mut self.conn).await?
        };
        for (id, flag) in self.campaigns.iter().zip(flags) {
            if flag.is_some() {
                self.fenced.insert(id.clone());
            }
        }
        Ok(())
    }

    /// Fences `campaign` (its claims answer 503) until its stream is drained and it is rebuilt
    /// from the ledger ([`Consumer::rebuild_fenced`]).
    pub(super) async fn fence_campaign(&mut self, campaign: &str) -> anyhow::Result<()> {
        self.scripts.fence(&mut self.conn, campaign, false).await?;
        self.fenced.insert(campaign.to_owned());
        Ok(())
    }

    /// Fences `entry`'s campaign until it is rebuilt from the ledger and records the order
    /// `order_id` it carried in `failed_orders` (the gate and the ledger disagree about it).
    pub(super) async fn fence_and_record(
        &mut self,
        entry: &Entry,
        order_id: &str,
        reason: String,
        metric: &'static str,
    ) -> anyhow::Result<()> {
        self.fence_campaign(&entry.campaign_id).await?;
        self.record_refused(entry, order_id, reason, metric).await
    }

    /// Records the order `order_id` carried by `entry` in `failed_orders` as not written, for
    /// `reason`, and counts it under `metric`.
    pub(super) async fn record_refused(
        &mut self,
        entry: &Entry,
        order_id: &str,
        reason: String,
        metric: &'static str,
    ) -> anyhow::Result<()> {
        self.ledger
            .record_failed(&FailedOrder {
                stream_id: entry.stream_id.clone(),
                campaign_id: entry.campaign_id.clone(),
                order_id: Some(order_id.to_owned()),
                payload: entry.payload(),
                reason,
                at: now(),
            })
            .await?;
        super::refused_metric(metric);
        Ok(())
    }

    /// Notes, before a commit, the highest order number of each campaign among `writes`, for
    /// [`Consumer::check_numbering`] (a write the ledger refuses only costs a check).
    pub(super) fn note_numbers(&mut self, writes: &[PipelineWrite]) {
        for w in writes {
            let o = w.order();
            let Ok((_, n)) = parse_order_id(&o.order_id) else {
                continue;
            };
            // The campaign's id is copied once per batch, not once per order.
            match self.unchecked.get_mut(&o.campaign_id) {
                Some(top) => *top = (*top).max(n),
                None => {
                    self.unchecked.insert(o.campaign_id.clone(), n);
                }
            }
        }
    }

    /// Orders (or transitions) the ledger took under a number the gate never issued, above its
    /// `seq`, were read from a Redis that lost them since: a consumer outlived a restore from
    /// an older snapshot, or a restart that lost the last second of an `everysec` AOF, and
    /// wrote what it held. The gate does not hold them, so it would never expire them and would
    /// count their units and codes as free: their campaign is fenced and rebuilt from the
    /// ledger, with them, once its stream is drained. A reissued number is caught when it
    /// collides; a number the gate has not reached yet only here. A campaign is checked until
    /// Redis answers and holds it (one being installed meanwhile is checked after the
    /// install, which may have read the ledger before these orders).
    pub(super) async fn check_numbering(&mut self) {
        let campaigns: Vec<(String, u64)> = self
            .unchecked
            .iter()
            .map(|(c, n)| (c.clone(), *n))
            .collect();
        for (campaign, top) in campaigns {
            let behind = match self.numbering_behind(&campaign, top).await {
                Ok(Some(behind)) => behind,
                Ok(None) => continue, // not in Redis: checked again after its install
                Err(e) => {
                    tracing::debug!(error = %e, campaign, "cannot check the gate's numbering yet");
                    continue;
                }
            };
            if self.unchecked.get(&campaign) == Some(&top) {
                self.unchecked.remove(&campaign);
            }
            if behind {
                tracing::error!(
                    campaign,
                    top,
                    "orders the gate never issued reached the ledger: Redis lost \
                    acknowledged writes; the campaign is fenced and rebuilt from the ledger"
                );
                self.fenced.insert(campaign);
            }
        }
    }

    /// Whether the gate's numbering of `campaign` is behind `top`, having fenced it if so;
    /// `None` when it is behind but Redis does not hold the campaign (nothing was fenced).
    async fn numbering_behind(
        &mut self,
        campaign: &str,
        top: u64,
    ) -> redis::RedisResult<Option<bool>> {
        // A campaign that never issued a number has no `seq` yet.
        let seq: Option<u64> = self.conn.get(Keys::new(campaign).seq()).await?;
        if seq.unwrap_or(0) >= top {
            return Ok(Some(false));
        }
        let fenced = self.scripts.fence(&mut self.conn, campaign, false).await?;
        Ok(fenced.then_some(true))
    }

    /// Rebuilds from the ledger every fenced campaign whose stream is drained (which lifts its
    /// fence).
    pub(super) async fn rebuild_fenced(&mut self) -> anyhow::Result<()> {
        for id in self.fenced.clone() {
            if !self.scripts.fence(&mut self.conn, &id, true).await? {
                continue; // orders of it still in the stream, or rebuilt meanwhile
            }
            crate::engine::scale_out::rebuild_from_ledger(
                &mut self.conn,
                &self.ledger,
                &self.scripts,
                &id,
            )
            .await
            .map_err(|e| anyhow::anyhow!("rebuilding fenced campaign {id}: {e}"))?;
            self.fenced.remove(&id);
            tracing::warn!(campaign = %id, "fenced campaign rebuilt from the ledger; its claims are served again");
        }
        Ok(())
    }

    /// Handles orders whose id the ledger already holds for a different order: fences their
    /// campaigns at once, records each buyer told `won` for a reissued id in `failed_orders`,
    /// and says so once per campaign. The gate is rebuilt once the stream is drained
    /// ([`Consumer::rebuild_fenced`]). The units of a reissued order stay taken until then;
    /// the rebuild counts only the ledger's orders.
    pub(super) async fn collisions(
        &mut self,
        good: &[Entry],
        writes: &[PipelineWrite],
        collided: &[Order],
    ) -> anyhow::Result<()> {
        let mut by_campaign: std::collections::BTreeMap<&str, Vec<&Order>> = Default::default();
        for o in collided {
            by_campaign.entry(&o.campaign_id).or_default().push(o);
        }
        for (campaign, orders) in by_campaign {
            self.fence_campaign(campaign).await?;
            for o in &orders {
                let new_order = |w: &PipelineWrite| matches!(w, PipelineWrite::Order(g) if g.order_id == o.order_id);
                let Some(entry) = writes.iter().position(new_order).map(|i| &good[i]) else {
                    continue;
                };
                self.record_refused(entry, &o.order_id, super::REISSUED.into(), "reissued")
                    .await?;
            }
            let ids: Vec<&str> = orders.iter().map(|o| o.order_id.as_str()).collect();
            tracing::error!(
                campaign,
                reissued = orders.len(),
                first = ids.first().copied().unwrap_or_default(),
                last = ids.last().copied().unwrap_or_default(),
                "order ids reused: Redis lost acknowledged writes; the buyers told won are \
                 recorded in failed_orders, the campaign is fenced and rebuilt from the ledger"
            );
        }
        Ok(())
    }
}
