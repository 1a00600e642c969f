//! The embedded ledger refuses what the guarantees forbid (SQLite migration 0008), and the
//! engine treats a refusal as its memory contradicting the ledger (it re-reads its state).

use chrono::Utc;

use seckill::domain::{Kind, Order, OrderState, Status};
use seckill::engine::state::CampaignDef;
use seckill::ledger::invariants::refused_rule;
use seckill::ledger::{Ledger, LedgerWrite, SqliteLedger, WriteFault};

/// A one-unit order of campaign `<id before the dash>` (pending ones due in the future).
pub(crate) fn new_order(id: &str, user: &str, codes: Option<&[&str]>, state: OrderState) -> Order {
    Order {
        order_id: id.into(),
        campaign_id: id.split('-').next().unwrap().into(),
        user_id: user.into(),
        qty: 1,
        codes: codes.map(|c| c.iter().map(|s| s.to_string()).collect()),
        state,
        created_at: Utc::now(),
        cancelled_at: None,
        pay_by: (state == OrderState::Pending).then(Utc::now),
        resolved_at: None,
    }
}

fn order(id: &str, user: &str, codes: Option<&[&str]>, state: OrderState) -> LedgerWrite {
    LedgerWrite::Order(new_order(id, user, codes, state))
}

fn campaign(id: &str, kind: Kind, total: u64, limit: u64, codes: &[&str]) -> LedgerWrite {
    LedgerWrite::CreateCampaign {
        def: CampaignDef {
            id: id.into(),
            kind,
            per_user_limit: limit,
            starts_at: None,
            ends_at: None,
            hold_seconds: (id == "h").then_some(60),
            waiting_room: None,
        },
        total,
        codes: codes.iter().map(|s| s.to_string()).collect(),
        status: Status::Active,
        at: Utc::now(),
    }
}

async fn refused(ledger: &SqliteLedger, write: LedgerWrite) -> &'static str {
    let e = ledger.apply(&[&write]).await.unwrap_err();
    assert!(
        matches!(Some(&e), Some(WriteFault::Diverged(_))),
        "a refusal makes the engine re-read: {e:#}"
    );
    refused_rule(&anyhow::Error::new(e.clone())).unwrap_or_else(|| panic!("not a rule: {e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_ledger_refuses_what_the_guarantees_forbid() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path(), false).await.unwrap();
    let active = OrderState::Active;
    for c in [
        campaign("s", Kind::Stock, 2, 1, &[]),
        campaign("k", Kind::Codes, 2, 2, &["A", "B"]),
        campaign("h", Kind::Stock, 1, 1, &[]),
    ] {
        ledger.apply(&[&c]).await.unwrap();
    }
    ledger
        .apply(&[
            &order("s-1", "u1", None, active),
            &order("s-2", "u2", None, active),
        ])
        .await
        .unwrap();
    assert_eq!(
        refused(&ledger, order("s-3", "u3", None, active)).await,
        "campaign_live_within_total"
    );
    ledger
        .apply(&[&LedgerWrite::Cancel {
            order_id: "s-2".into(),
            at: Utc::now(),
        }])
        .await
        .unwrap();
    assert_eq!(
        refused(&ledger, order("s-3", "u1", None, active)).await,
        "holdings_within_limit"
    );
    ledger
        .apply(&[&order("s-3", "u3", None, active)])
        .await
        .unwrap();

    ledger
        .apply(&[&order("k-1", "u1", Some(&["A"]), active)])
        .await
        .unwrap();
    let e = ledger
        .apply(&[&order("k-2", "u2", Some(&["A"]), active)])
        .await
        .unwrap_err();
    assert!(
        matches!(Some(&e), Some(WriteFault::Diverged(_))),
        "a code held twice: {e:#}"
    );

    // The unit of an expired hold is sold again in the same batch as its expiry, whatever the
    // order of the two in the batch; an expired order is never confirmed.
    ledger
        .apply(&[&order("h-1", "u1", None, OrderState::Pending)])
        .await
        .unwrap();
    let expire = LedgerWrite::Expire {
        order_id: "h-1".into(),
        at: Utc::now(),
    };
    ledger
        .apply(&[&order("h-2", "u2", None, OrderState::Pending), &expire])
        .await
        .unwrap();
    let confirm = LedgerWrite::Confirm {
        order_id: "h-1".into(),
        at: Utc::now(),
    };
    // A second resolution is a contradiction too.
    let e = ledger.apply(&[&confirm]).await.unwrap_err();
    assert!(matches!(Some(&e), Some(WriteFault::Diverged(_))), "{e:#}");
    assert_eq!(
        ledger.order("h-1").await.unwrap().unwrap().state,
        OrderState::Expired
    );
}

/// After a contradiction the writer bumps its epoch and reports recovering until the engine
/// calls `recovered()`; a job decided on the state re-read at the new epoch in between (the
/// engine has swapped its campaigns in) is written, not refused as stale and left undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_the_reread_state_is_written_before_recovered() {
    use seckill::ledger::{CommitFault, GroupCommit, WriterHealth};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let ledger = Arc::new(SqliteLedger::open(dir.path(), false).await.unwrap());
    let commit = GroupCommit::spawn(ledger.clone(), 64);
    let active = OrderState::Active;
    commit
        .run(0, vec![campaign("s", Kind::Stock, 5, 5, &[])])
        .await
        .unwrap();
    commit
        .run(0, vec![order("s-1", "u1", None, active)])
        .await
        .unwrap();
    // The same order id again: the ledger contradicts the engine.
    let e = commit
        .run(0, vec![order("s-1", "u2", None, active)])
        .await
        .unwrap_err();
    assert_eq!(e.fault, CommitFault::Diverged);
    assert!(matches!(commit.health(), WriterHealth::Recovering { .. }));
    assert_eq!(commit.epoch(), 1);
    // Decided on the re-read state (epoch 1) before the engine said `recovered`.
    commit
        .run(1, vec![order("s-2", "u2", None, active)])
        .await
        .expect("a job of the current epoch is written");
    assert!(ledger.order("s-2").await.unwrap().is_some());
    // A job of the old state still is not.
    let stale = commit
        .run(0, vec![order("s-3", "u3", None, active)])
        .await
        .unwrap_err();
    assert_eq!(stale.fault, CommitFault::Stale);
    commit.recovered(1);
    assert!(matches!(commit.health(), WriterHealth::Writable));
}
