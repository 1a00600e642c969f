//! Order holds in the embedded engine: cancel and expiry of orders (confirm is in
//! `confirm.rs`), each resolving a pending order exactly once.
//!
//! The arbiter is the campaign lock: a pending order is in its campaign's
//! [`Holds`](crate::engine::state::Holds) until one resolution takes it out, and whichever
//! does so first owns it. Resolutions also hold the campaign's admin mutex until their write
//! is durable and settled, so a confirm, cancel or expiry never sees another one half-done:
//! what is not pending in memory is resolved in the ledger.
//!
//! The deadline decides, not the sweeper: a confirm decided at or after `pay_by` is refused
//! even when the expiry has not run yet (and expires the order at once, so the answer and the
//! order agree). The sweeper ([`sweep_loop`]) looks at each campaign's earliest deadline every
//! [`SWEEP_EVERY`] and expires what is due in one group commit per campaign; the units, codes
//! and allowance return once the expiry is durable. At start (and after an in-process
//! re-read) the overdue orders are expired before the first claim is served.

use std::sync::Arc;
use std::time::Duration;

use super::cell::CampaignCell;
use super::Embedded;
use crate::domain::{parse_order_id, Error, Order, OrderState};
use crate::engine::backend::Backend;
use crate::engine::detach::detached;
use crate::engine::hold_stats::being_resolved;
use crate::engine::idempotency::commit_failed;
use crate::ledger::{CommitFault, LedgerWrite};

/// How often the sweeper looks for due deadlines.
pub(super) const SWEEP_EVERY: Duration = Duration::from_millis(50);

/// Most expiries written in one group commit.
const MAX_EXPIRE_BATCH: usize = 4096;

impl Embedded {
    pub(super) async fn confirm_order(&self, order_id: &str) -> Result<Order, Error> {
        let order_id = order_id.to_owned();
        detached(&self.me, move |me| async move {
            me.confirm_order_now(&order_id).await
        })
        .await
    }

    pub(super) async fn cancel_order(&self, order_id: &str) -> Result<Order, Error> {
        let order_id = order_id.to_owned();
        detached(&self.me, move |me| async move {
            me.cancel_order_now(&order_id).await
        })
        .await
    }

    /// The cell of an order's campaign, or 404 for the order.
    pub(super) fn order_cell(&self, order_id: &str) -> Result<(Arc<CampaignCell>, u64), Error> {
        let (campaign_id, seq) = parse_order_id(order_id)?;
        let cell = self
            .cell(campaign_id)
            .map_err(|_| Error::order_not_found(order_id))?;
        Ok((cell, seq))
    }

    async fn cancel_order_now(&self, order_id: &str) -> Result<Order, Error> {
        let (cell, seq) = self.order_cell(order_id)?;
        let _admin = cell.admin.lock().await;
        let mut order = self.order(order_id).await?;
        if !order.state.is_live() {
            return Ok(order);
        }
        // Its units and codes go back to the buyer's allowance and the pool.
        self.awake(&cell).await?;
        let taken = match order.state {
            OrderState::Pending => {
                let mut inner = cell.inner.lock();
                self.current(&cell)?;
                let held = inner.state.holds.take(seq);
                Some(held.ok_or_else(|| being_resolved(order_id))?)
            }
            _ => None,
        };
        let at = self.clock.now();
        let write = LedgerWrite::Cancel {
            order_id: order_id.to_owned(),
            at,
        };
        if let Err(e) = self.commit.run(cell.epoch, vec![write]).await {
            if let (Some(held), CommitFault::NotCommitted) = (taken, e.fault) {
                cell.inner.lock().state.holds.put_back(seq, held);
            }
            return Err(commit_failed(e));
        }
        let codes = order.codes.clone().unwrap_or_default();
        {
            let mut inner = cell.inner.lock();
            if taken.is_some() {
                inner.state.holds.settled(order.qty);
            }
            inner.state.release(&order.user_id, order.qty, &codes);
            cell.publish(&inner);
        }
        order.state = OrderState::Cancelled;
        order.cancelled_at = Some(at);
        tracing::info!(order = order_id, qty = order.qty, "order cancelled");
        Ok(order)
    }

    /// Refuses to act on state that is being replaced by the ledger's (call under the lock).
    pub(super) fn current(&self, cell: &CampaignCell) -> Result<(), Error> {
        if cell.epoch != self.commit.epoch() {
            return Err(Error::not_committed(
                "the engine is re-reading its state from the ledger",
            ));
        }
        Ok(())
    }

    /// Expires every due order of every campaign with holds; the number expired.
    pub(super) async fn sweep(&self) -> Result<usize, Error> {
        let now = self.clock.now();
        let due: Vec<Arc<CampaignCell>> = self
            .campaigns
            .read()
            .values()
            .filter(|c| {
                let inner = c.inner.lock();
                inner.state.holds.next_deadline().is_some_and(|t| t <= now)
            })
            .cloned()
            .collect();
        let mut n = 0;
        for cell in due {
            let _admin = cell.admin.lock().await;
            n += self.expire_locked(&cell).await?;
        }
        Ok(n)
    }

    /// Expires the due orders of one campaign; call with its admin mutex held.
    pub(super) async fn expire_locked(&self, cell: &CampaignCell) -> Result<usize, Error> {
        let mut n = 0;
        loop {
            let now = self.clock.now();
            let (id, due) = {
                let mut inner = cell.inner.lock();
                self.current(cell)?;
                let due = inner.state.holds.take_due(now, MAX_EXPIRE_BATCH);
                (inner.state.def.id.clone(), due)
            };
            if due.is_empty() {
                return Ok(n);
            }
            let writes = due
                .iter()
                .map(|(seq, _)| LedgerWrite::Expire {
                    order_id: format!("{id}-{seq}"),
                    at: now,
                })
                .collect();
            if let Err(e) = self.commit.run(cell.epoch, writes).await {
                if e.fault == CommitFault::NotCommitted {
                    let mut inner = cell.inner.lock();
                    for (seq, held) in due {
                        inner.state.holds.put_back(seq, held);
                    }
                }
                return Err(commit_failed(e));
            }
            let back = self.clock.now();
            let mut inner = cell.inner.lock();
            let (mut late_sum, mut late_max) = (0, 0);
            for (_, held) in &due {
                inner.state.holds.settled(held.qty);
                inner.state.release(&held.user_id, held.qty, &held.codes);
                let late = (back - held.pay_by).num_microseconds().unwrap_or(0).max(0) as u64;
                late_sum += late;
                late_max = late_max.max(late);
            }
            cell.publish(&inner);
            drop(inner);
            self.hold_stats
                .expired(due.len() as u64, late_sum, late_max);
            n += due.len();
            tracing::debug!(campaign = %id, expired = due.len(), "pending orders expired");
        }
    }
}

/// The supervised task of [`sweep_loop`].
pub(super) const TASK: &str = "holds-sweep";

/// Expires due orders every [`SWEEP_EVERY`] until the engine is dropped.
pub(super) async fn sweep_loop(me: std::sync::Weak<Embedded>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(me) = me.upgrade() else { return };
        if let Err(e) = me.sweep().await {
            // The writer logs the fault itself; the next tick tries again.
            tracing::debug!(error = %e, "expiring pending orders failed; retrying");
        }
    }
}
