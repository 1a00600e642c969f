//! A batch PostgreSQL refused for its data: its entries applied one by one, in stream order,
//! to find the ones it refuses.
//!
//! The same checks as a batch: a different order under an id is the gate's lost state, a
//! contradicting transition is recorded, never absorbed. An entry refused for its data is
//! poison; one refused for a guarantee (`rules`) waits while an older entry of its campaign is
//! unhandled, and so does the rest of its campaign. What was applied is acknowledged by the
//! caller, all together (the orders of one batch entry are acknowledged as one): cut short,
//! the pass is redone, and what it wrote is a harmless replay.

use std::collections::HashSet;

use super::{rules, Consumer, Step};
use crate::ledger::invariants::refused_rule;
use crate::ledger::{is_data_error, PipelineWrite};
use crate::pipeline::entry::Entry;

impl Consumer {
    /// Applies `writes` (beside their entries `good`) one by one; the stream entries left
    /// waiting for older ones, if any.
    pub(super) async fn isolate(
        &mut self,
        good: &[Entry],
        writes: &[PipelineWrite],
        fence: Option<(&str, u64)>,
        step: &mut Step,
    ) -> anyhow::Result<Option<rules::Handled>> {
        let mut handled = rules::Handled::new();
        let mut deferred: HashSet<String> = HashSet::new();
        let mut waiting = rules::Handled::new();
        for (i, (entry, write)) in good.iter().zip(writes).enumerate() {
            let key = (entry.campaign_id.clone(), entry.stream_id.clone());
            if deferred.contains(&entry.campaign_id) {
                waiting.insert(key);
                continue;
            }
            let (one, this) = (std::slice::from_ref(write), &good[i..=i]);
            let origin = [entry.origin()];
            match self.ledger.apply_read(one, &origin, fence).await {
                Ok(out) => self.applied(this, one, &out, step).await?,
                Err(e) => match refused_rule(&e) {
                    Some(rule)
                        if !self.nothing_older(entry, &handled).await?
                            && !self.deferred_too_long(entry) =>
                    {
                        tracing::info!(campaign = %entry.campaign_id, order = %write.order().order_id, rule, "the ledger refuses an order while older entries of its campaign are unhandled; it waits for them");
                        deferred.insert(entry.campaign_id.clone());
                        waiting.insert(key);
                        continue;
                    }
                    // Nothing older is left now; what was older may have committed after the
                    // refusal, so the write is tried once more first.
                    Some(rule) => match self.ledger.apply_read(one, &origin, fence).await {
                        Ok(out) => self.applied(this, one, &out, step).await?,
                        Err(again) if refused_rule(&again).is_some() => {
                            self.refused_by_rule(entry, write, rule, &again).await?;
                            step.poisoned += 1;
                        }
                        Err(again) => return Err(again),
                    },
                    None if is_data_error(&e) => {
                        self.poison(entry, Some(write), &format!("{e:#}")).await?;
                        step.poisoned += 1;
                    }
                    None => return Err(e),
                },
            }
            handled.insert(key);
        }
        self.deferred_since.retain(|k, _| waiting.contains(k));
        Ok((!deferred.is_empty()).then_some(waiting))
    }
}
