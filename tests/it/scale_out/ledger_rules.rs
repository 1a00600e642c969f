//! PostgreSQL refuses what the guarantees forbid, whoever hands it over (migration 0007), and
//! the pipeline handles a refusal as a contradiction between gate and ledger: recorded,
//! fenced, rebuilt from the ledger.

use std::time::{Duration, Instant};

use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::domain::{Order, OrderState, Outcome};
use seckill::ledger::invariants::refused_rule;
use seckill::ledger::{PgLedger, PipelineWrite, Transition};

use crate::helpers::{App, Deploy};
use crate::ledger_rules::new_order as order;

async fn refused(ledger: &PgLedger, writes: Vec<PipelineWrite>) -> &'static str {
    let e = ledger.apply_pipeline(&writes, None).await.unwrap_err();
    refused_rule(&e).unwrap_or_else(|| panic!("not a rule: {e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_ledger_refuses_what_the_guarantees_forbid() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "s", "stock": 2, "per_user_limit": 1}))
        .await;
    app.create(json!({"id": "k", "codes": ["A", "B"], "per_user_limit": 2}))
        .await;
    app.create(json!({"id": "h", "stock": 5, "hold_seconds": 60}))
        .await;
    let ledger = PgLedger::open(app.postgres.as_deref().unwrap(), 2)
        .await
        .unwrap();
    let new = |o: Order| PipelineWrite::Order(o);
    let active = OrderState::Active;
    ledger
        .apply_pipeline(
            &[
                new(order("s-1", "u1", None, active)),
                new(order("s-2", "u2", None, active)),
            ],
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        refused(&ledger, vec![new(order("s-3", "u3", None, active))]).await,
        "campaign_live_within_total"
    );
    // A cancel frees the unit; the same buyer may not hold two.
    sqlx::query("UPDATE orders SET state = 'cancelled' WHERE order_id = 's-2'")
        .execute(ledger.pool())
        .await
        .unwrap();
    assert_eq!(
        refused(&ledger, vec![new(order("s-3", "u1", None, active))]).await,
        "holdings_within_limit"
    );
    ledger
        .apply_pipeline(&[new(order("s-3", "u3", None, active))], None)
        .await
        .unwrap();
    // A cancelled order never comes back.
    let e = sqlx::query("UPDATE orders SET state = 'active' WHERE order_id = 's-2'")
        .execute(ledger.pool())
        .await
        .unwrap_err();
    assert_eq!(refused_rule(&e.into()), Some("order_state_once"));

    ledger
        .apply_pipeline(&[new(order("k-1", "u1", Some(&["A"]), active))], None)
        .await
        .unwrap();
    assert_eq!(
        refused(&ledger, vec![new(order("k-2", "u2", Some(&["A"]), active))]).await,
        "live_codes_pkey"
    );
    // A cancelled order gives back its code and its buyer's unit.
    sqlx::query("UPDATE orders SET state = 'cancelled' WHERE order_id = 'k-1'")
        .execute(ledger.pool())
        .await
        .unwrap();
    ledger
        .apply_pipeline(&[new(order("k-2", "u2", Some(&["A"]), active))], None)
        .await
        .unwrap();
    let held: Vec<(String, i64)> = sqlx::query_as(
        "SELECT user_id, units FROM holdings WHERE campaign_id = 'k' ORDER BY user_id",
    )
    .fetch_all(ledger.pool())
    .await
    .unwrap();
    assert_eq!(held, [("u1".into(), 0), ("u2".into(), 1)]);

    // A pending order resolves once: expired, it cannot be confirmed by a direct write.
    let pending = order("h-1", "u1", None, OrderState::Pending);
    ledger
        .apply_pipeline(
            &[
                new(pending.clone()),
                PipelineWrite::Transition(Transition {
                    order: pending.clone(),
                    to: OrderState::Expired,
                    at: seckill::domain::now(),
                }),
            ],
            None,
        )
        .await
        .unwrap();
    let e = sqlx::query("UPDATE orders SET state = 'confirmed' WHERE order_id = 'h-1'")
        .execute(ledger.pool())
        .await
        .unwrap_err();
    assert_eq!(refused_rule(&e.into()), Some("order_state_once"));
    let live: Vec<(String, i64)> =
        sqlx::query_as("SELECT id, live_units FROM campaigns ORDER BY id")
            .fetch_all(ledger.pool())
            .await
            .unwrap();
    assert_eq!(
        live,
        [("h".into(), 0), ("k".into(), 1), ("s".into(), 2)],
        "the counts follow every change"
    );
    app.stop().await;
}

/// An order the gate answered won but the ledger refuses (here: a second unit for a buyer at
/// the limit, appended to the stream as a gate that lost the buyer's first order would) is
/// recorded in failed_orders, its campaign fenced and rebuilt from the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_the_ledger_refuses_is_recorded_and_its_gate_rebuilt() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "r", "stock": 10, "per_user_limit": 1}))
        .await;
    assert_eq!(app.claim("r", "u1", 1).await.outcome, Outcome::Won);
    app.settle().await;
    let client = redis::Client::open(app.redis[0].as_str()).unwrap();
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let at = seckill::domain::now().timestamp_micros().to_string();
    let _: String = redis::cmd("XADD")
        .arg("{c:r}:orders")
        .arg("*")
        .arg(&[
            ("order_id", "r-7"),
            ("user", "u1"),
            ("qty", "1"),
            ("at", &at),
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let ledger = PgLedger::open(app.postgres.as_deref().unwrap(), 1)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let failed = ledger.failed_orders("r").await.unwrap();
        if !failed.is_empty() {
            break failed;
        }
        assert!(Instant::now() < deadline, "the refusal was never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(failed[0].0.as_deref(), Some("r-7"));
    assert!(
        failed[0].1.contains("holdings_within_limit"),
        "{}",
        failed[0].1
    );
    let orders = app.client.all_orders("r").await.unwrap();
    assert_eq!(orders.len(), 1, "{orders:?}");
    // Rebuilt from the ledger: served again, with the ledger's count.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match app.client.claim("r", "u2", 1, None).await.unwrap() {
            ClaimReply::Processed(a) => {
                assert_eq!(a.outcome, Outcome::Won);
                break;
            }
            other => {
                assert!(Instant::now() < deadline, "never served again: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(
        app.claim("r", "u1", 1).await.outcome,
        Outcome::AlreadyClaimed
    );
    app.settle().await;
    assert_eq!(app.client.campaign("r").await.unwrap().remaining, 8);
    app.stop().await;
}
