//! Applying a batch of the order pipeline to PostgreSQL: one transaction, in stream order.
//!
//! A batch holds new orders and, for campaigns with holds, transitions of pending orders
//! ([`PipelineWrite`]). New orders are inserted many rows per statement with
//! `ON CONFLICT DO NOTHING` (a redelivered entry is harmless); a transition is one upsert
//! (`postgres/holds`). The two must not reorder one order's entries, so the pending run of new
//! orders is inserted before a transition of an order in that run is applied; a batch of a
//! campaign without holds is one run, inserted as before holds existed.

use std::collections::HashSet;

use sqlx::PgConnection;

use super::entries::{orders_by_id, same_order, PipelineWrite};
use super::holds::{self, Applied};
use super::lineage::{self, Origin};
use super::writes::insert_orders;
use super::PgLedger;
use crate::domain::Order;

/// What a committed batch did besides applying its writes.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PipelineOutcome {
    /// New orders whose id the ledger already holds for a *different* order: Redis lost
    /// acknowledged writes and reissued the id. Nothing was written for them.
    pub collisions: Vec<Order>,
    /// Transitions that contradict the ledger, by their index in the batch, with the reason.
    /// Nothing was written for them.
    pub contradictions: Vec<(usize, String)>,
    /// Writes read from a Redis Cluster lineage their campaign has left, above the bound it
    /// left at (`postgres/lineage`), by their index in the batch: the node serving the campaign
    /// never had them. Nothing was written for them.
    pub lost: Vec<usize>,
    /// Every write read from such a lineage above its bound, `lost` or already in the ledger
    /// (a redelivery): none is in the stream of the node serving the campaign now, so none may
    /// be acknowledged there (an entry of the same id there would go unwritten).
    pub not_here: Vec<usize>,
}

/// Inserts a run of new orders; returns the ones that collide with a different stored order
/// (same user, qty, codes and time is a harmless redelivery, whatever the row's state).
async fn insert_run(conn: &mut PgConnection, run: &[&Order]) -> anyhow::Result<Vec<Order>> {
    let inserted = insert_orders(conn, run).await?;
    let mut collisions = Vec::new();
    if inserted < run.len() as u64 {
        let ids: Vec<&str> = run.iter().map(|o| o.order_id.as_str()).collect();
        let existing = orders_by_id(conn, &ids).await?;
        for o in run {
            if let Some(e) = existing.get(&o.order_id) {
                if !same_order(e, o) {
                    collisions.push((*o).clone());
                }
            }
        }
    }
    Ok(collisions)
}

impl PgLedger {
    /// Applies a batch of the pipeline in one transaction, in order (see the module docs).
    ///
    /// With `fence = Some((job, f))` the same transaction first records `f` as `job`'s fence in
    /// `job_fences`; if a higher fence was recorded already (another holder of the job's lease
    /// wrote since), nothing is written and the error is [`StaleFence`](super::fences::StaleFence).
    pub async fn apply_pipeline(
        &self,
        writes: &[PipelineWrite],
        fence: Option<(&str, u64)>,
    ) -> anyhow::Result<PipelineOutcome> {
        self.apply_read(writes, &[], fence).await
    }

    /// [`PgLedger::apply_pipeline`] of writes read from a Redis Cluster, each beside where it
    /// was read (`origins`, same index; missing or `None`: not from a Cluster): those of a
    /// lineage their campaign has left, above its bound, are not written but returned as
    /// [`PipelineOutcome::lost`].
    pub async fn apply_read(
        &self,
        writes: &[PipelineWrite],
        origins: &[Option<Origin>],
        fence: Option<(&str, u64)>,
    ) -> anyhow::Result<PipelineOutcome> {
        let mut tx = self.pool.begin().await?;
        if let Some((job, f)) = fence {
            super::fences::require(&mut tx, job, f).await?;
        }
        // The ledger's rules (migration 0007) update each campaign's row of live units; taken
        // here, in one order, two consumers whose batches touch the same campaigns in another
        // order wait for each other instead of deadlocking.
        let mut campaigns: Vec<&str> = writes
            .iter()
            .map(|w| w.order().campaign_id.as_str())
            .collect();
        campaigns.sort_unstable();
        campaigns.dedup();
        sqlx::query("SELECT 1 FROM campaigns WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
            .bind(&campaigns)
            .execute(&mut *tx)
            .await?;
        let (not_here, lost) = match origins.is_empty() {
            true => Default::default(),
            false => lineage::lost(&mut tx, writes, origins).await?,
        };
        let mut out = PipelineOutcome {
            lost,
            not_here,
            ..PipelineOutcome::default()
        };
        let lost: HashSet<usize> = out.lost.iter().copied().collect();
        let mut run: Vec<&Order> = Vec::new();
        let mut in_run: HashSet<&str> = HashSet::new();
        for (i, w) in writes.iter().enumerate() {
            if lost.contains(&i) {
                continue;
            }
            match w {
                PipelineWrite::Order(o) => {
                    run.push(o);
                    in_run.insert(&o.order_id);
                }
                PipelineWrite::Transition(t) => {
                    if in_run.contains(t.order.order_id.as_str()) {
                        out.collisions.extend(insert_run(&mut tx, &run).await?);
                        run.clear();
                        in_run.clear();
                    }
                    if let Applied::Contradiction(why) = holds::apply(&mut tx, t).await? {
                        out.contradictions.push((i, why));
                    }
                }
            }
        }
        out.collisions.extend(insert_run(&mut tx, &run).await?);
        tx.commit().await?;
        Ok(out)
    }

    /// Inserts orders from the pipeline in one transaction, idempotently
    /// ([`PgLedger::apply_pipeline`] of new orders only). Returns the ones whose order id the
    /// ledger already holds for a *different* order: Redis lost acknowledged writes and
    /// reissued the id.
    pub async fn insert_pipeline_orders(
        &self,
        orders: &[Order],
        fence: Option<(&str, u64)>,
    ) -> anyhow::Result<Vec<Order>> {
        let writes: Vec<PipelineWrite> = orders.iter().cloned().map(PipelineWrite::Order).collect();
        Ok(self.apply_pipeline(&writes, fence).await?.collisions)
    }
}
