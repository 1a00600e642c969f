//! Poison: an entry PostgreSQL refuses for its data, or one that does not parse, can never be
//! persisted. It is recorded in `failed_orders` and a new order's units go back in Redis;
//! the caller acknowledges it.

use super::Consumer;
use crate::domain::now;
use crate::ledger::{FailedOrder, PipelineWrite};
use crate::pipeline::entry::Entry;

impl Consumer {
    /// Records an entry that can never be persisted and gives a new order's units back (a
    /// transition's were settled in Redis when it was decided; `release.lua` gives an order
    /// back at most once, so a pass redone after a crash changes nothing). The caller
    /// acknowledges it.
    pub(super) async fn poison(
        &mut self,
        entry: &Entry,
        write: Option<&PipelineWrite>,
        reason: &str,
    ) -> anyhow::Result<()> {
        let order = write.map(PipelineWrite::order);
        tracing::error!(campaign = %entry.campaign_id, stream_id = %entry.stream_id, order = ?order.map(|o| &o.order_id), reason, "poison order: compensating and recording it");
        super::refused_metric("poison");
        self.ledger
            .record_failed(&FailedOrder {
                stream_id: entry.stream_id.clone(),
                campaign_id: entry.campaign_id.clone(),
                order_id: order.map(|o| o.order_id.clone()),
                payload: entry.payload(),
                reason: reason.to_owned(),
                at: now(),
            })
            .await?;
        if let Some(PipelineWrite::Order(o)) = write {
            let codes = o.codes.clone().unwrap_or_default();
            self.scripts
                .release(
                    &mut self.conn,
                    &o.campaign_id,
                    &o.order_id,
                    &o.user_id,
                    o.qty,
                    &codes,
                )
                .await?;
        }
        Ok(())
    }
}
