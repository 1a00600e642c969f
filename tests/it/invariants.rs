//! The invariants of ARCHITECTURE.md, checked against what a deployment answered and stores.

use std::collections::{HashMap, HashSet};

use seckill::domain::{CampaignView, ClaimAnswer, Order, OrderState, Outcome};

/// Checks the ledger (`orders`, `view`) against the `won` answers a test received.
/// `sold_out_seen` enables the no-under-sell check (no restock or cancel during the run).
pub fn check(
    view: &CampaignView,
    orders: &[Order],
    won: &[(String, ClaimAnswer)],
    sold_out_seen: bool,
) {
    let active: Vec<&Order> = orders
        .iter()
        .filter(|o| o.state == OrderState::Active)
        .collect();
    let sold: u64 = active.iter().map(|o| o.qty).sum();
    assert!(
        sold <= view.total,
        "oversold: {sold} units in active orders, total {}",
        view.total
    );
    assert_eq!(
        view.remaining,
        view.total - sold,
        "remaining != total - sum(active)"
    );
    if sold_out_seen {
        assert_eq!(
            sold,
            view.total,
            "a sold_out was answered but {} units remain unsold",
            view.total - sold
        );
    }
    let mut codes = HashSet::new();
    for o in &active {
        for c in o.codes.iter().flatten() {
            assert!(
                codes.insert(c.clone()),
                "code {c} held by two active orders"
            );
        }
    }
    let mut per_user: HashMap<&str, u64> = HashMap::new();
    for o in &active {
        *per_user.entry(&o.user_id).or_default() += o.qty;
    }
    for (user, held) in per_user {
        assert!(
            held <= view.per_user_limit,
            "user {user} holds {held} > limit {}",
            view.per_user_limit
        );
    }
    let by_id: HashMap<&str, &Order> = orders.iter().map(|o| (o.order_id.as_str(), o)).collect();
    assert_eq!(
        by_id.len(),
        orders.len(),
        "an order id appears twice in the ledger"
    );
    for (user, a) in won {
        assert_eq!(a.outcome, Outcome::Won);
        let id = a
            .order_id
            .as_deref()
            .expect("won answers carry an order id");
        let o = by_id
            .get(id)
            .unwrap_or_else(|| panic!("won order {id} is missing from the ledger"));
        assert_eq!(&o.user_id, user, "order {id} belongs to someone else");
        assert_eq!(
            Some(o.qty),
            a.qty,
            "order {id} has another qty than answered"
        );
        if let Some(codes) = &a.codes {
            assert_eq!(
                o.codes.as_ref(),
                Some(codes),
                "order {id} has other codes than answered"
            );
        }
    }
}
