//! Cancelling an order the pipeline could not store (a poison order) answers a clear 409 at
//! once, not 503 "pipeline lag" forever.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;
use sqlx::Connection;

use seckill::domain::Outcome;

use crate::helpers::{App, Deploy};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_a_poison_order_is_409() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "pz", "stock": 10})).await;
    let mut conn = sqlx::PgConnection::connect(app.postgres.as_deref().unwrap())
        .await
        .unwrap();
    sqlx::query(
        "ALTER TABLE orders ADD CONSTRAINT no_mallory CHECK (user_id <> 'mallory') NOT VALID",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let won = app.claim("pz", "mallory", 1).await;
    assert_eq!(won.outcome, Outcome::Won);
    app.settle().await;
    let path = format!("/v1/orders/{}/cancel", won.order_id.unwrap());
    for _ in 0..2 {
        let started = Instant::now();
        let (s, v) = app.admin(Method::POST, &path, None).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (409, Some("conflict")),
            "{v}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
    // Nothing was given back twice: the unit went back once, when the order was refused.
    assert_eq!(app.client.campaign("pz").await.unwrap().remaining, 10);
    app.stop().await;
}
