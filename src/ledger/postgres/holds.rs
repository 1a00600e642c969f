//! The SQL of order holds in the PostgreSQL ledger: a pending order's one resolution.
//!
//! In the scale-out deployment Redis decides every resolution of a pending order (confirm,
//! expiry, cancel) against its own clock, and the ledger learns it only through the campaign's
//! order stream ([`Transition`]). The stream is applied in order, but after a consumer crash
//! its reclaimed entries may arrive after later ones, and any entry may be delivered twice; so
//! a transition carries the whole order and is applied as one upsert:
//!
//! - no row yet (its new-order entry has not been applied): the row is inserted in its final
//!   state, and the new-order entry, when it comes, finds it and changes nothing;
//! - a `pending` row: it takes the new state (`resolved_at` for confirmed and expired,
//!   `cancelled_at` for cancelled, as the embedded ledger writes them) and an audit event;
//! - a row already in that state (a redelivery): nothing;
//! - a row in another final state: a contradiction between the arbiter and the ledger. The
//!   row is left as it is and the caller records the entry ([`Applied::Contradiction`]).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::event::event;
use crate::domain::{Order, OrderState};
use crate::ledger::rows::{self, micros, OrderRow};
use crate::ledger::LedgerWrite;

/// A pending order's resolution, decided in Redis, as its stream entry carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The whole order as it was won (pending, with its `pay_by`).
    pub order: Order,
    /// `Confirmed`, `Expired` or `Cancelled`.
    pub to: OrderState,
    /// When Redis decided it.
    pub at: DateTime<Utc>,
}

/// What applying a [`Transition`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The row took the new state (or was inserted in it).
    Done,
    /// The row was in that state already: a redelivery.
    Already,
    /// The row is in another final state (or is another order); it was left unchanged.
    Contradiction(String),
}

/// The audit event kind of a resolution (the embedded ledger's names).
fn event_kind(to: OrderState) -> &'static str {
    match to {
        OrderState::Cancelled => "cancel",
        other => other.as_str(),
    }
}

/// Applies one transition inside the caller's transaction (see the module docs).
pub(super) async fn apply(conn: &mut PgConnection, t: &Transition) -> anyhow::Result<Applied> {
    anyhow::ensure!(
        matches!(
            t.to,
            OrderState::Confirmed | OrderState::Expired | OrderState::Cancelled
        ),
        "a pending order cannot become {}",
        t.to.as_str()
    );
    let o = &t.order;
    let (cancelled_at, resolved_at) = match t.to {
        OrderState::Cancelled => (Some(micros(t.at)), None),
        _ => (None, Some(micros(t.at))),
    };
    // Only a pending row of the very same order takes the state; the rest is sorted out below.
    let done = sqlx::query(
        "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, codes, state, created_at, \
                             cancelled_at, pay_by, resolved_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (order_id) DO UPDATE SET state = excluded.state, \
             cancelled_at = excluded.cancelled_at, resolved_at = excluded.resolved_at \
         WHERE orders.state = 'pending' AND orders.campaign_id = excluded.campaign_id \
           AND orders.user_id = excluded.user_id AND orders.qty = excluded.qty \
           AND orders.created_at = excluded.created_at \
           AND orders.codes IS NOT DISTINCT FROM excluded.codes \
         RETURNING order_id",
    )
    .bind(&o.order_id)
    .bind(&o.campaign_id)
    .bind(o.seq() as i64)
    .bind(&o.user_id)
    .bind(o.qty as i64)
    .bind(rows::codes_json(&o.codes))
    .bind(t.to.as_str())
    .bind(micros(o.created_at))
    .bind(cancelled_at)
    .bind(o.pay_by.map(micros))
    .bind(resolved_at)
    .fetch_optional(&mut *conn)
    .await?;
    if done.is_some() {
        let detail = o.order_id.clone();
        event(conn, &o.campaign_id, event_kind(t.to), detail, t.at).await?;
        return Ok(Applied::Done);
    }
    let row: OrderRow = sqlx::query_as(select_order!(" WHERE order_id = $1"))
        .bind(&o.order_id)
        .fetch_one(&mut *conn)
        .await?;
    Ok(judge(&Order::try_from(row)?, t))
}

/// How a transition of another order than the one the ledger holds under its number begins
/// its refusal (the fault campaign reads it back from `failed_orders`).
pub const DIFFERENT_ORDER: &str = "the ledger holds a different order under id";

/// Why a transition was not applied to the row `have` (which is not a pending row of its order).
fn judge(have: &Order, t: &Transition) -> Applied {
    let o = &t.order;
    let same_order = have.campaign_id == o.campaign_id
        && have.user_id == o.user_id
        && have.qty == o.qty
        && have.created_at == o.created_at
        && have.codes == o.codes;
    if !same_order {
        return Applied::Contradiction(format!(
            "{DIFFERENT_ORDER} {} (user {:?}, created {}) than this \
             {} transition (user {:?}, created {}): Redis lost acknowledged writes",
            o.order_id,
            have.user_id,
            have.created_at,
            t.to.as_str(),
            o.user_id,
            o.created_at
        ));
    }
    if have.state == t.to {
        return Applied::Already;
    }
    // Confirmed, applied, then cancelled by an admin: this confirm is a redelivery.
    if have.state == OrderState::Cancelled
        && t.to == OrderState::Confirmed
        && have.resolved_at == Some(t.at)
    {
        return Applied::Already;
    }
    Applied::Contradiction(format!(
        "order {} is {} in the ledger but its stream entry says it became {} at {}: the \
         arbiter (Redis) and the ledger disagree; the row is left {}",
        o.order_id,
        have.state.as_str(),
        t.to.as_str(),
        t.at,
        have.state.as_str()
    ))
}

/// A `LedgerWrite::Confirm` / `Expire` written directly (not through the stream): the row must
/// be pending, anything else is an error and rolls the batch back.
pub(super) async fn resolve(conn: &mut PgConnection, w: &LedgerWrite) -> anyhow::Result<()> {
    let (order_id, at, state) = match w {
        LedgerWrite::Confirm { order_id, at } => (order_id, at, OrderState::Confirmed),
        LedgerWrite::Expire { order_id, at } => (order_id, at, OrderState::Expired),
        other => anyhow::bail!("not a resolution: {other:?}"),
    };
    let campaign: Option<String> = sqlx::query_scalar(
        "UPDATE orders SET state = $1, resolved_at = $2 WHERE order_id = $3 AND state = 'pending' \
         RETURNING campaign_id",
    )
    .bind(state.as_str())
    .bind(micros(*at))
    .bind(order_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(campaign) = campaign else {
        anyhow::bail!(
            "order {order_id} is not pending in the ledger; it cannot become {}",
            state.as_str()
        )
    };
    Ok(event(conn, &campaign, state.as_str(), order_id.clone(), *at).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(state: OrderState) -> Order {
        let at = DateTime::from_timestamp_micros(1_000).unwrap();
        Order {
            order_id: "c-1".into(),
            campaign_id: "c".into(),
            user_id: "u".into(),
            qty: 1,
            codes: None,
            state,
            created_at: at,
            cancelled_at: None,
            pay_by: DateTime::from_timestamp_micros(9_000),
            resolved_at: None,
        }
    }

    fn to(state: OrderState, at: i64) -> Transition {
        Transition {
            order: order(OrderState::Pending),
            to: state,
            at: DateTime::from_timestamp_micros(at).unwrap(),
        }
    }

    #[test]
    fn same_state_is_a_redelivery_another_final_state_a_contradiction() {
        use OrderState::*;
        assert_eq!(
            judge(&order(Confirmed), &to(Confirmed, 5)),
            Applied::Already
        );
        assert_eq!(
            judge(&order(Cancelled), &to(Cancelled, 5)),
            Applied::Already
        );
        for (have, want) in [
            (Confirmed, Expired),
            (Expired, Confirmed),
            (Expired, Cancelled),
        ] {
            let Applied::Contradiction(why) = judge(&order(have), &to(want, 5)) else {
                panic!("{have:?} then {want:?} is a contradiction")
            };
            assert!(
                why.contains(have.as_str()) && why.contains(want.as_str()),
                "{why}"
            );
        }
        let mut confirmed_then_cancelled = order(Cancelled);
        confirmed_then_cancelled.resolved_at = DateTime::from_timestamp_micros(5);
        assert_eq!(
            judge(&confirmed_then_cancelled, &to(Confirmed, 5)),
            Applied::Already
        );
        assert!(matches!(
            judge(&confirmed_then_cancelled, &to(Confirmed, 6)),
            Applied::Contradiction(_)
        ));
        let mut other = order(Confirmed);
        other.user_id = "someone else".into();
        assert!(matches!(
            judge(&other, &to(Confirmed, 5)),
            Applied::Contradiction(_)
        ));
    }
}
