//! Property tests: any sequence of claims, cancels, restocks and status changes keeps the
//! campaign's books balanced.

use std::collections::{HashMap, HashSet};

use chrono::Utc;
use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Claim { user: u8, qty: u64 },
    Cancel { pick: usize },
    Restock { units: u64 },
    Status(Status),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8, 1u64..4).prop_map(|(user, qty)| Op::Claim { user, qty }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => (1u64..4).prop_map(|units| Op::Restock { units }),
        1 => prop_oneof![Just(Status::Active), Just(Status::Paused)].prop_map(Op::Status),
    ]
}

fn campaign(kind: Kind, total: u64, limit: u64) -> CampaignState {
    let def = CampaignDef {
        id: "prop".into(),
        kind,
        per_user_limit: limit,
        starts_at: None,
        ends_at: None,
        hold_seconds: None,
        waiting_room: None,
    };
    let codes = match kind {
        Kind::Stock => vec![],
        Kind::Codes => (0..total).map(|i| format!("C{i}")).collect(),
    };
    CampaignState::new(def, total, codes, Status::Active)
}

proptest! {
    #[test]
    fn books_always_balance(
        codes in any::<bool>(),
        total in 1u64..12,
        limit in 1u64..4,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let kind = if codes { Kind::Codes } else { Kind::Stock };
        let mut s = campaign(kind, total, limit);
        let mut active: Vec<Reservation> = Vec::new();
        let mut next_code = total;
        let mut ids = HashSet::new();
        let mut max_seq = 0;
        for op in ops {
            match op {
                Op::Claim { user, qty } => {
                    let user = format!("u{user}");
                    let before = s.remaining;
                    match s.decide(&user, qty, Utc::now()) {
                        Decision::Won(r) => {
                            prop_assert!(ids.insert(r.order_id.clone()), "order id reused");
                            max_seq = max_seq.max(r.seq);
                            prop_assert_eq!(r.codes.len() as u64, if codes { qty } else { 0 });
                            active.push(r);
                        }
                        Decision::Dormant => prop_assert!(false, "a loaded campaign is never dormant"),
                        Decision::Rejected(a) => {
                            prop_assert_eq!(s.remaining, before, "a rejection changed stock");
                            if a.outcome == Outcome::SoldOut {
                                prop_assert!(before < qty, "under-sell: sold_out with {} left for qty {}", before, qty);
                            }
                        }
                    }
                }
                Op::Cancel { pick } if !active.is_empty() => {
                    let r = active.swap_remove(pick % active.len());
                    s.release(&r.user_id, r.qty, &r.codes);
                }
                Op::Cancel { .. } => {}
                Op::Restock { units } => match kind {
                    Kind::Stock => s.add_units(units),
                    Kind::Codes => {
                        let fresh: Vec<String> = (next_code..next_code + units).map(|i| format!("C{i}")).collect();
                        next_code += units;
                        prop_assert!(s.known_code(&fresh).is_none());
                        s.add_codes(fresh);
                    }
                },
                Op::Status(st) => s.status = st,
            }
            let sold: u64 = active.iter().map(|r| r.qty).sum();
            prop_assert_eq!(s.remaining + sold, s.total, "remaining + sold != total");
            let mut held: HashMap<&str, u64> = HashMap::new();
            for r in &active {
                *held.entry(&r.user_id).or_default() += r.qty;
            }
            for (user, units) in &held {
                prop_assert!(*units <= limit, "{} holds {} > limit {}", user, units, limit);
                prop_assert_eq!(s.held_by(user), *units);
            }
            if codes {
                let out: Vec<&String> = active.iter().flat_map(|r| &r.codes).collect();
                let distinct: HashSet<&String> = out.iter().copied().collect();
                prop_assert_eq!(out.len(), distinct.len(), "a code is held twice");
                prop_assert_eq!(s.pool.len() as u64, s.remaining, "pool size != remaining");
                prop_assert!(s.pool.iter().all(|c| !distinct.contains(c)), "a held code is still in the pool");
            }
        }
        // What the ledger would hold rebuilds the same state.
        let all: Vec<String> = match kind {
            Kind::Stock => vec![],
            Kind::Codes => (0..next_code).map(|i| format!("C{i}")).collect(),
        };
        let ledger: Vec<_> = active.iter().map(|r| (r.user_id.clone(), r.qty, r.codes.clone())).collect();
        let back = CampaignState::recover(s.def.clone(), s.total, all, s.status, &ledger, max_seq);
        prop_assert_eq!(back.view(), s.view());
        prop_assert_eq!(&back.held, &s.held);
        let pool = |st: &CampaignState| st.pool.iter().cloned().collect::<HashSet<_>>();
        prop_assert_eq!(pool(&back), pool(&s));
        prop_assert!(back.next_seq > max_seq);
    }
}
