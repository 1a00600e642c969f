//! The invariants of ARCHITECTURE.md, checked against what a deployment answered and stores,
//! by the checker `seckill bench` and the fault campaign use (`seckill::bench::verify`): one
//! statement of the guarantees, so a test cannot pass what the campaign would flag.

use std::collections::HashSet;
use std::time::Instant;

use seckill::bench::storm::Win;
use seckill::bench::verify::{check as verify, Evidence};
use seckill::domain::{CampaignView, ClaimAnswer, Order, OrderState, Outcome};

/// Checks the ledger (`orders`, `view`) against the `won` answers a test received.
/// `sold_out_seen` enables the no-under-sell check (no restock or cancel during the run).
/// Orders the test itself cancelled are not held against it; orders nobody was answered
/// `won` for are the test's own business (it knows which requests lost their answer).
pub fn check(
    view: &CampaignView,
    orders: &[Order],
    won: &[(String, ClaimAnswer)],
    sold_out_seen: bool,
) {
    let now = Instant::now();
    let wins: Vec<Win> = won
        .iter()
        .map(|(user, a)| {
            assert_eq!(a.outcome, Outcome::Won);
            Win {
                user: user.clone(),
                order_id: a.order_id.clone().expect("won answers carry an order id"),
                qty: a.qty.expect("won answers carry a qty"),
                codes: a.codes.clone(),
                key: None,
                sent: now,
                answered: now,
            }
        })
        .collect();
    let cancelled: HashSet<String> = orders
        .iter()
        .filter(|o| o.state == OrderState::Cancelled)
        .map(|o| o.order_id.clone())
        .collect();
    let violations = verify(&Evidence {
        view,
        orders,
        preexisting: &HashSet::new(),
        wins: &wins,
        keyed: &[],
        keyed_uncertain: &[],
        unanswered: 0,
        exclusive: false,
        sold_out_seen,
        cancelled_by_bench: &cancelled,
    });
    assert!(
        violations.is_empty(),
        "the invariants do not hold:\n{}",
        violations
            .iter()
            .map(|v| format!("  {:?}: {} {:?}", v.invariant, v.message, v.orders))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
