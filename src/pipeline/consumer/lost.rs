//! Entries read from a Redis Cluster node before a failover lost them.
//!
//! The ledger refuses them (`ledger/postgres/lineage.rs`): the replica promoted in the old
//! master's place never had them, the campaign was checked against the ledger without them,
//! and the new node issues their order numbers, units and codes again. Each is recorded in
//! `failed_orders` — a buyer was told `won`, or a payer's confirm answered 200, for what the
//! failover lost, as an asynchronous replica loses it. It is not acknowledged: the node
//! serving the campaign never had it, and an entry of its stream may carry the same id (the
//! model checker found such an acknowledgement taking a later order out of the stream
//! unwritten). Nothing is given back in Redis (that node never took it) and nothing is fenced
//! (that node and the ledger agree).

use super::Consumer;
use crate::ledger::PipelineWrite;
use crate::pipeline::entry::Entry;

impl Consumer {
    /// Records the lost writes of a committed batch (by index in `good`).
    pub(super) async fn lost(
        &mut self,
        good: &[Entry],
        writes: &[PipelineWrite],
        lost: &[usize],
    ) -> anyhow::Result<()> {
        if let Some(&first) = lost.first() {
            tracing::warn!(
                campaign = %good[first].campaign_id,
                stream_id = %good[first].stream_id,
                entries = lost.len(),
                "entries read from a Redis Cluster node before a failover lost them: recorded \
                 in failed_orders, not written"
            );
        }
        for &i in lost {
            let order = writes[i].order();
            self.record_refused(&good[i], &order.order_id, super::LOST.to_owned(), "lost")
                .await?;
        }
        Ok(())
    }
}
