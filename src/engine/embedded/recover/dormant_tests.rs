//! Campaigns that can no longer sell start without their buyers, answer exactly as loaded
//! ones would, and are loaded whole the moment anything needs their buyers: a cancel, a
//! restock, a resume, or a claim that gets past their status and window (the engine's clock
//! moved back before `ends_at`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use crate::clock::Clock;
use crate::domain::{
    CampaignView, ClaimRequest, IdempotencyKey, NewCampaign, OrderState, Outcome, Restock, Status,
    Supply,
};
use crate::engine::backend::Backend;
use crate::engine::embedded::{Embedded, EmbeddedOptions};

/// The system clock shifted by an offset the test sets, backwards too.
#[derive(Debug, Default)]
struct SetClock(AtomicI64);

impl SetClock {
    fn set(&self, offset: TimeDelta) {
        self.0
            .store(offset.num_microseconds().unwrap(), Ordering::SeqCst);
    }
}

impl Clock for SetClock {
    fn now(&self) -> DateTime<Utc> {
        crate::domain::now() + TimeDelta::microseconds(self.0.load(Ordering::SeqCst))
    }
}

fn campaign(id: &str, supply: Supply, limit: u64, ends_at: Option<DateTime<Utc>>) -> NewCampaign {
    NewCampaign {
        id: id.into(),
        supply,
        per_user_limit: limit,
        starts_at: None,
        ends_at,
        hold_seconds: None,
        waiting_room: None,
    }
}

async fn claim(e: &Embedded, id: &str, user: &str, qty: u64, key: Option<&str>) -> Outcome {
    let req = ClaimRequest {
        user_id: user.into(),
        qty,
    };
    let key = key.map(|k| IdempotencyKey::new(k).unwrap());
    e.claim(id, req, key).await.unwrap().outcome
}

async fn open(dir: &std::path::Path, clock: &Arc<SetClock>) -> Arc<Embedded> {
    let mut opts = EmbeddedOptions::new(dir);
    opts.synchronous_full = false;
    opts.clock = clock.clone();
    Embedded::open(opts).await.unwrap()
}

async fn views(e: &Embedded, ids: &[&str]) -> HashMap<String, CampaignView> {
    let mut out = HashMap::new();
    for id in ids {
        out.insert(id.to_string(), e.campaign(id).await.unwrap());
    }
    out
}

fn dormant(e: &Embedded, id: &str) -> bool {
    e.cell(id).unwrap().inner.lock().state.is_dormant()
}

#[tokio::test]
async fn dormant_campaigns_answer_as_loaded_ones_and_load_when_needed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SetClock::default());
    let ends_at = crate::domain::now() + TimeDelta::hours(1);
    let ids = ["closed", "ended", "live", "kept"];
    let e = open(dir.path(), &clock).await;
    let stock = |n| Supply::Stock(n);
    let codes: Vec<String> = (0..40).map(|i| format!("K{i}")).collect();
    e.create_campaign(campaign("closed", stock(100), 2, None), None)
        .await
        .unwrap();
    e.create_campaign(
        campaign("ended", Supply::Codes(codes), 2, Some(ends_at)),
        None,
    )
    .await
    .unwrap();
    e.create_campaign(campaign("live", stock(10), 1, None), None)
        .await
        .unwrap();
    e.create_campaign(campaign("kept", stock(10), 1, None), None)
        .await
        .unwrap();
    for i in 0..30 {
        let qty = 1 + i % 2;
        assert_eq!(
            claim(&e, "closed", &format!("c{i}"), qty, None).await,
            Outcome::Won
        );
        assert_eq!(
            claim(&e, "ended", &format!("e{i}"), 1, None).await,
            Outcome::Won
        );
    }
    assert_eq!(claim(&e, "live", "l0", 1, None).await, Outcome::Won);
    assert_eq!(
        claim(&e, "kept", "k0", 1, Some("key-1")).await,
        Outcome::Won
    );
    for id in ["closed", "kept"] {
        e.set_status(id, Status::Closed, None).await.unwrap();
    }
    let before = views(&e, &ids).await;
    e.shutdown().await;
    drop(e);

    // Two hours later: `ended` is past its window.
    clock.set(TimeDelta::hours(2));
    let e = open(dir.path(), &clock).await;
    assert!(dormant(&e, "closed") && dormant(&e, "ended"));
    assert!(!dormant(&e, "live"), "an active campaign is loaded");
    assert!(
        !dormant(&e, "kept"),
        "a kept Idempotency-Key answer keeps it loaded"
    );
    assert_eq!(
        views(&e, &ids).await,
        before,
        "views are exact without the buyers"
    );
    let board = e.board.get("closed").unwrap();
    assert_eq!(
        board.holder_count(),
        0,
        "no buyer of a dormant campaign in memory"
    );
    assert_eq!(claim(&e, "closed", "c1", 1, None).await, Outcome::Closed);
    assert_eq!(
        claim(&e, "closed", "new", 1, Some("k")).await,
        Outcome::Closed
    );
    assert_eq!(claim(&e, "ended", "e1", 1, None).await, Outcome::Ended);
    assert_eq!(
        claim(&e, "kept", "k0", 1, Some("key-1")).await,
        Outcome::Won
    );
    assert!(
        dormant(&e, "closed") && dormant(&e, "ended"),
        "claims load nothing"
    );

    // A cancel needs the buyers: the campaign is loaded, then the units go back.
    let order = e.cancel("closed-2").await.unwrap();
    assert_eq!(order.state, OrderState::Cancelled);
    assert!(!dormant(&e, "closed"));
    assert_eq!(e.board.get("closed").unwrap().holder_count(), 30);
    let v = e.campaign("closed").await.unwrap();
    assert_eq!(v.remaining, before["closed"].remaining + order.qty);

    // A restock checks every code the campaign ever had.
    let again = Restock::Codes(vec!["K3".into()]);
    let refused = e.restock("ended", again, None).await.unwrap_err();
    assert!(refused.to_string().contains("K3"), "{refused}");
    assert!(!dormant(&e, "ended"));
    e.restock("ended", Restock::Codes(vec!["R1".into()]), None)
        .await
        .unwrap();

    // Back before `ends_at` (a clock moved back): a dormant campaign's claim gets past its
    // window and is decided on the loaded buyers.
    e.shutdown().await;
    drop(e);
    let e = open(dir.path(), &clock).await;
    assert!(dormant(&e, "ended"));
    clock.set(TimeDelta::zero());
    assert_eq!(claim(&e, "ended", "e1", 1, None).await, Outcome::Won);
    assert!(!dormant(&e, "ended"));
    assert_eq!(
        claim(&e, "ended", "e1", 1, None).await,
        Outcome::AlreadyClaimed
    );
    let v = e.campaign("ended").await.unwrap();
    assert_eq!((v.total, v.remaining), (41, 41 - 31));
    let mut sold = std::collections::HashSet::new();
    let page = crate::domain::OrderQuery {
        limit: Some(1000),
        ..Default::default()
    };
    for o in e.orders("ended", page).await.unwrap().orders {
        for code in o.codes.unwrap_or_default() {
            assert!(sold.insert(code), "a code handed out twice");
        }
    }
    assert_eq!(sold.len(), 31);
    e.shutdown().await;
}

/// A bad request (resuming a closed campaign: 409; a restock of the wrong kind: 400) is
/// refused before anything loads the dormant campaign: no buyer reaches memory or the board.
#[tokio::test]
async fn bad_admin_requests_leave_a_dormant_campaign_dormant() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SetClock::default());
    let e = open(dir.path(), &clock).await;
    for id in ["a", "b"] {
        e.create_campaign(campaign(id, Supply::Stock(100), 1, None), None)
            .await
            .unwrap();
        for i in 0..20 {
            assert_eq!(claim(&e, id, &format!("u{i}"), 1, None).await, Outcome::Won);
        }
        e.set_status(id, Status::Closed, None).await.unwrap();
    }
    e.shutdown().await;
    drop(e);
    let e = open(dir.path(), &clock).await;
    assert!(dormant(&e, "a") && dormant(&e, "b"));
    let refused = e.set_status("a", Status::Active, None).await.unwrap_err();
    assert!(refused.to_string().contains("closed"), "{refused}");
    let refused = e
        .restock("b", Restock::Codes(vec!["X".into()]), None)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("restock it with"), "{refused}");
    let a = (dormant(&e, "a"), e.board.get("a").unwrap().holder_count());
    let b = (dormant(&e, "b"), e.board.get("b").unwrap().holder_count());
    e.shutdown().await;
    assert_eq!(a, (true, 0), "a refused resume loaded campaign a");
    assert_eq!(b, (true, 0), "a refused restock loaded campaign b");
}

/// While the engine re-reads its state (in-process recovery), no campaign's new board entry
/// is published (active, sold out) before its holders are on it: the fast path would answer
/// a holder `sold_out` where the engine answers `already_claimed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_never_shows_a_sold_out_entry_without_its_holders() {
    use crate::engine::idempotency::IdemLimits;
    use crate::guard::soldout::StockBoard;
    use crate::ledger::{Ledger, LedgerWrite, SqliteLedger};
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path(), false).await.unwrap();
    let n: u64 = 300_000;
    let now = crate::domain::now();
    let def = crate::engine::state::CampaignDef {
        id: "s".into(),
        kind: crate::domain::Kind::Stock,
        per_user_limit: 1,
        starts_at: None,
        ends_at: None,
        hold_seconds: None,
        waiting_room: None,
    };
    let mut writes = vec![LedgerWrite::CreateCampaign {
        def,
        total: n,
        codes: Vec::new(),
        status: Status::Active,
        at: now,
    }];
    for i in 1..=n {
        writes.push(LedgerWrite::Order(crate::domain::Order {
            order_id: format!("s-{i}"),
            campaign_id: "s".into(),
            user_id: format!("user-{i}"),
            qty: 1,
            codes: None,
            state: OrderState::Active,
            created_at: now,
            cancelled_at: None,
            pay_by: None,
            resolved_at: None,
        }));
    }
    for chunk in writes.chunks(20_000) {
        ledger
            .apply(&chunk.iter().collect::<Vec<_>>())
            .await
            .unwrap();
    }
    let board = StockBoard::new();
    let done = Arc::new(AtomicBool::new(false));
    let wrong = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let poll = {
        let (board, done, wrong) = (board.clone(), done.clone(), wrong.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if let Some(e) = board.get("s") {
                    if e.sold_out_for("user-7", 1, crate::domain::now()) {
                        wrong.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        })
    };
    let cells = super::load_cells(
        &ledger,
        &board,
        TimeDelta::hours(24),
        IdemLimits::default(),
        1,
        crate::domain::now(),
    )
    .await
    .unwrap();
    done.store(true, Ordering::SeqCst);
    poll.join().unwrap();
    assert_eq!(cells["s"].signal.holder_count(), n as usize);
    assert_eq!(
        wrong.load(Ordering::SeqCst),
        0,
        "the fast path answered holder user-7 `sold_out` during recovery"
    );
}
