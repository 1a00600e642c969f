//! Building every campaign's cell from the ledger at start.
//!
//! The ledger streams its rows ([`Recovery`]) into one [`Rebuild`] per campaign, so recovery
//! holds the rebuilt state and one row, never the ledger's rows: a million orders restart in
//! well under a second and in less memory than the server that sold them held (figures in
//! docs/BENCHMARKS.md). Every holder is also put on the guard's stock board, so the fast
//! `sold_out` path keeps answering them `already_claimed` through the engine.
//!
//! Only what can still sell is loaded. A campaign that is [`dormant`] — closed or past its
//! `ends_at`, no pending order, no kept Idempotency-Key answer — answers every claim from its
//! status or window, which the engine decides before it reads a buyer's holding; its view
//! comes from the ledger's counts. So it starts as a [`CampaignState::dormant`] (definition
//! and counts, no buyers), and a restart costs what the live campaigns hold, not the history.
//! An admin change that needs its buyers (a restock, a resume, a cancel) loads it first
//! ([`load_one`]); a claim that gets past its status and window (it cannot, short of a clock
//! moved back) loads it too.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::anyhow;
use chrono::{DateTime, Utc};

use super::cell::CampaignCell;
use super::Embedded;
use crate::domain::Error;
use crate::engine::idempotency::{IdemLimits, IdemSlots, Slot};
use crate::engine::state::{CampaignState, Rebuild};
use crate::guard::soldout::StockBoard;
use crate::ledger::{
    IdemRecord, Ledger, PendingRow, Recovery, SqliteLedger, StoredCampaign, Wanted,
};

/// Whether campaign `c` can be left unloaded at `now`: no claim on it can reach its buyers
/// (its status is `closed` or its window has ended, and both are decided first), nothing of it
/// can still be resolved (no pending order), and no Idempotency-Key answer of its claims is
/// kept (a kept answer is replayed from memory).
pub(super) fn dormant(c: &StoredCampaign, now: DateTime<Utc>) -> bool {
    CampaignState::stopped_for_good(&c.def, c.status, now) && !c.pending && !c.answers
}

/// Rebuilds every campaign of `ledger` as a cell registered on `board`, with the idempotency
/// answers younger than `idempotency_ttl`; campaigns [`dormant`] at `now` without their buyers.
pub(super) async fn load_cells(
    ledger: &dyn Ledger,
    board: &StockBoard,
    idempotency_ttl: chrono::Duration,
    idem_limits: IdemLimits,
    epoch: u64,
    now: DateTime<Utc>,
) -> anyhow::Result<HashMap<String, Arc<CampaignCell>>> {
    let mut loader = Loader::new(idempotency_ttl, idem_limits, Some(now));
    ledger.recover(loader.since, &mut loader).await?;
    let mut cells = HashMap::with_capacity(loader.campaigns.len() + loader.dormant.len());
    for state in loader.dormant {
        let v = state.view();
        tracing::info!(campaign = %v.id, total = v.total, remaining = v.remaining, status = v.status.as_str(), "campaign recovered dormant (closed or ended; its buyers stay in the ledger)");
        cells.insert(v.id, CampaignCell::new(state, board, epoch, idem_limits));
    }
    for (rebuild, idem) in loader.campaigns {
        let state = rebuild.finish();
        let cell = CampaignCell::new(state, board, epoch, idem_limits);
        let mut inner = cell.inner.lock();
        inner.idem = idem;
        let v = inner.state.view();
        tracing::info!(campaign = %v.id, total = v.total, remaining = v.remaining, pending = v.holds.map(|h| h.pending), status = v.status.as_str(), "campaign recovered");
        drop(inner);
        cells.insert(v.id, cell);
    }
    Ok(cells)
}

/// Campaign `id` rebuilt whole from the ledger (buyers, codes, pending orders), for a cell
/// that was left [`dormant`]; its idempotency answers are the cell's own.
pub(super) async fn load_one(
    ledger: &SqliteLedger,
    id: &str,
    idempotency_ttl: chrono::Duration,
    idem_limits: IdemLimits,
) -> anyhow::Result<CampaignState> {
    let mut loader = Loader::new(idempotency_ttl, idem_limits, None);
    ledger
        .recover_campaign(id, loader.since, &mut loader)
        .await?;
    let (rebuild, _) = loader
        .campaigns
        .pop()
        .ok_or_else(|| anyhow!("campaign {id:?} is not in the ledger"))?;
    Ok(rebuild.finish())
}

impl Embedded {
    /// Loads the buyers, codes and pending orders of a campaign left dormant at start (see
    /// `recover`); a no-op for a loaded one. Call with the campaign's admin mutex held: nothing
    /// else changes a dormant campaign's stock (its claims answer from status and window), so
    /// the ledger read and the swap need no other lock. Its idempotency answers stay the
    /// cell's own, which hold every answer since the cell was built.
    pub(super) async fn awake(&self, cell: &CampaignCell) -> Result<(), Error> {
        let id = {
            let inner = cell.inner.lock();
            if !inner.state.is_dormant() {
                return Ok(());
            }
            inner.state.def.id.clone()
        };
        let started = std::time::Instant::now();
        let state = load_one(&self.ledger, &id, self.idempotency_ttl, self.idem_limits)
            .await
            .map_err(|e| Error::unavailable("loading the campaign from the ledger failed", e))?;
        // Holders first, then the state that may sell again (see guard::soldout); outside the
        // campaign lock (claims of a dormant campaign answer from status and window meanwhile).
        cell.signal.add_holders(state.holder_ids(), state.holders());
        let mut inner = cell.inner.lock();
        inner.state = state;
        cell.publish(&inner);
        tracing::info!(campaign = %id, holders = inner.state.holders(), took_ms = started.elapsed().as_millis() as u64, "dormant campaign loaded from the ledger");
        Ok(())
    }
}

struct Loader {
    campaigns: Vec<(Rebuild, IdemSlots)>,
    /// Campaigns left unloaded.
    dormant: Vec<CampaignState>,
    index: HashMap<String, usize>,
    /// The campaign of the previous row: rows of one campaign mostly come together.
    last: usize,
    idem_limits: IdemLimits,
    /// Idempotency answers older than this are past their retention.
    since: chrono::DateTime<Utc>,
    started: chrono::DateTime<Utc>,
    /// The engine's time dormancy is judged at; `None` loads every campaign whole.
    dormant_at: Option<DateTime<Utc>>,
}

impl Loader {
    fn new(
        idempotency_ttl: chrono::Duration,
        idem_limits: IdemLimits,
        dormant_at: Option<DateTime<Utc>>,
    ) -> Self {
        let started = crate::domain::now();
        Self {
            campaigns: Vec::new(),
            dormant: Vec::new(),
            index: HashMap::new(),
            last: 0,
            idem_limits,
            since: started - idempotency_ttl,
            started,
            dormant_at,
        }
    }

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
    fn campaign(&mut self, c: StoredCampaign) -> anyhow::Result<Wanted> {
        if self.dormant_at.is_some_and(|now| dormant(&c, now)) {
            let state = CampaignState::dormant(c.def, c.total, c.status, c.live_units, c.max_seq);
            self.dormant.push(state);
            return Ok(Wanted::DefinitionOnly);
        }
        self.index.insert(c.def.id.clone(), self.campaigns.len());
        let rebuild = Rebuild::new(c.def, c.total, c.status, c.max_seq);
        self.campaigns
            .push((rebuild, IdemSlots::new(self.idem_limits)));
        Ok(Wanted::Everything)
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

#[cfg(test)]
mod dormant_tests;
