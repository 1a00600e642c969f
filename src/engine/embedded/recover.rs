//! Building every campaign's cell from the ledger at start.
//!
//! The ledger streams its rows ([`Recovery`]) into one [`Rebuild`] per campaign, so recovery
//! holds the rebuilt state and one row, never the ledger's rows: a million orders restart in
//! well under a second and in less memory than the server that sold them held (figures in
//! docs/BENCHMARKS.md). Every holder is also put on the guard's stock board, so the fast
//! `sold_out` path keeps answering them `already_claimed` through the engine.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::anyhow;
use chrono::Utc;

use super::cell::Cell;
use crate::engine::idempotency::{IdemLimits, IdemSlots, Slot};
use crate::engine::state::Rebuild;
use crate::guard::soldout::StockBoard;
use crate::ledger::{IdemRecord, Ledger, PendingRow, Recovery, StoredCampaign};

/// Rebuilds every campaign of `ledger` as a cell registered on `board`, with the idempotency
/// answers younger than `idempotency_ttl`.
pub(super) async fn load_cells(
    ledger: &dyn Ledger,
    board: &StockBoard,
    idempotency_ttl: chrono::Duration,
    idem_limits: IdemLimits,
    epoch: u64,
) -> anyhow::Result<HashMap<String, Arc<Cell>>> {
    let started = crate::domain::now();
    let mut loader = Loader {
        campaigns: Vec::new(),
        index: HashMap::new(),
        last: 0,
        idem_limits,
        since: started - idempotency_ttl,
        started,
    };
    ledger.recover(loader.since, &mut loader).await?;
    let mut cells = HashMap::with_capacity(loader.campaigns.len());
    for (rebuild, idem) in loader.campaigns {
        let state = rebuild.finish();
        let cell = Cell::new(state, board, epoch, idem_limits);
        let mut inner = cell.inner.lock();
        let holders = inner.state.holdings().map(|(user, _)| user);
        cell.signal.add_holders(holders, inner.state.holders());
        inner.idem = idem;
        cell.publish(&inner); // again, now that every holder is on the board
        let v = inner.state.view();
        tracing::info!(campaign = %v.id, total = v.total, remaining = v.remaining, pending = v.holds.map(|h| h.pending), status = v.status.as_str(), "campaign recovered");
        drop(inner);
        cells.insert(v.id, cell);
    }
    Ok(cells)
}

struct Loader {
    campaigns: Vec<(Rebuild, IdemSlots)>,
    index: HashMap<String, usize>,
    /// The campaign of the previous row: rows of one campaign mostly come together.
    last: usize,
    idem_limits: IdemLimits,
    /// Idempotency answers older than this are past their retention.
    since: chrono::DateTime<Utc>,
    started: chrono::DateTime<Utc>,
}

impl Loader {
    fn slot(&mut self, id: &str) -> anyhow::Result<&mut (Rebuild, IdemSlots)> {
        let hit = self
            .campaigns
            .get(self.last)
            .is_some_and(|(r, _)| r.id() == id);
        if !hit {
            self.last = *self
                .index
                .get(id)
                .ok_or_else(|| anyhow!("row refers to unknown campaign {id:?}"))?;
        }
        Ok(&mut self.campaigns[self.last])
    }
}

impl Recovery for Loader {
    fn campaign(&mut self, c: StoredCampaign) -> anyhow::Result<()> {
        self.index.insert(c.def.id.clone(), self.campaigns.len());
        let rebuild = Rebuild::new(c.def, c.total, c.status, c.max_seq);
        self.campaigns
            .push((rebuild, IdemSlots::new(self.idem_limits)));
        Ok(())
    }

    fn code(&mut self, campaign_id: &str, code: String) -> anyhow::Result<()> {
        self.slot(campaign_id)?.0.code(code);
        Ok(())
    }

    fn order(
        &mut self,
        campaign_id: &str,
        user_id: &str,
        qty: u64,
        codes: &[String],
    ) -> anyhow::Result<()> {
        self.slot(campaign_id)?.0.order(user_id, qty, codes);
        Ok(())
    }

    fn pending(&mut self, campaign_id: &str, p: PendingRow<'_>) -> anyhow::Result<()> {
        let rebuild = &mut self.slot(campaign_id)?.0;
        rebuild.pending(p.seq, p.user_id, p.qty, p.codes, p.pay_by);
        Ok(())
    }

    fn idem(&mut self, r: IdemRecord) -> anyhow::Result<()> {
        let (since, started) = (self.since, self.started);
        let slots = &mut self.slot(&r.campaign_id)?.1;
        if slots.keeps(&r.answer, r.created_at, since, started) {
            slots.insert(r.user_id, r.key, Slot::Done(r.answer, r.created_at));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
