//! The event feed against the ledger's orders (docs/EVENTS.md): every order of the run has
//! exactly one `order.won`, first; its later events are a life the API allows (`confirmed`,
//! then perhaps `cancelled`; or one of `expired`, `cancelled`), one event per transition, in
//! the feed's order; the state the ledger shows is one the feed went through; each event shows
//! the order's buyer, quantity and codes; and no event names an order the ledger does not have.
//! Read after the orders, so the feed may go further than the orders read (a transition made
//! in between), never less far.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{violation, Invariant, Violation};
use crate::domain::{Event, EventType, Order, OrderState};

/// The state an order is in right after an event of `kind` (`pending` after a win with holds,
/// `active` without).
fn state_after(kind: EventType, holds: bool) -> Option<OrderState> {
    Some(match kind {
        EventType::OrderWon if holds => OrderState::Pending,
        EventType::OrderWon => OrderState::Active,
        EventType::OrderConfirmed => OrderState::Confirmed,
        EventType::OrderExpired => OrderState::Expired,
        EventType::OrderCancelled => OrderState::Cancelled,
        _ => return None,
    })
}

/// Whether an order may go from `from` to `to` (docs/API.md, "Holds").
fn allowed(from: OrderState, to: OrderState) -> bool {
    use OrderState::*;
    matches!(
        (from, to),
        (Pending, Confirmed | Expired | Cancelled) | (Active | Confirmed, Cancelled)
    )
}

/// Checks `events` (the campaign's feed, in feed order) against `orders` (the ledger's, read
/// before the feed). Orders in `preexisting` may predate the feed and are left out.
pub fn check(orders: &[Order], events: &[Event], preexisting: &HashSet<String>) -> Vec<Violation> {
    let mut out = Vec::new();
    let by_id: HashMap<&str, &Order> = orders.iter().map(|o| (o.order_id.as_str(), o)).collect();
    let mut lives: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    let mut last_pos = 0u64;
    for e in events {
        let pos: u64 = e.cursor.parse().unwrap_or(0);
        if pos <= last_pos {
            out.push(violation(
                Invariant::FeedBroken,
                format!("the feed lists position {pos} after {last_pos}"),
                vec![],
            ));
        }
        last_pos = pos;
        if let Some(o) = &e.order {
            lives.entry(o.order_id.as_str()).or_default().push(e);
        }
    }
    for (id, life) in &lives {
        if preexisting.contains(*id) {
            continue;
        }
        let Some(order) = by_id.get(id) else {
            out.push(violation(
                Invariant::FeedBroken,
                format!(
                    "the feed has {} for order {id}, which the ledger does not have",
                    life[0].kind.as_str()
                ),
                vec![id.to_string()],
            ));
            continue;
        };
        if let Some(problem) = life_problem(order, life) {
            out.push(violation(
                Invariant::FeedBroken,
                format!("order {id}: {problem}"),
                vec![id.to_string()],
            ));
        }
    }
    let mut silent: Vec<String> = orders
        .iter()
        .filter(|o| !preexisting.contains(&o.order_id) && !lives.contains_key(o.order_id.as_str()))
        .map(|o| o.order_id.clone())
        .collect();
    if !silent.is_empty() {
        silent.sort();
        out.push(violation(
            Invariant::FeedBroken,
            format!(
                "{} orders of the ledger have no event in the feed",
                silent.len()
            ),
            silent,
        ));
    }
    out
}

/// What is wrong with one order's events, if anything.
fn life_problem(order: &Order, life: &[&Event]) -> Option<String> {
    let holds = order.pay_by.is_some();
    let kinds: Vec<&str> = life.iter().map(|e| e.kind.as_str()).collect();
    if life[0].kind != EventType::OrderWon
        || life.iter().skip(1).any(|e| e.kind == EventType::OrderWon)
    {
        return Some(format!("events {kinds:?} do not start with one order.won"));
    }
    let mut states = Vec::with_capacity(life.len());
    for e in life {
        let state = state_after(e.kind, holds)?;
        if let Some(&from) = states.last() {
            if !allowed(from, state) {
                return Some(format!(
                    "events {kinds:?}: no order goes from {from:?} to {state:?}"
                ));
            }
        }
        let shown = e.order.as_ref()?;
        if shown.state != state {
            return Some(format!(
                "{} shows the order {:?}",
                e.kind.as_str(),
                shown.state
            ));
        }
        if (&shown.user_id, shown.qty, &shown.codes) != (&order.user_id, order.qty, &order.codes) {
            return Some(format!(
                "{} shows buyer {} qty {} codes {:?}, the ledger {} {} {:?}",
                e.kind.as_str(),
                shown.user_id,
                shown.qty,
                shown.codes,
                order.user_id,
                order.qty,
                order.codes
            ));
        }
        states.push(state);
    }
    if !states.contains(&order.state) {
        return Some(format!(
            "the ledger shows it {:?}, a state its events {kinds:?} never reached",
            order.state
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn order(id: &str, state: OrderState, holds: bool) -> Order {
        Order {
            order_id: id.into(),
            campaign_id: "c".into(),
            user_id: "u".into(),
            qty: 1,
            codes: None,
            state,
            created_at: Utc::now(),
            cancelled_at: None,
            pay_by: holds.then(Utc::now),
            resolved_at: None,
        }
    }

    fn event(pos: u64, kind: EventType, o: &Order) -> Event {
        let mut shown = o.clone();
        shown.state = state_after(kind, o.pay_by.is_some()).unwrap();
        Event {
            id: format!("evt_{pos}"),
            cursor: pos.to_string(),
            kind,
            at: Utc::now(),
            campaign_id: "c".into(),
            order: Some(shown),
            campaign: None,
        }
    }

    #[test]
    fn whole_lives_pass_and_broken_ones_are_named() {
        use EventType::*;
        let done = HashSet::new();
        let c = order("c-1", OrderState::Cancelled, true);
        let ok = [
            event(1, OrderWon, &c),
            event(2, OrderConfirmed, &c),
            event(3, OrderCancelled, &c),
        ];
        assert!(check(std::slice::from_ref(&c), &ok, &done).is_empty());
        // The feed read after the orders may go further than they showed.
        let p = order("c-1", OrderState::Pending, true);
        assert!(check(std::slice::from_ref(&p), &ok, &done).is_empty());
        let cases: Vec<(Vec<Event>, &str)> = vec![
            (vec![], "no event"),
            (
                vec![event(1, OrderWon, &c), event(2, OrderWon, &c)],
                "one order.won",
            ),
            (vec![event(1, OrderConfirmed, &c)], "one order.won"),
            (
                vec![
                    event(1, OrderWon, &c),
                    event(2, OrderExpired, &c),
                    event(3, OrderCancelled, &c),
                ],
                "no order goes",
            ),
            (
                vec![event(2, OrderWon, &c), event(1, OrderCancelled, &c)],
                "position 1 after 2",
            ),
            (vec![event(1, OrderWon, &c)], "never reached"),
        ];
        for (events, want) in cases {
            let found = check(std::slice::from_ref(&c), &events, &done);
            assert!(
                found.iter().any(|v| v.message.contains(want)),
                "{want}: {found:?}"
            );
        }
        let stranger = order("c-9", OrderState::Active, false);
        let found = check(&[], &[event(1, OrderWon, &stranger)], &done);
        assert!(found[0].message.contains("does not have"), "{found:?}");
        assert!(check(
            &[],
            &[event(1, OrderWon, &stranger)],
            &HashSet::from(["c-9".to_owned()])
        )
        .is_empty());
    }
}
