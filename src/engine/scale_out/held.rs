//! The Redis records of pending orders: the scripts that resolve them, the `held` entry a
//! claim writes for each, and the `resolved` record a resolution leaves. Read by the claim
//! scripts' caller (`scripts.rs`) and the resolutions (`holds.rs`) alike.

use chrono::{DateTime, Utc};
use redis::Script;

use super::keys::Keys;
use crate::domain::{parse_order_id, Order, OrderState};

/// The scripts that resolve pending orders.
pub(super) struct HoldScripts {
    pub(super) confirm: Script,
    pub(super) cancel: Script,
    pub(super) expire: Script,
}

impl Default for HoldScripts {
    fn default() -> Self {
        Self {
            confirm: Script::new(include_str!("lua/confirm.lua")),
            cancel: Script::new(include_str!("lua/cancel_hold.lua")),
            expire: Script::new(include_str!("lua/expire.lua")),
        }
    }
}

/// The keys every resolution script takes, in its order (`confirm.lua`'s header;
/// `cancel_hold.lua` and `expire.lua` take the same eight).
pub(super) fn resolution_keys<'a, 'b>(
    inv: &'b mut redis::ScriptInvocation<'a>,
    k: &Keys,
) -> &'b mut redis::ScriptInvocation<'a> {
    inv.key(k.meta())
        .key(k.users())
        .key(k.codes())
        .key(k.released())
        .key(k.held())
        .key(k.deadlines())
        .key(k.resolved())
        .key(k.orders())
}

/// The `held` entry of a pending order: user, qty, at, pay_by (µs), then its codes, one a line.
pub(super) fn held_lines(
    user: &str,
    qty: u64,
    at: DateTime<Utc>,
    pay_by: DateTime<Utc>,
    codes: &[String],
) -> String {
    let mut lines = vec![
        user.to_owned(),
        qty.to_string(),
        at.timestamp_micros().to_string(),
        pay_by.timestamp_micros().to_string(),
    ];
    lines.extend(codes.iter().cloned());
    lines.join("\n")
}

/// The order of a `resolved` record (state, resolved_at, then the held lines), as the ledger
/// will hold it once the pipeline applied the transition.
pub fn order_of_record(order_id: &str, record: &str) -> Option<Order> {
    let (campaign_id, _) = parse_order_id(order_id).ok()?;
    let mut lines = record.split('\n');
    let state = OrderState::parse(lines.next()?)?;
    let micros = |s: Option<&str>| {
        s.and_then(|s| s.parse().ok())
            .and_then(DateTime::from_timestamp_micros)
    };
    let resolved_at = micros(lines.next())?;
    let user_id = lines.next()?.to_owned();
    let qty = lines.next()?.parse().ok()?;
    let created_at = micros(lines.next())?;
    let pay_by = micros(lines.next())?;
    let codes: Vec<String> = lines.map(str::to_owned).collect();
    let cancelled = state == OrderState::Cancelled;
    Some(Order {
        order_id: order_id.to_owned(),
        campaign_id: campaign_id.to_owned(),
        user_id,
        qty,
        codes: (!codes.is_empty()).then_some(codes),
        state,
        created_at,
        cancelled_at: cancelled.then_some(resolved_at),
        pay_by: Some(pay_by),
        resolved_at: (!cancelled).then_some(resolved_at),
    })
}
