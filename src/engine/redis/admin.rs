//! Admin operations of the scale-out deployment and the reconciliation of the gate with the
//! ledger.
//!
//! Order of writes, chosen so a crash between the two stores is always repairable:
//! - create and restock commit to PostgreSQL first, then a guarded script applies them to
//!   Redis (`install.lua` only if the campaign is absent, `restock.lua` only if the gate's
//!   total is still the pre-restock total). A gate behind the ledger under-sells for a moment;
//!   it can never sell a unit the ledger does not have.
//! - pause / resume / close hold the campaign's row lock in PostgreSQL, switch the gate (the
//!   switch is what claims see, atomically), then commit; if the commit fails, the gate is
//!   switched back.
//! - cancel marks the order cancelled in PostgreSQL exactly once (`WHERE state = 'active'`),
//!   then gives units, codes and allowance back with `release.lua`, at most once per order.

use super::rebuild::Installing;
use super::scripts::Guarded;
use super::{redis_failed, Keys, ScaleOut};
use crate::domain::{
    now, parse_order_id, CampaignView, Error, NewCampaign, Order, OrderState, Restock, Status,
    Supply,
};
use crate::engine::state::{CampaignDef, CampaignState};
use crate::ledger::{Ledger, PgLedger};

/// How long a cancel waits for an order that was won but is not yet in the ledger.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn ledger_failed(context: &'static str) -> impl Fn(anyhow::Error) -> Error {
    move |e| Error::unavailable(context, format!("{e:#}"))
}

impl ScaleOut {
    pub(super) async fn create(&self, c: NewCampaign) -> Result<CampaignView, Error> {
        let def = CampaignDef {
            id: c.id.clone(),
            kind: c.kind(),
            per_user_limit: c.per_user_limit,
            starts_at: c.starts_at,
            ends_at: c.ends_at,
        };
        let total = c.total();
        let codes = match c.supply {
            Supply::Stock(_) => Vec::new(),
            Supply::Codes(codes) => codes,
        };
        self.ledger
            .create_campaign(&def, total, &codes, now())
            .await?;
        let state = CampaignState::new(def, total, Vec::new(), Status::Active);
        let fresh = Installing {
            def: &state.def,
            total,
            remaining: total,
            status: Status::Active,
            seq: 0,
        };
        let installed = self
            .install_new(&fresh, &codes)
            .await
            .map_err(redis_failed(
                "the campaign is saved but Redis did not take it",
            ))?;
        if !installed {
            // Redis already had a campaign of that id the ledger did not: state left over from
            // another ledger. The gate's state wins; say so loudly.
            tracing::error!(campaign = %state.def.id, "Redis already holds this campaign although the ledger did not; flush stale Redis data");
            return self.campaign_view(&state.def.id).await;
        }
        tracing::info!(campaign = %state.def.id, kind = state.def.kind.as_str(), total, "campaign created");
        Ok(state.view())
    }

    /// Brings the gate level with the ledger: installs a missing campaign, applies restocks
    /// the ledger committed but Redis never saw, and releases cancelled orders (idempotent).
    pub async fn reconcile(&self, id: &str) -> Result<(), Error> {
        if self.gate_view(id).await?.is_none() {
            return self.install_from_ledger(id).await;
        }
        self.catch_up_restocks(id).await?;
        let cancelled = self
            .ledger
            .cancelled_orders(id)
            .await
            .map_err(ledger_failed("reading cancelled orders failed"))?;
        for o in cancelled {
            self.release(&o).await?;
        }
        Ok(())
    }

    async fn catch_up_restocks(&self, id: &str) -> Result<(), Error> {
        loop {
            let Some(gate) = self.gate_view(id).await? else {
                return self.install_from_ledger(id).await;
            };
            let (total, codes) = self
                .ledger
                .total_and_codes_from(id, gate.total)
                .await
                .map_err(ledger_failed("reading the campaign failed"))?;
            if total <= gate.total {
                return Ok(());
            }
            let applied = self
                .scripts
                .restock(&mut self.conn(), id, gate.total, total - gate.total, &codes)
                .await
                .map_err(redis_failed("applying a restock to Redis failed"))?;
            if let Guarded::Ok(_) = applied {
                tracing::warn!(
                    campaign = id,
                    units = total - gate.total,
                    "applied a restock Redis had missed"
                );
                return Ok(());
            }
        }
    }

    pub(super) async fn restock_campaign(
        &self,
        id: &str,
        restock: Restock,
    ) -> Result<CampaignView, Error> {
        let done = self.ledger.restock(id, &restock, now()).await?;
        let codes = match &restock {
            Restock::Units(_) => &[][..],
            Restock::Codes(c) => &c[..],
        };
        let applied = self
            .scripts
            .restock(
                &mut self.conn(),
                id,
                done.before,
                done.after - done.before,
                codes,
            )
            .await
            .map_err(redis_failed(
                "the restock is saved but Redis did not take it",
            ))?;
        if applied != Guarded::Ok(done.after.to_string()) {
            // Another instance restocked concurrently, or Redis lost the campaign.
            self.catch_up_restocks(id).await?;
        }
        tracing::info!(
            campaign = id,
            units = done.after - done.before,
            total = done.after,
            "campaign restocked"
        );
        self.campaign_view(id).await
    }

    async fn campaign_view(&self, id: &str) -> Result<CampaignView, Error> {
        crate::backend::Backend::campaign(self, id).await
    }

    pub(super) async fn change_status(&self, id: &str, to: Status) -> Result<CampaignView, Error> {
        let (mut tx, _) = self.ledger.lock_campaign(id).await?;
        self.catch_up_restocks(id).await?;
        let switched = self
            .scripts
            .status(&mut self.conn(), id, to.as_str(), false)
            .await
            .map_err(redis_failed("Redis did not take the status change"))?;
        let previous = match switched {
            Guarded::Ok(p) => p,
            Guarded::Refused(_) => {
                return Err(Error::Conflict(format!(
                    "campaign is closed for good; it cannot become {}",
                    to.as_str()
                )))
            }
            Guarded::Missing => return Err(Error::campaign_not_found(id)),
        };
        let committed = match PgLedger::write_status(&mut tx, id, to, now()).await {
            Ok(()) => tx.commit().await,
            Err(e) => Err(e),
        };
        if let Err(e) = committed {
            let undo = self
                .scripts
                .status(&mut self.conn(), id, &previous, true)
                .await;
            if let Err(u) = undo {
                tracing::error!(campaign = id, error = %u, "could not undo a status change the ledger refused");
            }
            return Err(Error::unavailable(
                "the status change could not be committed",
                e,
            ));
        }
        tracing::info!(campaign = id, from = %previous, to = to.as_str(), "status changed");
        self.campaign_view(id).await
    }

    pub(super) async fn cancel_order(&self, order_id: &str) -> Result<Order, Error> {
        let (campaign, seq) = parse_order_id(order_id)?;
        let order = match self.ledger_order(order_id).await? {
            Some(o) => o,
            None => self.wait_for_pipeline(campaign, seq, order_id).await?,
        };
        if order.state == OrderState::Cancelled {
            self.release(&order).await?;
            return Ok(order);
        }
        let cancelled = self
            .ledger
            .cancel_order(order_id, now())
            .await
            .map_err(ledger_failed("cancelling the order failed"))?;
        let order = match cancelled {
            Some(o) => o,
            // Cancelled concurrently by another request: same answer.
            None => self
                .ledger_order(order_id)
                .await?
                .ok_or_else(|| Error::order_not_found(order_id))?,
        };
        self.release(&order).await?;
        tracing::info!(order = order_id, qty = order.qty, "order cancelled");
        Ok(order)
    }

    async fn ledger_order(&self, order_id: &str) -> Result<Option<Order>, Error> {
        self.ledger
            .order(order_id)
            .await
            .map_err(ledger_failed("reading the order failed"))
    }

    /// An order number the gate already issued is in the stream: wait (bounded) for the
    /// pipeline to put it in the ledger. A number never issued is 404.
    async fn wait_for_pipeline(
        &self,
        campaign: &str,
        seq: u64,
        order_id: &str,
    ) -> Result<Order, Error> {
        let issued: Option<u64> =
            redis::AsyncCommands::get(&mut self.conn(), Keys::new(campaign).seq())
                .await
                .map_err(redis_failed("reading the order sequence failed"))?;
        if issued.unwrap_or(0) < seq {
            return Err(Error::order_not_found(order_id));
        }
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            if let Some(o) = self.ledger_order(order_id).await? {
                return Ok(o);
            }
        }
        Err(Error::Unavailable(format!(
            "order '{order_id}' was won but is not in the ledger yet (pipeline lag); retry later"
        )))
    }

    async fn release(&self, o: &Order) -> Result<(), Error> {
        let codes = o.codes.clone().unwrap_or_default();
        let released = self
            .scripts
            .release(
                &mut self.conn(),
                &o.campaign_id,
                &o.order_id,
                &o.user_id,
                o.qty,
                &codes,
            )
            .await
            .map_err(redis_failed(
                "giving the order's units back in Redis failed",
            ))?;
        if released < 0 {
            // Not in Redis: rebuilding it from the ledger counts the order as cancelled.
            self.install_from_ledger(&o.campaign_id).await?;
        }
        Ok(())
    }
}
