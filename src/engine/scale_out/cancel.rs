//! Cancel in the scale-out deployment.
//!
//! A pending order (a campaign with holds) is cancelled by the gate: `cancel_hold.lua` takes it
//! out of the held orders exactly once — against a confirm or the expiry of the same order —
//! gives its units, codes and allowance back and appends the `cancelled` transition to the
//! order stream in one step; PostgreSQL learns it from the pipeline. Any other order (active,
//! or confirmed) is cancelled in PostgreSQL first, exactly once (`WHERE state IN ('active',
//! 'confirmed')`), then `release.lua` gives units, codes and allowance back, at most once per
//! order; such an order needs no Redis to be cancelled (a cancel saved while Redis is down is
//! applied to the gate later, `catch_up.rs`). An order the gate resolved but PostgreSQL still
//! shows pending is waited for (the pipeline applies the transition), never released from its
//! stale row.

use super::admin::{ledger_failed, saved_not_applied};
use super::holds::{HoldOutcome, Resolution};
use super::{redis_failed, Keys, ScaleOut};
use crate::domain::{now, parse_order_id, Error, Order, OrderState};
use crate::engine::hold_stats::being_resolved;
use crate::ledger::Ledger;

/// How long a cancel waits for an order that was won but is not yet in the ledger.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl ScaleOut {
    /// Cancels an order; with it, whether the gate decided the cancel (a pending order: the
    /// ledger learns it through the stream, so only a replica makes it survive a failover).
    pub(super) async fn cancel_order(&self, order_id: &str) -> Result<(Order, bool), Error> {
        let (campaign, seq) = parse_order_id(order_id)?;
        let order = match self.ledger_order(order_id).await? {
            // Active, confirmed or final in the ledger: Redis is not needed to decide.
            Some(o) if o.state != OrderState::Pending => o,
            _ => {
                match self.resolve(Resolution::Cancel, campaign, order_id).await? {
                    HoldOutcome::Now(order) => {
                        tracing::info!(order = order_id, qty = order.qty, "order cancelled");
                        return Ok((order, true));
                    }
                    // Cancelled or expired before; a confirmed order is cancelled in the ledger.
                    HoldOutcome::Earlier(order) if order.state != OrderState::Confirmed => {
                        return Ok((order, true))
                    }
                    HoldOutcome::Earlier(_) | HoldOutcome::Overdue(_) | HoldOutcome::NotPending => {
                    }
                }
                self.settled_order(campaign, seq, order_id).await?
            }
        };
        if !order.state.is_live() {
            // Expired (its units went back when it expired), or cancelled: release is at
            // most once per order.
            if order.state == OrderState::Cancelled {
                self.release(&order).await?;
            }
            return Ok((order, false));
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
        if order.state != OrderState::Cancelled {
            return Err(being_resolved(order_id));
        }
        self.release(&order).await?;
        tracing::info!(order = order_id, qty = order.qty, "order cancelled");
        Ok((order, false))
    }

    /// The order as the ledger holds it once it is there and not pending: a pending order of
    /// the ledger the gate no longer holds is resolved, its transition on its way (bounded
    /// wait, then 503 with nothing changed).
    pub(super) async fn settled_order(
        &self,
        campaign: &str,
        seq: u64,
        order_id: &str,
    ) -> Result<Order, Error> {
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        loop {
            let order = match self.ledger_order(order_id).await? {
                Some(o) => o,
                None => self.wait_for_pipeline(campaign, seq, order_id).await?,
            };
            if order.state != OrderState::Pending {
                return Ok(order);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(being_resolved(order_id));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
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
            self.refused_by_ledger(campaign, order_id).await?;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            if let Some(o) = self.ledger_order(order_id).await? {
                return Ok(o);
            }
        }
        Err(Error::Unavailable(format!(
            "order '{order_id}' was won but is not in the ledger yet (pipeline lag); retry later"
        )))
    }

    /// A conflict when the pipeline recorded `order_id` as refused by the ledger (a poison
    /// order): it never became an order and its units were already given back, so there is
    /// nothing to cancel and waiting for it would never end.
    async fn refused_by_ledger(&self, campaign: &str, order_id: &str) -> Result<(), Error> {
        let failed = self
            .ledger
            .failed_orders(campaign)
            .await
            .map_err(ledger_failed("reading the refused orders failed"))?;
        if failed.iter().any(|(id, _)| id.as_deref() == Some(order_id)) {
            return Err(Error::Conflict(format!(
                "order '{order_id}' was won but the ledger refused to store it; its units \
                 were already given back, so there is nothing to cancel"
            )));
        }
        Ok(())
    }

    pub(super) async fn release(&self, o: &Order) -> Result<(), Error> {
        let codes = o.codes.clone().unwrap_or_default();
        for _ in 0..3 {
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
                .map_err(saved_not_applied("the cancel"))?;
            if released >= 0 {
                return Ok(());
            }
            // Not in Redis: rebuild it from the ledger, then release again. A rebuild racing
            // this one may have installed a snapshot taken before the cancel committed; the
            // release script is at most once per order, so repeating it is always safe.
            self.install_from_ledger(&o.campaign_id)
                .await
                .map_err(|_| saved_not_applied("the cancel")("rebuilding failed"))?;
        }
        Err(saved_not_applied("the cancel")(
            "the campaign kept disappearing from Redis",
        ))
    }
}
