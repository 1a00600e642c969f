//! Concurrent claims: the guarantees under contention.

use std::collections::HashSet;

use futures::future::join_all;
use serde_json::json;

use seckill::bench::fire::{self, Shot};
use seckill::domain::Outcome;

use crate::helpers::{App, Deploy};
use crate::invariants;

crate::conformance!(
    thousand_distinct_users_on_stock_100,
    seed_002_transcript,
    code_pool_raced_by_500_users,
    one_user_fires_200_concurrent_claims,
    same_idempotency_key_concurrently,
    idempotency_key_replays_any_outcome,
);

fn won(report: &fire::Report) -> Vec<(String, seckill::domain::ClaimAnswer)> {
    report
        .answers
        .iter()
        .filter(|(_, a)| a.outcome == Outcome::Won)
        .map(|(s, a)| (s.user.clone(), a.clone()))
        .collect()
}

async fn thousand_distinct_users_on_stock_100(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "stock-100", "stock": 100})).await;
    let report = fire::storm(&app.client, "stock-100", fire::distinct_users(1000), 1000).await;
    assert_eq!(report.transport_errors, 0);
    assert!(
        report.refused.is_empty(),
        "refused: {:?}, first bodies: {:?}",
        report.refused,
        report.refusal_bodies
    );
    assert_eq!(report.count("won"), 100);
    assert_eq!(report.count("sold_out"), 900);
    app.settle().await;
    let view = app.client.campaign("stock-100").await.unwrap();
    assert_eq!(view.remaining, 0);
    let orders = app.client.all_orders("stock-100").await.unwrap();
    assert_eq!(orders.len(), 100);
    invariants::check(&view, &orders, &won(&report), true);
    app.stop().await;
}

async fn seed_002_transcript(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "air-12", "stock": 5, "per_user_limit": 2}))
        .await;
    let steps = [
        ("u101", 2, Outcome::Won),
        ("u101", 2, Outcome::AlreadyClaimed),
        ("u102", 2, Outcome::Won),
        ("u103", 3, Outcome::OverLimit),
        ("u103", 2, Outcome::SoldOut),
    ];
    for (user, qty, expected) in steps {
        let a = app.claim("air-12", user, qty).await;
        assert_eq!(a.outcome, expected, "{user} qty {qty}");
    }
    assert_eq!(app.client.campaign("air-12").await.unwrap().remaining, 1);
    let a = app.claim("air-12", "u103", 1).await;
    assert_eq!(a.outcome, Outcome::Won, "the last unit still sells");
    app.stop().await;
}

async fn code_pool_raced_by_500_users(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    let codes: Vec<String> = (0..50).map(|i| format!("K7F-{i:03}")).collect();
    app.create(json!({"id": "prizes", "codes": codes})).await;
    let report = fire::storm(&app.client, "prizes", fire::distinct_users(500), 500).await;
    assert_eq!(report.count("won"), 50);
    assert_eq!(report.count("sold_out"), 450);
    let handed: Vec<String> = won(&report)
        .iter()
        .flat_map(|(_, a)| a.codes.clone().expect("code campaigns answer codes"))
        .collect();
    let distinct: HashSet<&String> = handed.iter().collect();
    assert_eq!(handed.len(), 50);
    assert_eq!(distinct.len(), 50, "a code was handed out twice");
    assert_eq!(distinct, codes.iter().collect::<HashSet<_>>());
    app.settle().await;
    let view = app.client.campaign("prizes").await.unwrap();
    let orders = app.client.all_orders("prizes").await.unwrap();
    invariants::check(&view, &orders, &won(&report), true);
    app.stop().await;
}

async fn one_user_fires_200_concurrent_claims(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "one-each", "stock": 1000, "per_user_limit": 1}))
        .await;
    let shots = (0..200)
        .map(|_| Shot {
            user: "greedy".into(),
            qty: 1,
            key: None,
        })
        .collect();
    let report = fire::storm(&app.client, "one-each", shots, 200).await;
    assert_eq!(report.count("won"), 1);
    assert_eq!(report.count("already_claimed"), 199);
    app.settle().await;
    let view = app.client.campaign("one-each").await.unwrap();
    assert_eq!(view.remaining, 999);
    let orders = app.client.all_orders("one-each").await.unwrap();
    invariants::check(&view, &orders, &won(&report), false);
    app.stop().await;
}

async fn same_idempotency_key_concurrently(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "idem", "stock": 10, "per_user_limit": 5}))
        .await;
    let answers =
        join_all((0..100).map(|_| app.claim_with_key("idem", "u1", 2, Some("retry-1")))).await;
    assert!(
        answers.iter().all(|a| a == &answers[0]),
        "retries got different answers"
    );
    assert_eq!(answers[0].outcome, Outcome::Won);
    app.settle().await;
    let orders = app.client.all_orders("idem").await.unwrap();
    assert_eq!(orders.len(), 1, "one key, one order");
    assert_eq!(app.client.campaign("idem").await.unwrap().remaining, 8);
    // A new key is a new claim.
    let other = app.claim_with_key("idem", "u1", 2, Some("retry-2")).await;
    assert_eq!(other.outcome, Outcome::Won);
    assert_ne!(other.order_id, answers[0].order_id);
    app.stop().await;
}

async fn idempotency_key_replays_any_outcome(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "idem-out", "stock": 1})).await;
    assert_eq!(
        app.claim("idem-out", "first", 1).await.outcome,
        Outcome::Won
    );
    let sold = app.claim_with_key("idem-out", "late", 1, Some("k")).await;
    assert_eq!(sold.outcome, Outcome::SoldOut);
    // Cancel frees the unit, but the key still replays the first processed answer.
    app.settle().await;
    let first = app.client.all_orders("idem-out").await.unwrap().remove(0);
    let (s, _) = app
        .admin(
            reqwest::Method::POST,
            &format!("/v1/orders/{}/cancel", first.order_id),
            None,
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        app.claim_with_key("idem-out", "late", 1, Some("k")).await,
        sold
    );
    // The same key from another user is that user's own claim.
    assert_eq!(
        app.claim_with_key("idem-out", "other", 1, Some("k"))
            .await
            .outcome,
        Outcome::Won
    );
    app.stop().await;
}
