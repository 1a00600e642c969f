//! Applying a batch of the order pipeline to PostgreSQL: one transaction, in stream order.
//!
//! A batch holds new orders and, for campaigns with holds, transitions of pending orders
//! ([`PipelineWrite`]). New orders are inserted many rows per statement with
//! `ON CONFLICT DO NOTHING` (a redelivered entry is harmless); a transition is one upsert
//! (`postgres_holds`). The two must not reorder one order's entries, so the pending run of new
//! orders is inserted before a transition of an order in that run is applied; a batch of a
//! campaign without holds is one run, inserted as before holds existed.

use std::collections::{HashMap, HashSet};

use sqlx::PgConnection;

use super::postgres::{insert_orders, PgLedger, SELECT_ORDER};
use super::postgres_holds::{self, Applied, Transition};
use super::postgres_lineage::{self, Origin};
use super::rows::OrderRow;
use crate::domain::Order;

/// What one stream entry asks of the ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum PipelineWrite {
    /// A won order: `active`, or `pending` with its `pay_by`.
    Order(Order),
    /// A pending order's resolution, decided in Redis.
    Transition(Transition),
}

impl PipelineWrite {
    /// The order the entry is about.
    pub fn order(&self) -> &Order {
        match self {
            PipelineWrite::Order(o) => o,
            PipelineWrite::Transition(t) => &t.order,
        }
    }
}

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
    /// left at (`postgres_lineage`), by their index in the batch: the node serving the campaign
    /// never had them. Nothing was written for them.
    pub lost: Vec<usize>,
    /// Every write read from such a lineage above its bound, `lost` or already in the ledger
    /// (a redelivery): none is in the stream of the node serving the campaign now, so none may
    /// be acknowledged there (an entry of the same id there would go unwritten).
    pub not_here: Vec<usize>,
}

/// The ledger's orders among `ids`, by id.
pub(super) async fn orders_by_id(
    conn: &mut PgConnection,
    ids: &[&str],
) -> anyhow::Result<HashMap<String, Order>> {
    let rows: Vec<OrderRow> = sqlx::query_as(&format!("{SELECT_ORDER} WHERE order_id = ANY($1)"))
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    rows.into_iter()
        .map(|r| Order::try_from(r).map(|o| (o.order_id.clone(), o)))
        .collect()
}

/// Whether `stored` is the order `o` was won as (same campaign, buyer, qty, codes and time):
/// a redelivery of it, whatever the row's state since.
pub(super) fn same_order(stored: &Order, o: &Order) -> bool {
    stored.campaign_id == o.campaign_id
        && stored.user_id == o.user_id
        && stored.qty == o.qty
        && stored.codes == o.codes
        && stored.created_at == o.created_at
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
    /// wrote since), nothing is written and the error is [`StaleFence`](crate::lock::fenced::StaleFence).
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
            crate::lock::fenced::require(&mut tx, job, f).await?;
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
            false => postgres_lineage::lost(&mut tx, writes, origins).await?,
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
                    if let Applied::Contradiction(why) = postgres_holds::apply(&mut tx, t).await? {
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
