//! Admin changes and confirms count only once a replica has them (`--redis-wait-replicas`).
//!
//! Claims wait for a replica before they are answered (`batch/replicas.rs`); admin changes
//! and confirms must too. A restock, status change or cancel that a primary applied and then lost in a
//! failover (a graceful `SENTINEL FAILOVER` leaves the old primary taking writes for seconds
//! after the replica was promoted) leaves the gate behind the ledger for good — units of a
//! cancelled order never sold again, a restock never sellable — unless someone notices. The
//! fault campaign found exactly that (`seckill chaos --deployment sentinel`, the gate's
//! `remaining` below total minus sold after failovers with cancels and restocks in them).
//!
//! So an admin change whose Redis part is not confirmed by `WAIT` answers the same 503 as one
//! Redis did not take ("saved in the ledger, not yet applied"), and the campaign goes to the
//! catch-up task (`catch_up.rs`), whose reconcile — idempotent, comparing the gate with the
//! ledger — counts as done only once it too is confirmed on a replica. The `WAIT` follows a
//! write on the same connection, so it covers everything the primary had when the change
//! finished, including what the reconcile only read.

use super::admin::saved_not_applied;
use super::{Health, ScaleOut, WaitReplicas};
use crate::domain::{Error, Order};

impl ScaleOut {
    /// The link's health before an admin change touches Redis, to compare in
    /// [`Self::replicated`] (the `WAIT` must reach the server the change went to).
    pub(super) fn before_change(&self) -> Option<Health> {
        WaitReplicas::before(&self.redis)
    }

    /// `result`, once `--redis-wait-replicas` replicas have everything the primary had when the
    /// change finished; otherwise the 503 of a change saved but not applied. A no-op when the
    /// option is off or `result` is already an error.
    pub(super) async fn replicated<T>(
        &self,
        what: &'static str,
        before: Option<Health>,
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        let Some(wait) = self.claims.replicas() else {
            return result;
        };
        let value = result?;
        wait.confirm(&self.redis, before)
            .await
            .map_err(saved_not_applied(what))?;
        Ok(value)
    }

    /// The 200 of a resolution the gate decided (a confirm, the cancel of a pending order),
    /// once `--redis-wait-replicas` replicas have it. It reaches the ledger only through the
    /// stream; answered before a replica had it, a failover could lose it — a payment captured
    /// on a confirm's 200 while the new primary expires the order and sells its unit again.
    /// Unconfirmed, the answer is the outcome-unknown 503: both are idempotent, and a retry
    /// answers what became of it.
    pub(super) async fn decided_on_replicas(
        &self,
        what: &'static str,
        before: Option<Health>,
        result: Result<Order, Error>,
    ) -> Result<Order, Error> {
        let Some(wait) = self.claims.replicas() else {
            return result;
        };
        let order = result?;
        wait.confirm(&self.redis, before).await.map_err(|e| {
            Error::OutcomeUnknown(format!(
                "the {what} of order '{}' is not on a Redis replica yet ({e:#}); it may or may \
                 not survive a failover: retry the {what}, it answers the order's state",
                order.order_id
            ))
        })?;
        Ok(order)
    }
}
