//! Holds in the scale-out deployment: confirm, cancel and expiry of pending orders, decided
//! by Redis.
//!
//! Redis is the arbiter of every resolution of a pending order. A won order of a campaign with
//! holds sits in its campaign's `held` hash and `deadlines` zset (claim.lua / claims.lua);
//! `confirm.lua`, `cancel_hold.lua` and `expire.lua` each take it out in one atomic step of the
//! campaign's slot, judged by Redis's own `TIME` — one clock for every instance — and append
//! the transition (`kind` = confirmed | expired | cancelled, `resolved_at`, the whole order
//! again) to the campaign's order stream in that same step. Whichever script runs first owns
//! the order; the others find it in the `resolved` hash and answer from it, so a second confirm
//! answers the same even before PostgreSQL caught up. PostgreSQL learns every transition from
//! the pipeline, in stream order and idempotently.
//!
//! The deadline decides, not the sweeper: a confirm at or after `pay_by` expires the order on
//! the spot and is refused (409). The sweeper ([`sweep_loop`], every [`SWEEP_EVERY`] in every
//! instance) runs `expire.lua` for each campaign of the global [`HOLDS_SET`]; any instance
//! may expire an order and none twice, since the script is the arbiter. Before an instance
//! serves, it sweeps once (`startup.rs`), so orders overdue while nothing ran go back first.

use std::sync::Weak;
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::AsyncCommands;

use super::held::{order_of_record, resolution_keys};
use super::keys::{Keys, HOLDS_SET};
use super::scripts::{timer, Scripts};
use super::{redis_failed, RedisConn, ScaleOut};
use crate::domain::{parse_order_id, Error, Order, OrderState};
use crate::engine::hold_stats::{being_resolved, no_holds, not_confirmable, overdue};
use crate::ledger::Ledger;

/// The supervised task of the expiry sweeper.
pub const TASK: &str = "holds-sweeper";

/// How often each instance looks for due deadlines.
pub const SWEEP_EVERY: Duration = Duration::from_millis(50);

/// Most orders one `expire.lua` call expires (the script runs while Redis serves nothing else).
const MAX_EXPIRE_BATCH: u64 = 1000;

/// Which resolution a caller asks the gate for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Resolution {
    Confirm,
    Cancel,
}

/// What the gate answered about a pending order.
#[derive(Debug)]
pub(super) enum HoldOutcome {
    /// Resolved now by this call (confirmed, or cancelled).
    Now(Order),
    /// A confirm at or after `pay_by`: the order expired now.
    Overdue(Order),
    /// Resolved before (the gate's record of it).
    Earlier(Order),
    /// Not pending in the gate: never a hold, or resolved before the gate was rebuilt.
    NotPending,
}

/// What one `expire.lua` call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// Orders expired now; `None` if the campaign is not in Redis, is fenced or unchecked.
    pub expired: Option<u64>,
    /// Redis Cluster: the node serving the campaign was not checked on its lineage yet.
    pub unchecked: bool,
    /// The earliest `pay_by` still pending.
    pub next: Option<DateTime<Utc>>,
    pub late_sum_us: u64,
    pub late_max_us: u64,
    /// Units still pending in the campaign after this call.
    pub pending: u64,
}

impl Scripts {
    /// Runs confirm.lua or cancel_hold.lua on `order_id`: the script's tag and value.
    pub async fn resolve_hold(
        &self,
        conn: &mut RedisConn,
        confirm: bool,
        campaign: &str,
        order_id: &str,
    ) -> redis::RedisResult<(String, String)> {
        let k = Keys::new(campaign);
        let (script, name) = match confirm {
            true => (&self.holds.confirm, "confirm"),
            false => (&self.holds.cancel, "cancel_hold"),
        };
        let mut inv = script.prepare_invoke();
        resolution_keys(&mut inv, &k)
            .arg(order_id)
            .arg(if conn.is_cluster() { "cluster" } else { "" });
        let _t = timer(name);
        inv.invoke_async(conn).await
    }

    /// Expires at most `max` due pending orders of `campaign` (expire.lua).
    pub async fn expire_due(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        max: u64,
    ) -> redis::RedisResult<Expired> {
        let k = Keys::new(campaign);
        let mut inv = self.holds.expire.prepare_invoke();
        resolution_keys(&mut inv, &k)
            .arg(max)
            .arg(if conn.is_cluster() { "cluster" } else { "" });
        let _t = timer("expire");
        let (n, next, sum, max, pending): (i64, String, u64, u64, u64) =
            inv.invoke_async(conn).await?;
        let next = next
            .parse::<f64>()
            .ok()
            .and_then(|us| DateTime::from_timestamp_micros(us as i64));
        Ok(Expired {
            unchecked: n == -2,
            expired: u64::try_from(n).ok(),
            next,
            late_sum_us: sum,
            late_max_us: max,
            pending,
        })
    }
}

/// The answer to a confirm or hold cancel whose script call failed: "nothing was changed" only
/// when it surely did not run (`refuse::not_run`, never on a cluster); else it may have, and
/// the caller retries (both are idempotent and answer the order's state).
fn resolve_failed(
    confirm: bool,
    cluster: bool,
    order_id: &str,
) -> impl Fn(redis::RedisError) -> Error + '_ {
    move |e| {
        if super::refuse::not_run(cluster, &e) {
            return Error::unavailable("Redis did not answer; nothing was changed", e);
        }
        let what = if confirm { "confirm" } else { "cancel" };
        Error::OutcomeUnknown(format!(
            "the {what} of order '{order_id}' may or may not have been applied ({e}): retry \
             the {what}, it answers the order's state"
        ))
    }
}

impl ScaleOut {
    /// Asks the gate to resolve a pending order; rebuilds a campaign Redis lost once.
    pub(super) async fn resolve(
        &self,
        what: Resolution,
        campaign: &str,
        order_id: &str,
    ) -> Result<HoldOutcome, Error> {
        let confirm = matches!(what, Resolution::Confirm);
        for attempt in 0..2 {
            // Gated like claims: a Redis not yet checked against the ledger (back from an old
            // snapshot) must not resolve what the ledger may already hold resolved.
            let conn = self.conn();
            let (tag, value) = self
                .scripts
                .resolve_hold(&mut conn.gated(), confirm, campaign, order_id)
                .await
                .map_err(resolve_failed(confirm, conn.is_cluster(), order_id))?;
            let order = || {
                order_of_record(order_id, &value).ok_or_else(|| {
                    Error::unavailable("the gate's record of the order is malformed", order_id)
                })
            };
            return match tag.as_str() {
                "confirmed" | "cancelled" => Ok(HoldOutcome::Now(order()?)),
                "overdue" => Ok(HoldOutcome::Overdue(order()?)),
                "resolved" => Ok(HoldOutcome::Earlier(order()?)),
                "none" => Ok(HoldOutcome::NotPending),
                "fenced" => Err(Error::Unavailable(format!(
                    "campaign '{campaign}' is being rebuilt from the ledger after Redis lost \
                     state; nothing was changed, retry later"
                ))),
                "unchecked" if attempt == 0 => {
                    self.check_lineage(campaign).await?;
                    continue;
                }
                "unchecked" => Err(Error::Unavailable(format!(
                    "campaign '{campaign}' moved to another Redis Cluster node that is being \
                     checked against the ledger; nothing was changed, retry later"
                ))),
                "missing" if attempt == 0 => {
                    match self.install_from_ledger(campaign).await {
                        Err(Error::NotFound(_)) => return Err(Error::order_not_found(order_id)),
                        r => r?,
                    }
                    continue;
                }
                _ => Err(Error::Unavailable(format!(
                    "campaign '{campaign}' keeps disappearing from Redis; retry later"
                ))),
            };
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// Confirms a pending order (see docs/HOLDS.md for the answers).
    pub(super) async fn confirm_order(&self, order_id: &str) -> Result<Order, Error> {
        let (campaign, seq) = parse_order_id(order_id)?;
        match self
            .resolve(Resolution::Confirm, campaign, order_id)
            .await?
        {
            HoldOutcome::Now(order) => {
                self.hold_stats.confirmed();
                tracing::debug!(order = order_id, "order confirmed");
                Ok(order)
            }
            HoldOutcome::Overdue(order) => {
                let late = (order.resolved_at.unwrap_or(order.created_at)
                    - order.pay_by.unwrap_or(order.created_at))
                .num_microseconds()
                .unwrap_or(0)
                .max(0) as u64;
                self.hold_stats.expired(1, late, late);
                Err(overdue(&order))
            }
            HoldOutcome::Earlier(order) if order.state == OrderState::Confirmed => {
                // A confirmed order may have been cancelled since, in the ledger.
                match self.ledger.order(order_id).await {
                    Ok(Some(o)) if o.state == OrderState::Cancelled => Err(not_confirmable(&o)),
                    _ => Ok(order),
                }
            }
            HoldOutcome::Earlier(order) => Err(not_confirmable(&order)),
            HoldOutcome::NotPending => {
                let order = self.settled_order(campaign, seq, order_id).await?;
                match order.state {
                    OrderState::Confirmed => Ok(order),
                    OrderState::Expired | OrderState::Cancelled => Err(not_confirmable(&order)),
                    OrderState::Active => Err(no_holds(order_id)),
                    OrderState::Pending => Err(being_resolved(order_id)),
                }
            }
        }
    }

    /// Registers a campaign with holds for the sweepers (before it is installed).
    pub(super) async fn note_holds(&self, campaign: &str) -> redis::RedisResult<()> {
        self.conn().sadd(HOLDS_SET, campaign).await
    }

    /// Expires every due pending order of every campaign with holds; the number expired.
    pub async fn sweep(&self) -> Result<u64, Error> {
        let failed = "expiring pending orders failed";
        let ids: Vec<String> = self
            .conn()
            .smembers(HOLDS_SET)
            .await
            .map_err(redis_failed(failed))?;
        let mut n = 0;
        let mut pending = std::collections::HashMap::with_capacity(ids.len());
        for id in ids {
            loop {
                // Gated: a Redis back from an old snapshot expires nothing before it was
                // checked against the ledger (it may hold pending what the ledger confirmed).
                let e = self
                    .scripts
                    .expire_due(&mut self.conn().gated(), &id, MAX_EXPIRE_BATCH)
                    .await
                    .map_err(redis_failed(failed))?;
                if e.unchecked {
                    // A failover moved the campaign: checked now, expired on the next tick.
                    if let Err(err) = self.check_lineage(&id).await {
                        tracing::debug!(campaign = %id, error = %err, "checking the campaign on its new Redis Cluster node failed; retrying");
                    }
                    break;
                }
                if e.expired.is_some() {
                    pending.insert(id.clone(), e.pending);
                }
                let Some(expired) = e.expired.filter(|n| *n > 0) else {
                    break;
                };
                self.hold_stats
                    .expired(expired, e.late_sum_us, e.late_max_us);
                self.stock.changed(&id).await;
                tracing::debug!(campaign = %id, expired, "pending orders expired");
                n += expired;
                if expired < MAX_EXPIRE_BATCH {
                    break;
                }
            }
        }
        // Every instance's sweeper reads the gate's count, so each one exports the same value
        // (the gauge is the deployment's, not the instance's).
        *self.pending_units.lock() = pending;
        Ok(n)
    }
}

/// Expires due orders every [`SWEEP_EVERY`] until the engine is dropped.
pub(super) async fn sweep_loop(me: Weak<ScaleOut>) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(me) = me.upgrade() else {
            return Ok(());
        };
        if let Err(e) = me.sweep().await {
            // Redis is down for a moment: the next tick tries again.
            tracing::debug!(error = %e, "expiring pending orders failed; retrying");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_is_nothing_changed_only_off_a_cluster() {
        let refused =
            || redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(
            resolve_failed(true, false, "o-1")(refused()),
            Error::Unavailable(_)
        ));
        for confirm in [true, false] {
            let e = resolve_failed(confirm, true, "o-1")(refused());
            assert!(matches!(e, Error::OutcomeUnknown(_)), "{e:?}");
        }
    }
}
