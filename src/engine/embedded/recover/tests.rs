//! Streaming recovery over a real SQLite ledger of many campaigns, whose orders interleave in
//! the table, rebuilds exactly what the engine held before (and what rebuilding each campaign
//! from all its rows at once gives).

use std::collections::{HashMap, HashSet};

use chrono::{Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::domain::{ClaimAnswer, Kind, Order, OrderState, Outcome, Status};
use crate::engine::state::{CampaignDef, CampaignState, Decision, Reservation};
use crate::ledger::{LedgerWrite, SqliteLedger};

struct Live {
    state: CampaignState,
    codes: Vec<String>,
    active: Vec<Reservation>,
    max_seq: u64,
}

fn order(id: &str, kind: Kind, r: &Reservation) -> LedgerWrite {
    LedgerWrite::Order(Order {
        order_id: r.order_id.clone(),
        campaign_id: id.to_owned(),
        user_id: r.user_id.clone(),
        qty: r.qty,
        codes: (kind == Kind::Codes).then(|| r.codes.clone()),
        state: OrderState::Active,
        created_at: r.created_at,
        cancelled_at: None,
        pay_by: None,
        resolved_at: None,
    })
}

#[tokio::test]
async fn streaming_recovery_of_many_campaigns_equals_the_state_before() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path(), false).await.unwrap();
    let mut rng = StdRng::seed_from_u64(18);
    let now = Utc::now();
    let ttl = Duration::hours(24);
    let mut live: Vec<Live> = Vec::new();
    let mut batch = Vec::new();
    for c in 0..6 {
        let kind = if c % 2 == 0 { Kind::Stock } else { Kind::Codes };
        let total = 400 + 50 * c as u64;
        let codes: Vec<String> = match kind {
            Kind::Stock => Vec::new(),
            Kind::Codes => (0..total).map(|i| format!("c{c}-K{i}")).collect(),
        };
        let def = CampaignDef {
            id: format!("c{c}"),
            kind,
            per_user_limit: 1 + c as u64 % 3,
            starts_at: None,
            ends_at: None,
            hold_seconds: None,
            waiting_room: None,
        };
        batch.push(LedgerWrite::CreateCampaign {
            def: def.clone(),
            total,
            codes: codes.clone(),
            status: Status::Active,
            at: now,
        });
        let state = CampaignState::new(def, total, codes.clone(), Status::Active);
        live.push(Live {
            state,
            codes,
            active: Vec::new(),
            max_seq: 0,
        });
    }
    let mut idem_expected: HashMap<(String, String, String), ClaimAnswer> = HashMap::new();
    let mut idem_old = Vec::new();
    for step in 0..6_000u32 {
        let c = rng.gen_range(0..live.len());
        let l = &mut live[c];
        let id = l.state.def.id.clone();
        let kind = l.state.def.kind;
        match rng.gen_range(0..20) {
            0..=14 => {
                let user = format!("user-{}", rng.gen_range(0..300));
                let qty = rng.gen_range(1..=2);
                let at = now - Duration::hours(rng.gen_range(0..48));
                if let Decision::Won(r) = l.state.decide(&user, qty, at) {
                    l.max_seq = l.max_seq.max(r.seq);
                    batch.push(order(&id, kind, &r));
                    if step % 5 == 0 {
                        let (key, answer) = (format!("k{step}"), r.answer(kind));
                        batch.push(LedgerWrite::Idem(IdemRecord {
                            campaign_id: id.clone(),
                            user_id: user.clone(),
                            key: key.clone(),
                            answer: answer.clone(),
                            created_at: at,
                        }));
                        if at >= now - ttl + Duration::minutes(1) {
                            idem_expected.insert((id.clone(), user, key), answer);
                        } else if at < now - ttl - Duration::minutes(1) {
                            idem_old.push((id.clone(), user, key));
                        }
                    }
                    l.active.push(r);
                }
            }
            15..=17 if !l.active.is_empty() => {
                // A cancel comes only for a committed order, as in the engine.
                ledger
                    .apply(&batch.iter().collect::<Vec<_>>())
                    .await
                    .unwrap();
                batch.clear();
                let r = l.active.swap_remove(rng.gen_range(0..l.active.len()));
                l.state.release(&r.user_id, r.qty, &r.codes);
                batch.push(LedgerWrite::Cancel {
                    order_id: r.order_id,
                    at: now,
                });
            }
            18 => {
                let units = rng.gen_range(1..20u64);
                let codes: Vec<String> = match kind {
                    Kind::Stock => Vec::new(),
                    Kind::Codes => {
                        let from = l.codes.len();
                        (from..from + units as usize)
                            .map(|i| format!("{id}-K{i}"))
                            .collect()
                    }
                };
                match kind {
                    Kind::Stock => l.state.add_units(units),
                    Kind::Codes => l.state.add_codes(codes.clone()),
                }
                l.codes.extend(codes.iter().cloned());
                batch.push(LedgerWrite::Restock {
                    campaign_id: id,
                    units,
                    codes,
                    at: now,
                });
            }
            _ => {}
        }
        if batch.len() >= 37 {
            ledger
                .apply(&batch.iter().collect::<Vec<_>>())
                .await
                .unwrap();
            batch.clear();
        }
    }
    live[5].state.status = Status::Paused;
    batch.push(LedgerWrite::Status {
        campaign_id: "c5".into(),
        status: Status::Paused,
        at: now,
    });
    ledger
        .apply(&batch.iter().collect::<Vec<_>>())
        .await
        .unwrap();

    let board = StockBoard::new();
    // Rejections kept as long as wins, so the comparison below covers every kept answer.
    let limits = crate::engine::idempotency::IdemLimits {
        rejected_ttl: ttl,
        per_user: usize::MAX,
        per_campaign: usize::MAX,
    };
    let cells = load_cells(&ledger, &board, ttl, limits, 0, Utc::now())
        .await
        .unwrap();
    assert_eq!(cells.len(), live.len());
    for l in &live {
        let id = &l.state.def.id;
        let cell = &cells[id];
        let inner = cell.inner.lock();
        let got = &inner.state;
        assert!(!l.active.is_empty(), "{id} sold something");
        // What the engine held before the restart.
        assert_eq!(got.view(), l.state.view(), "{id}");
        let held: HashMap<&str, u64> = got.holdings().collect();
        let want: HashMap<&str, u64> = l.state.holdings().collect();
        assert_eq!(held, want, "{id} holdings");
        let pool = |s: &CampaignState| s.pool().cloned().collect::<HashSet<_>>();
        assert_eq!(pool(got), pool(&l.state), "{id} pool");
        assert_eq!(got.next_seq(), l.max_seq + 1, "{id} numbering");
        assert_eq!(cell.signal.holder_count(), want.len(), "{id} board holders");
        assert_eq!(cell.signal.remaining(), l.state.remaining);
        // Exactly what rebuilding from every row at once gives, pool order included.
        let rows: Vec<_> = l
            .active
            .iter()
            .map(|r| (r.user_id.clone(), r.qty, r.codes.clone()))
            .collect();
        let all_at_once = CampaignState::recover(
            l.state.def.clone(),
            l.state.total,
            l.codes.clone(),
            l.state.status,
            &rows,
            l.max_seq,
        );
        assert_eq!(
            got.pool().collect::<Vec<_>>(),
            all_at_once.pool().collect::<Vec<_>>()
        );
        assert_eq!(got.view(), all_at_once.view());
    }
    for ((c, user, key), answer) in &idem_expected {
        let inner = cells[c].inner.lock();
        match inner.idem.get(user, key) {
            Some(Slot::Done(a, _)) => assert_eq!(a, answer),
            _ => panic!("idempotency answer of {c}/{user}/{key} not recovered"),
        }
    }
    assert!(!idem_expected.is_empty());
    assert!(!idem_old.is_empty());
    for (c, user, key) in &idem_old {
        let inner = cells[c].inner.lock();
        assert!(
            inner.idem.get(user, key).is_none(),
            "{c}/{user}/{key} is past the retention"
        );
    }
    // The recovered engine goes on numbering after the highest seq, and a holder at the limit
    // hears already_claimed.
    let c0 = &live[0];
    let full = c0
        .state
        .holdings()
        .find(|(_, h)| *h >= c0.state.def.per_user_limit)
        .map(|(u, _)| u.to_owned())
        .expect("someone is at the limit");
    let mut inner = cells["c0"].inner.lock();
    match inner.state.decide(&full, 1, Utc::now()) {
        Decision::Rejected(a) => assert_eq!(a.outcome, Outcome::AlreadyClaimed),
        Decision::Won(_) => panic!("a holder at the limit won again"),
        Decision::Dormant => panic!("a live campaign was left unloaded"),
    }
}
