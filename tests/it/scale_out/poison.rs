//! An order PostgreSQL refuses for its data is compensated in Redis and recorded.

use serde_json::json;
use sqlx::Connection;

use seckill::domain::Outcome;
use seckill::ledger::PgLedger;

use crate::helpers::{App, Deploy};

/// A rule the ledger enforces but the gate does not know: mallory's orders never persist
/// (constraint `no_mallory`, dropped through the returned connection).
pub(super) async fn refuse_mallory(db: &str) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(db).await.unwrap();
    sqlx::query(
        "ALTER TABLE orders ADD CONSTRAINT no_mallory CHECK (user_id <> 'mallory') NOT VALID",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_order_is_compensated_and_recorded() {
    let app = App::spawn(Deploy::ScaleOut).await;
    let db = app.postgres.clone().unwrap();
    app.create(json!({"id": "guarded", "stock": 10})).await;
    app.create(json!({"id": "guarded-codes", "codes": ["P1", "P2"]}))
        .await;
    let mut conn = refuse_mallory(&db).await;
    for user in ["alice", "mallory", "bob"] {
        assert_eq!(app.claim("guarded", user, 1).await.outcome, Outcome::Won);
    }
    let poisoned = app.claim("guarded-codes", "mallory", 1).await;
    assert_eq!(poisoned.codes, Some(vec!["P1".to_string()]));
    app.settle().await;

    let orders = app.client.all_orders("guarded").await.unwrap();
    let users: Vec<&str> = orders.iter().map(|o| o.user_id.as_str()).collect();
    assert_eq!(
        users,
        ["alice", "bob"],
        "the good orders of the batch persisted"
    );
    let view = app.client.campaign("guarded").await.unwrap();
    assert_eq!(view.remaining, 8, "mallory's unit went back");
    let ledger = PgLedger::open(&db, 1).await.unwrap();
    let failed = ledger.failed_orders("guarded").await.unwrap();
    assert_eq!(failed.len(), 1, "the poison order is recorded: {failed:?}");
    assert!(failed[0]
        .0
        .as_deref()
        .is_some_and(|id| id.starts_with("guarded-")));
    assert!(
        failed[0].1.contains("no_mallory"),
        "the reason names the refusal: {}",
        failed[0].1
    );

    // The code went back to the pool and the allowance was freed.
    let next = app.claim("guarded-codes", "alice", 1).await;
    assert_eq!(
        next.codes,
        Some(vec!["P1".to_string()]),
        "the code is handed out again"
    );
    assert_eq!(
        ledger.failed_orders("guarded-codes").await.unwrap().len(),
        1
    );
    app.settle().await;
    sqlx::query("ALTER TABLE orders DROP CONSTRAINT no_mallory")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        app.claim("guarded", "mallory", 1).await.outcome,
        Outcome::Won,
        "allowance freed"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_stream_entry_is_recorded_not_dropped() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "tampered", "stock": 5})).await;
    let client = redis::Client::open(app.redis[0].as_str()).unwrap();
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg("{c:tampered}:orders")
        .arg("*")
        .arg("order_id")
        .arg("tampered-x")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The entry says nothing of what it took: its campaign is fenced and rebuilt from the
    // ledger, and claims are refused ("nothing was changed") until then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match app.client.claim("tampered", "u1", 1, None).await.unwrap() {
            seckill::bench::client::ClaimReply::Processed(a) => {
                assert_eq!(a.outcome, Outcome::Won);
                break;
            }
            other => {
                assert!(std::time::Instant::now() < deadline, "{other:?}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    app.settle().await;
    assert_eq!(app.client.all_orders("tampered").await.unwrap().len(), 1);
    let ledger = PgLedger::open(app.postgres.as_deref().unwrap(), 1)
        .await
        .unwrap();
    let failed = ledger.failed_orders("tampered").await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reissued_order_id_is_told_apart_from_a_redelivery() {
    use seckill::domain::{Order, OrderState};
    let db = crate::servers::pg().fresh_db().await;
    let ledger = PgLedger::open(&db, 2).await.unwrap();
    let order = |user: &str| Order {
        order_id: "reissued-1".into(),
        campaign_id: "reissued".into(),
        user_id: user.into(),
        qty: 1,
        codes: None,
        state: OrderState::Active,
        created_at: seckill::domain::now(),
        cancelled_at: None,
        pay_by: None,
        resolved_at: None,
    };
    let first = order("alice");
    assert!(ledger
        .insert_pipeline_orders(std::slice::from_ref(&first), None)
        .await
        .unwrap()
        .is_empty());
    let redelivered = ledger
        .insert_pipeline_orders(std::slice::from_ref(&first), None)
        .await
        .unwrap();
    assert!(redelivered.is_empty(), "the same order again is harmless");
    let other = order("bob");
    let collisions = ledger
        .insert_pipeline_orders(std::slice::from_ref(&other), None)
        .await
        .unwrap();
    assert_eq!(
        collisions,
        vec![other],
        "another order under the same id is reported"
    );
    let stored = seckill::ledger::Ledger::order(&ledger, "reissued-1")
        .await
        .unwrap();
    assert_eq!(stored.unwrap().user_id, "alice", "the first order stays");
}

/// Many refused orders in the same `claims.lua` calls: the orders of one call share one stream
/// entry, and each refused one is recorded, given back and answered 409 on cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_refused_order_of_a_batch_entry_is_recorded() {
    let app = App::spawn(Deploy::ScaleOut).await;
    let db = app.postgres.clone().unwrap();
    app.create(json!({"id": "many", "stock": 1000})).await;
    let mut conn = sqlx::PgConnection::connect(&db).await.unwrap();
    sqlx::query("ALTER TABLE orders ADD CONSTRAINT no_m CHECK (user_id NOT LIKE 'm-%') NOT VALID")
        .execute(&mut conn)
        .await
        .unwrap();
    let claims = (0..600).map(|i| {
        let user = if i % 3 == 0 {
            format!("m-{i}")
        } else {
            format!("u-{i}")
        };
        let client = app.client.clone();
        async move {
            let reply = client.claim("many", &user, 1, None).await.unwrap();
            (user, reply)
        }
    });
    let replies = futures::future::join_all(claims).await;
    let mut refused = Vec::new();
    let mut good = 0u64;
    for (user, reply) in replies {
        let seckill::bench::client::ClaimReply::Processed(a) = reply else {
            panic!("{user}: {reply:?}");
        };
        assert_eq!(a.outcome, Outcome::Won, "{user}");
        if user.starts_with("m-") {
            refused.push(a.order_id.unwrap());
        } else {
            good += 1;
        }
    }
    app.settle().await;
    let ledger = PgLedger::open(&db, 1).await.unwrap();
    let failed = ledger.failed_orders("many").await.unwrap();
    let mut recorded: Vec<String> = failed.into_iter().filter_map(|(id, _)| id).collect();
    recorded.sort();
    refused.sort();
    assert_eq!(recorded, refused, "one row per refused order");
    let view = app.client.campaign("many").await.unwrap();
    assert_eq!(view.remaining, 1000 - good, "every refused unit went back");
    for id in refused.iter().take(20) {
        let (s, body) = app
            .client
            .admin(
                reqwest::Method::POST,
                &format!("/v1/orders/{id}/cancel"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(s.as_u16(), 409, "{id}: {body}");
    }
    app.stop().await;
}
