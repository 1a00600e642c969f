//! The gate catches up with the ledger: a campaign or restock the ledger committed but Redis
//! never saw (a process died between the two writes), and Redis that lost its data.

use chrono::Utc;
use reqwest::Method;
use serde_json::json;

use seckill::domain::{Kind, Outcome, Restock};
use seckill::engine::state::CampaignDef;
use seckill::ledger::PgLedger;

use crate::helpers::{App, Deploy};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ledger_writes_redis_missed_are_applied() {
    let app = App::spawn(Deploy::ScaleOut).await;
    let ledger = PgLedger::open(app.postgres.as_deref().unwrap(), 1)
        .await
        .unwrap();
    // Committed to the ledger only, as if the process died before the Redis script.
    let def = CampaignDef {
        id: "half-made".into(),
        kind: Kind::Codes,
        per_user_limit: 1,
        starts_at: None,
        ends_at: None,
        hold_seconds: None,
        waiting_room: None,
    };
    ledger
        .create_campaign(&def, 2, &["H1".into(), "H2".into()], Utc::now())
        .await
        .unwrap();
    let view = app.client.campaign("half-made").await.unwrap();
    assert_eq!(
        (view.total, view.remaining),
        (2, 2),
        "installed from the ledger on first read"
    );
    assert_eq!(
        app.claim("half-made", "u1", 1).await.codes,
        Some(vec!["H1".to_string()])
    );

    ledger
        .restock("half-made", &Restock::Codes(vec!["H3".into()]), Utc::now())
        .await
        .unwrap();
    let (s, v) = app
        .admin(Method::POST, "/v1/campaigns/half-made/pause", None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        (v["total"].as_u64(), v["remaining"].as_u64()),
        (Some(3), Some(2)),
        "{v}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_data_loss_is_rebuilt_from_the_ledger() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "lost", "codes": ["L1", "L2", "L3", "L4"], "per_user_limit": 1}))
        .await;
    let first = app.claim("lost", "u1", 1).await;
    let second = app.claim("lost", "u2", 1).await;
    app.settle().await;
    let (s, _) = app
        .admin(
            Method::POST,
            &format!("/v1/orders/{}/cancel", second.order_id.unwrap()),
            None,
        )
        .await;
    assert_eq!(s, 200);
    let client = redis::Client::open(app.redis[0].as_str()).unwrap();
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();

    let view = app.client.campaign("lost").await.unwrap();
    assert_eq!(
        (view.total, view.remaining),
        (4, 3),
        "remaining = total - active orders"
    );
    assert_eq!(
        app.claim("lost", "u1", 1).await.outcome,
        Outcome::AlreadyClaimed
    );
    let again = app.claim("lost", "u2", 1).await;
    assert_eq!(
        again.outcome,
        Outcome::Won,
        "the cancelled order's allowance stays free"
    );
    assert_eq!(
        again.codes,
        Some(vec!["L2".to_string()]),
        "its code is back in the pool"
    );
    assert_eq!(
        again.order_id.as_deref(),
        Some("lost-3"),
        "order numbers are not reused"
    );
    app.settle().await;
    let orders = app.client.all_orders("lost").await.unwrap();
    assert_eq!(orders.len(), 3);
    assert_ne!(first.codes, again.codes);
    app.stop().await;
}
