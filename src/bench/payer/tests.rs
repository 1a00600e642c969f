use super::*;
use chrono::{TimeDelta, Utc};

fn order(n: u64, qty: u64, state: OrderState) -> Order {
    let pay_by = Utc::now() - TimeDelta::seconds(20);
    Order {
        order_id: format!("c-{n}"),
        campaign_id: "c".into(),
        user_id: format!("u{n}"),
        qty,
        codes: None,
        state,
        created_at: pay_by - TimeDelta::seconds(4),
        cancelled_at: None,
        pay_by: Some(pay_by),
        resolved_at: Some(if state == OrderState::Expired {
            pay_by
        } else {
            pay_by - TimeDelta::seconds(1)
        }),
    }
}

fn early_expiry_flagged(orders: &[Order], total: u64) -> bool {
    let mut pay = Payments::default();
    for o in orders.iter().filter(|o| o.state == OrderState::Confirmed) {
        pay.confirmed.insert(o.order_id.clone());
    }
    let sold_out = Some(Utc::now());
    let (found, _) = check(orders, &pay, sold_out, total, &HashSet::new());
    found.iter().any(|v| v.message.contains("not sold again"))
}

/// Sold out after an expiry: the orders of every state must hold more units than the
/// campaign — counted in units, since one order may hold two.
#[test]
fn an_expired_unit_sold_again_is_counted_in_units() {
    // 5 units: an order of 2 expired and its units sold again: 6 units in 3 orders (the
    // old count, 3 orders ≤ 5 units, called this under-sold).
    let resold = [
        order(1, 2, OrderState::Expired),
        order(2, 2, OrderState::Confirmed),
        order(3, 2, OrderState::Confirmed),
    ];
    assert!(!early_expiry_flagged(&resold, 5));
    // The expired units never sold again: 2 + 2 = 4 units of 5.
    let unsold = [
        order(1, 2, OrderState::Expired),
        order(2, 2, OrderState::Confirmed),
    ];
    assert!(early_expiry_flagged(&unsold, 5));
}
