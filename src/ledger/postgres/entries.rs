//! What one entry of the order stream asks of the PostgreSQL ledger, and how a stored order
//! is told apart from a redelivery of the same entry: shared by the pipeline's batches
//! (`pipeline.rs`) and the check of Cluster lineages (`lineage.rs`).

use std::collections::HashMap;

use sqlx::PgConnection;

use super::holds::Transition;
use crate::domain::Order;
use crate::ledger::rows::OrderRow;

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

/// The ledger's orders among `ids`, by id.
pub(super) async fn orders_by_id(
    conn: &mut PgConnection,
    ids: &[&str],
) -> anyhow::Result<HashMap<String, Order>> {
    let rows: Vec<OrderRow> = sqlx::query_as(select_order!(" WHERE order_id = ANY($1)"))
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
