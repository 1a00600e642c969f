//! The invariant checker: what a deployment answered against what its ledger holds.
//!
//! Pure and synchronous: it takes the evidence (the drained ledger, the campaign view, every
//! `won` answer, keyed answers) and returns every violation of the invariants of
//! `shared/ARCHITECTURE.md` with the orders involved, so the report can list them and the exit
//! status can fail. Nothing here trusts the deployment's own bookkeeping: sums are recomputed
//! from the orders, and every `won` is matched to its order by id.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use serde::Serialize;

use super::storm::{Keyed, Win};
use crate::domain::{CampaignView, Order, OrderState};

/// Which invariant a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    /// 1: more units in active orders than the campaign's total.
    Oversold,
    /// 1: a qty-1 claim got `sold_out`, no supply came back afterwards, yet units are unsold.
    UnderSold,
    /// 2: one code held by two active orders.
    CodeTwice,
    /// 3: a user holds more than the per-user limit.
    OverUserLimit,
    /// 4: a `won` answer's order is not in the ledger.
    WonMissing,
    /// 4: the ledger's order differs from the `won` answer (user, qty, codes, state).
    WonMismatch,
    /// 4: one order id listed twice by the ledger.
    OrderDuplicated,
    /// 4: one order id answered `won` to two different claims.
    WonAnsweredTwice,
    /// 4: orders nobody was answered `won` for, beyond the requests whose answer was lost.
    PhantomOrder,
    /// 5: remaining ≠ total − Σ active.
    RemainingMismatch,
    /// 6: retries with one Idempotency-Key got different answers or a second order.
    IdempotencyBroken,
    /// 7: a malformed or unauthorised request was not refused with a 4xx.
    BadInputAccepted,
    /// 7: the campaign changed while only malformed or unauthorised requests were sent.
    BadInputChangedState,
    /// 4: an order of a campaign with holds was not resolved as its answers said (see
    /// `bench::payer`).
    HoldBroken,
    /// 4: the event feed does not tell the orders' lives as the ledger holds them (see
    /// [`feed`]).
    FeedBroken,
    /// 8: the waiting room broke a promise (see `bench::opening::check`).
    RoomBroken,
}

impl Invariant {
    /// The number of the invariant in `shared/ARCHITECTURE.md`.
    pub fn number(self) -> u8 {
        match self {
            Invariant::Oversold | Invariant::UnderSold => 1,
            Invariant::CodeTwice => 2,
            Invariant::OverUserLimit => 3,
            Invariant::WonMissing
            | Invariant::WonMismatch
            | Invariant::OrderDuplicated
            | Invariant::WonAnsweredTwice
            | Invariant::PhantomOrder
            | Invariant::HoldBroken
            | Invariant::FeedBroken => 4,
            Invariant::RemainingMismatch => 5,
            Invariant::IdempotencyBroken => 6,
            Invariant::BadInputAccepted | Invariant::BadInputChangedState => 7,
            Invariant::RoomBroken => 8,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    pub invariant: Invariant,
    pub message: String,
    /// The offending order ids.
    pub orders: Vec<String>,
    /// Invariant 6: the (user, Idempotency-Key) whose answers differ.
    #[serde(skip)]
    pub key: Option<(String, String)>,
}

fn violation(invariant: Invariant, message: String, orders: Vec<String>) -> Violation {
    Violation {
        invariant,
        message,
        orders,
        key: None,
    }
}

/// Everything the checker looks at.
#[derive(Debug)]
pub struct Evidence<'a> {
    pub view: &'a CampaignView,
    /// Every order the ledger lists for the campaign, after draining.
    pub orders: &'a [Order],
    /// Order ids that existed before the run (an existing campaign): not this run's business.
    pub preexisting: &'a HashSet<String>,
    /// Every `won` answer received.
    pub wins: &'a [Win],
    /// Every processed answer to a claim sent with an Idempotency-Key.
    pub keyed: &'a [Keyed],
    /// Keyed claims without a claim answer (no answer, or a refusal): (user, key, sent).
    pub keyed_uncertain: &'a [(String, String, Instant)],
    /// Requests whose answer never arrived: each may have won without the bench knowing.
    pub unanswered: u64,
    /// The bench created the campaign, so every order in it must come from a `won` it saw.
    pub exclusive: bool,
    /// A qty-1 `sold_out` was answered after the last supply change (restock, cancel).
    pub sold_out_seen: bool,
    /// Orders the bench itself cancelled during the run.
    pub cancelled_by_bench: &'a HashSet<String>,
}

/// Checks every invariant; an empty answer means the run was clean.
pub fn check(ev: &Evidence<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut by_id: HashMap<&str, &Order> = HashMap::with_capacity(ev.orders.len());
    let mut copies: BTreeMap<&str, usize> = BTreeMap::new();
    for o in ev.orders {
        *copies.entry(o.order_id.as_str()).or_default() += 1;
        by_id.entry(o.order_id.as_str()).or_insert(o);
    }
    for (id, n) in copies.iter().filter(|(_, n)| **n > 1) {
        out.push(violation(
            Invariant::OrderDuplicated,
            format!("order {id} is listed {n} times by the ledger"),
            vec![id.to_string()],
        ));
    }
    // Live: active, pending or confirmed (orders of campaigns with holds count while they
    // wait for their confirm).
    let mut active: Vec<&Order> = by_id
        .values()
        .copied()
        .filter(|o| o.state.is_live())
        .collect();
    active.sort_by_key(|o| o.seq());
    // An expiry gives units back like a cancel: a sold_out before it proves no under-sell.
    let expiries = by_id.values().any(|o| o.state == OrderState::Expired);
    supply(ev, &active, expiries, &mut out);
    codes(&active, &mut out);
    per_user(ev.view.per_user_limit, &active, &mut out);
    answers(ev, &by_id, &mut out);
    idempotency(ev.keyed, ev.keyed_uncertain, &mut out);
    out.sort_by_key(|v| v.invariant);
    out
}

/// Invariants 1 and 5: sold ≤ total, no under-sell, remaining = total − Σ active.
fn supply(ev: &Evidence<'_>, active: &[&Order], expiries: bool, out: &mut Vec<Violation>) {
    let total = ev.view.total;
    let sold: u64 = active.iter().map(|o| o.qty).sum();
    if sold > total {
        // The orders that pushed the sum past the total, in ledger order.
        let mut running = 0;
        let over: Vec<String> = active
            .iter()
            .filter(|o| {
                running += o.qty;
                running > total
            })
            .map(|o| o.order_id.clone())
            .collect();
        out.push(violation(
            Invariant::Oversold,
            format!("{sold} units in active orders but the campaign has {total}"),
            over,
        ));
        // remaining = total − sold cannot hold either; the oversell is the finding.
        return;
    }
    if ev.view.remaining != total - sold {
        out.push(violation(
            Invariant::RemainingMismatch,
            format!(
                "remaining is {} but total {total} − {sold} units in active orders = {}",
                ev.view.remaining,
                total - sold
            ),
            vec![],
        ));
    }
    if ev.sold_out_seen && !expiries && sold < total {
        out.push(violation(
            Invariant::UnderSold,
            format!(
                "a qty-1 claim was answered sold_out after the last supply change, yet only \
                 {sold} of {total} units are in active orders"
            ),
            vec![],
        ));
    }
}

/// Invariant 2: no code in two active orders.
fn codes(active: &[&Order], out: &mut Vec<Violation>) {
    let mut holders: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for o in active {
        for c in o.codes.iter().flatten() {
            holders.entry(c).or_default().push(o.order_id.clone());
        }
    }
    for (code, orders) in holders.into_iter().filter(|(_, v)| v.len() > 1) {
        out.push(violation(
            Invariant::CodeTwice,
            format!("code {code:?} is held by {} active orders", orders.len()),
            orders,
        ));
    }
}

/// Invariant 3: Σ qty of a user's active orders ≤ per_user_limit.
fn per_user(limit: u64, active: &[&Order], out: &mut Vec<Violation>) {
    let mut held: BTreeMap<&str, (u64, Vec<String>)> = BTreeMap::new();
    for o in active {
        let e = held.entry(&o.user_id).or_default();
        e.0 += o.qty;
        e.1.push(o.order_id.clone());
    }
    for (user, (units, orders)) in held.into_iter().filter(|(_, (u, _))| *u > limit) {
        out.push(violation(
            Invariant::OverUserLimit,
            format!("user {user} holds {units} units, the limit is {limit}"),
            orders,
        ));
    }
}

/// Invariant 4: every `won` is in the ledger exactly once, as answered; no order without one.
fn answers(ev: &Evidence<'_>, by_id: &HashMap<&str, &Order>, out: &mut Vec<Violation>) {
    let mut answered: HashMap<&str, Vec<&Win>> = HashMap::with_capacity(ev.wins.len());
    for w in ev.wins {
        answered.entry(w.order_id.as_str()).or_default().push(w);
    }
    let mut ids: Vec<&str> = answered.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let group = &answered[id];
        let w = group[0];
        // Retries of one Idempotency-Key legitimately repeat the same answer.
        let distinct: HashSet<(&str, Option<&str>)> = group
            .iter()
            .map(|w| (w.user.as_str(), w.key.as_deref()))
            .collect();
        if distinct.len() > 1 || (group.len() > 1 && w.key.is_none()) {
            out.push(violation(
                Invariant::WonAnsweredTwice,
                format!("order {id} was answered won to {} claims", group.len()),
                vec![id.to_owned()],
            ));
        }
        let Some(o) = by_id.get(id) else {
            out.push(violation(
                Invariant::WonMissing,
                format!(
                    "order {id} was answered won to {} but is not in the ledger",
                    w.user
                ),
                vec![id.to_owned()],
            ));
            continue;
        };
        let mut diffs = Vec::new();
        if o.user_id != w.user {
            diffs.push(format!("user {} (answered to {})", o.user_id, w.user));
        }
        if o.qty != w.qty {
            diffs.push(format!("qty {} (answered {})", o.qty, w.qty));
        }
        if w.codes.is_some() && o.codes != w.codes {
            diffs.push(format!("codes {:?} (answered {:?})", o.codes, w.codes));
        }
        if o.state == OrderState::Cancelled && !ev.cancelled_by_bench.contains(id) {
            diffs.push("cancelled, though nobody cancelled it".to_owned());
        }
        if !diffs.is_empty() {
            out.push(violation(
                Invariant::WonMismatch,
                format!("order {id} in the ledger has {}", diffs.join(", ")),
                vec![id.to_owned()],
            ));
        }
    }
    if !ev.exclusive {
        return;
    }
    let mut phantoms: Vec<&Order> = by_id
        .values()
        .copied()
        .filter(|o| !answered.contains_key(o.order_id.as_str()))
        .filter(|o| !ev.preexisting.contains(&o.order_id))
        .collect();
    if phantoms.len() as u64 > ev.unanswered {
        phantoms.sort_by_key(|o| o.seq());
        out.push(violation(
            Invariant::PhantomOrder,
            format!(
                "{} orders were never answered won, but only {} requests lost their answer",
                phantoms.len(),
                ev.unanswered
            ),
            phantoms.iter().map(|o| o.order_id.clone()).collect(),
        ));
    }
}

pub mod feed;
mod idempotency;
pub use idempotency::idempotency;

#[cfg(test)]
mod tests;
