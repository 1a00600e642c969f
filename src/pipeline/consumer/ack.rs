//! Acknowledging what the ledger has: each stream entry once, the orders of a batch entry
//! together (`ack.lua` trims only below what every consumer has finished with), and never an
//! entry read from a Redis Cluster node the campaign has left (`lost`): it is not in the stream
//! of the node serving the campaign, where an entry of the same id may be waiting.

use std::collections::HashMap;

use super::Consumer;
use crate::pipeline::entry::Entry;

impl Consumer {
    /// Acknowledges (and removes) the stream entries of `entries`, each once.
    pub(super) async fn ack<'a>(
        &mut self,
        entries: impl IntoIterator<Item = &'a Entry>,
    ) -> anyhow::Result<()> {
        // Orders per stream entry: the orders of a batch entry are acknowledged together.
        let mut orders: HashMap<(&str, &str), u64> = HashMap::new();
        for e in entries {
            *orders.entry(e.key()).or_default() += e.orders_carried();
        }
        if !self.not_here.is_empty() {
            orders.retain(|(c, id), _| !self.not_here.contains(&(c.to_string(), id.to_string())));
            self.not_here.clear();
        }
        let mut by_campaign: HashMap<&str, Vec<(String, u64)>> = HashMap::new();
        for ((campaign, id), n) in orders {
            by_campaign
                .entry(campaign)
                .or_default()
                .push((id.to_owned(), n));
        }
        for (campaign, ids) in by_campaign {
            self.scripts.ack(&mut self.conn, campaign, &ids).await?;
        }
        Ok(())
    }
}
