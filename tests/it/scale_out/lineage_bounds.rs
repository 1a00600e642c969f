//! The ledger's record of the Redis Cluster lineages a campaign left
//! (`ledger/postgres/lineage.rs`), driven directly: a bound is only ever lowered (A→B→C with C
//! behind B leaves A's entries between C's last id and B's refused, since C never had them), a
//! record the caller drops commits nothing, entries of the lineage serving and entries without
//! a lineage are written, and an entry above its bound that the ledger already holds is not
//! refused again but is reported as not to be acknowledged.

use serde_json::json;

use seckill::domain::OrderState;
use seckill::ledger::{Ledger, NodeRead, Origin, PgLedger, PipelineWrite};

use crate::helpers::{App, Deploy};
use crate::ledger_rules::new_order as order;

fn node(lineage: &str, checked: &str, last: (u64, u64)) -> NodeRead {
    NodeRead {
        lineage: lineage.into(),
        checked: checked.into(),
        seq: 0,
        last,
        pending: Vec::new(),
    }
}

async fn check(ledger: &PgLedger, n: NodeRead) {
    let (verdict, recorded) = ledger.check_lineage("c", &n).await.unwrap();
    assert!(verdict.settled(&n), "{verdict:?}");
    recorded
        .expect("a settled check records")
        .commit()
        .await
        .unwrap();
}

fn from(lineage: &str, pos: (u64, u64)) -> Option<Origin> {
    Some(Origin {
        lineage: lineage.into(),
        pos,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn left_lineages_are_refused_above_their_lowest_bound() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "c", "stock": 100, "per_user_limit": 1}))
        .await;
    let ledger = PgLedger::open(app.postgres.as_deref().unwrap(), 2)
        .await
        .unwrap();
    // Times as a stream entry carries them (microseconds), so a redelivery compares equal.
    let new = |id: &str, user: &str| {
        let mut o = order(id, user, None, OrderState::Active);
        o.created_at =
            chrono::DateTime::from_timestamp_micros(o.created_at.timestamp_micros()).unwrap();
        PipelineWrite::Order(o)
    };

    // Served from A; B took over with A's stream up to 110-0; C took over from B having only
    // up to 105-0. A dropped record (a stale read) changes nothing.
    check(&ledger, node("A", "", (100, 0))).await;
    check(&ledger, node("B", "A", (110, 0))).await;
    let (_, stale) = ledger
        .check_lineage("c", &node("A", "", (999, 0)))
        .await
        .unwrap();
    drop(stale);
    check(&ledger, node("C", "B", (105, 0))).await;

    let writes = vec![
        new("c-1", "a-kept"),  // A, at C's bound: C has it
        new("c-2", "a-lost"),  // A, between C's and B's bound: C never had it
        new("c-3", "b-lost"),  // B, above C's bound
        new("c-4", "c-new"),   // C, the lineage serving
        new("c-5", "no-line"), // written before lineages were recorded
    ];
    let origins = vec![
        from("A", (105, 0)),
        from("A", (108, 0)),
        from("B", (106, 0)),
        from("C", (200, 0)),
        None,
    ];
    let out = ledger.apply_read(&writes, &origins, None).await.unwrap();
    assert_eq!(out.lost, vec![1, 2]);
    assert_eq!(out.not_here, vec![1, 2]);
    let held = |id: &'static str| {
        let ledger = &ledger;
        async move { ledger.order(id).await.unwrap().map(|o| o.user_id) }
    };
    assert_eq!(held("c-1").await.as_deref(), Some("a-kept"));
    assert_eq!(held("c-2").await, None);
    assert_eq!(held("c-3").await, None);
    assert_eq!(held("c-4").await.as_deref(), Some("c-new"));
    assert_eq!(held("c-5").await.as_deref(), Some("no-line"));

    // A redelivery of what the ledger holds, read from a left lineage above its bound: not
    // refused, not written twice, and still not to be acknowledged on the node serving now.
    let again = ledger
        .apply_read(&writes[..1], &[from("A", (300, 0))], None)
        .await
        .unwrap();
    assert!(again.lost.is_empty(), "{again:?}");
    assert_eq!(again.not_here, vec![0]);
}
