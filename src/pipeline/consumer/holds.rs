//! Transitions of pending orders the ledger contradicts.
//!
//! Redis is the arbiter of every resolution, so a transition entry that finds its order in
//! another final state (expired after confirmed, say) means the arbiter and the ledger
//! disagree. That is never resolved by guessing: the row stays as it is, the entry is recorded
//! in `failed_orders` with both states in its reason and logged as an error, and it is
//! acknowledged like a poison entry, so the stream keeps moving. Nothing is given back in
//! Redis: what the transition settled there was settled when Redis decided it. The campaign is
//! fenced and rebuilt from the ledger once its stream is drained: the arbiter lost state (an
//! expiry of a confirmed order gave its unit and code back to be sold again).

use super::Consumer;
use crate::ledger::PipelineWrite;
use crate::pipeline::entry::Entry;

impl Consumer {
    /// Records the contradicting transitions of a committed batch (`(index in good, reason)`).
    pub(super) async fn contradictions(
        &mut self,
        good: &[Entry],
        writes: &[PipelineWrite],
        contradictions: &[(usize, String)],
    ) -> anyhow::Result<()> {
        for (i, reason) in contradictions {
            let (entry, write) = (&good[*i], &writes[*i]);
            let order = write.order();
            tracing::error!(
                campaign = %entry.campaign_id,
                stream_id = %entry.stream_id,
                order = %order.order_id,
                reason,
                "a transition contradicts the ledger: recorded in failed_orders, row unchanged"
            );
            self.fence_and_record(entry, &order.order_id, reason.clone(), "contradiction")
                .await?;
        }
        Ok(())
    }
}
