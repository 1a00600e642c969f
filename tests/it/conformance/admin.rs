//! Admin operations and their atomicity with respect to claims.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use reqwest::Method;
use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::domain::{ClaimAnswer, OrderState, Outcome};

use crate::helpers::{App, Deploy};

crate::conformance!(
    pause_and_close_win_over_racing_claims,
    sale_window_not_started_and_ended,
    cancel_returns_stock_code_and_allowance,
    restock_units_and_codes,
    orders_filter_and_cursor,
);

/// Claims fired continuously by `workers` tasks, each with a fresh user, until stopped.
async fn claim_storm(
    app: &App,
    campaign: &str,
    stop: Arc<AtomicBool>,
) -> Vec<(Instant, ClaimAnswer)> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let n = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (client, campaign) = (app.client.clone(), campaign.to_owned());
            let (stop, seen, n) = (stop.clone(), seen.clone(), n.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let user = format!("racer-{}", n.fetch_add(1, Ordering::Relaxed));
                    let sent = Instant::now();
                    if let Ok(ClaimReply::Processed(a)) =
                        client.claim(&campaign, &user, 1, None).await
                    {
                        seen.lock().push((sent, a));
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(seen).unwrap().into_inner()
}

async fn pause_and_close_win_over_racing_claims(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "race", "stock": 1_000_000})).await;
    for (action, status, outcome) in [
        ("pause", "paused", Outcome::Paused),
        ("close", "closed", Outcome::Closed),
    ] {
        let stop = Arc::new(AtomicBool::new(false));
        let storm = claim_storm(&app, "race", stop.clone());
        let admin = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let (s, v) = app
                .admin(Method::POST, &format!("/v1/campaigns/race/{action}"), None)
                .await;
            let answered = Instant::now();
            assert_eq!((s, v["status"].as_str()), (200, Some(status)));
            tokio::time::sleep(Duration::from_millis(300)).await;
            stop.store(true, Ordering::Relaxed);
            answered
        };
        let (seen, answered) = tokio::join!(storm, admin);
        let before = seen
            .iter()
            .filter(|(t, a)| *t < answered && a.outcome == Outcome::Won)
            .count();
        let after: Vec<_> = seen.iter().filter(|(t, _)| *t > answered).collect();
        assert!(
            before > 0 || action == "close",
            "claims won before the {action}"
        );
        assert!(!after.is_empty(), "claims were sent after the {action}");
        for (_, a) in after {
            assert_eq!(
                a.outcome, outcome,
                "a claim sent after the {action} answer got {a:?}"
            );
        }
        if action == "pause" {
            let (s, _) = app
                .admin(Method::POST, "/v1/campaigns/race/resume", None)
                .await;
            assert_eq!(s, 200);
            assert_eq!(
                app.claim("race", "after-resume", 1).await.outcome,
                Outcome::Won
            );
        }
    }
    let (s, v) = app
        .admin(Method::POST, "/v1/campaigns/race/resume", None)
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "closed is final"
    );
    let (s, _) = app
        .admin(Method::POST, "/v1/campaigns/race/close", None)
        .await;
    assert_eq!(s, 200, "closing a closed campaign is harmless");
    app.stop().await;
}

async fn sale_window_not_started_and_ended(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    let now = chrono::Utc::now();
    let later = (now + chrono::Duration::hours(1)).to_rfc3339();
    let earlier = (now - chrono::Duration::hours(2)).to_rfc3339();
    let just_now = (now - chrono::Duration::hours(1)).to_rfc3339();
    let soon = (now + chrono::Duration::milliseconds(800)).to_rfc3339();
    app.create(json!({"id": "future", "stock": 5, "starts_at": later}))
        .await;
    app.create(json!({"id": "past", "stock": 5, "starts_at": earlier, "ends_at": just_now}))
        .await;
    app.create(json!({"id": "opening", "stock": 5, "starts_at": soon}))
        .await;
    assert_eq!(
        app.claim("future", "u1", 1).await.outcome,
        Outcome::NotStarted
    );
    assert_eq!(app.claim("past", "u1", 1).await.outcome, Outcome::Ended);
    assert_eq!(
        app.claim("opening", "u1", 1).await.outcome,
        Outcome::NotStarted
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(app.claim("opening", "u1", 1).await.outcome, Outcome::Won);
    for id in ["future", "past"] {
        let v = app.client.campaign(id).await.unwrap();
        assert_eq!(
            (v.remaining, v.status.as_str()),
            (5, "active"),
            "the window does not change status"
        );
    }
    // Paused is checked before the window.
    app.admin(Method::POST, "/v1/campaigns/future/pause", None)
        .await;
    assert_eq!(app.claim("future", "u1", 1).await.outcome, Outcome::Paused);
    app.stop().await;
}

async fn cancel_returns_stock_code_and_allowance(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "one-code", "codes": ["ONLY-1"]}))
        .await;
    let won = app.claim("one-code", "u1", 1).await;
    assert_eq!(won.codes, Some(vec!["ONLY-1".to_string()]));
    assert_eq!(
        app.claim("one-code", "u2", 1).await.outcome,
        Outcome::SoldOut
    );
    assert_eq!(
        app.claim("one-code", "u1", 1).await.outcome,
        Outcome::AlreadyClaimed
    );
    app.settle().await;
    let order_id = won.order_id.unwrap();
    let cancel = format!("/v1/orders/{order_id}/cancel");
    let (s, first) = app.admin(Method::POST, &cancel, None).await;
    assert_eq!(s, 200);
    assert_eq!(first["state"], "cancelled");
    assert_eq!(app.client.campaign("one-code").await.unwrap().remaining, 1);
    let (s, second) = app.admin(Method::POST, &cancel, None).await;
    assert_eq!(
        (s, &second),
        (200, &first),
        "cancelling twice returns the same order"
    );
    assert_eq!(app.client.campaign("one-code").await.unwrap().remaining, 1);
    let again = app.claim("one-code", "u1", 1).await;
    assert_eq!(
        again.outcome,
        Outcome::Won,
        "the user's allowance was freed"
    );
    assert_eq!(
        again.codes,
        Some(vec!["ONLY-1".to_string()]),
        "the code went back to the pool"
    );
    app.settle().await;
    let order = app.client.order(&order_id).await.unwrap().unwrap();
    assert_eq!(order.state, OrderState::Cancelled);
    let (s, _) = app
        .admin(Method::POST, "/v1/orders/one-code-999/cancel", None)
        .await;
    assert_eq!(s, 404);
    app.stop().await;
}

async fn restock_units_and_codes(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "units", "stock": 1, "per_user_limit": 3}))
        .await;
    app.create(json!({"id": "pool", "codes": ["A", "B"]})).await;
    assert_eq!(app.claim("units", "u1", 1).await.outcome, Outcome::Won);
    assert_eq!(app.claim("units", "u2", 1).await.outcome, Outcome::SoldOut);
    let (s, v) = app
        .admin(
            Method::POST,
            "/v1/campaigns/units/restock",
            Some(json!({"units": 2})),
        )
        .await;
    assert_eq!(
        (s, v["total"].as_u64(), v["remaining"].as_u64()),
        (200, Some(3), Some(2))
    );
    assert_eq!(app.claim("units", "u2", 2).await.outcome, Outcome::Won);
    assert_eq!(
        app.refusal(
            Method::POST,
            "/v1/campaigns/units/restock",
            Some(json!({"codes": ["X"]}))
        )
        .await,
        (400, "invalid_request".into())
    );
    assert_eq!(
        app.refusal(
            Method::POST,
            "/v1/campaigns/pool/restock",
            Some(json!({"units": 1}))
        )
        .await,
        (400, "invalid_request".into())
    );
    assert_eq!(
        app.refusal(
            Method::POST,
            "/v1/campaigns/pool/restock",
            Some(json!({"codes": ["C", "A"]}))
        )
        .await,
        (409, "conflict".into())
    );
    let (s, v) = app
        .admin(
            Method::POST,
            "/v1/campaigns/pool/restock",
            Some(json!({"codes": ["C", "D"]})),
        )
        .await;
    assert_eq!(
        (s, v["total"].as_u64(), v["remaining"].as_u64()),
        (200, Some(4), Some(4))
    );
    let mut handed = Vec::new();
    for u in ["p1", "p2", "p3", "p4"] {
        handed.extend(app.claim("pool", u, 1).await.codes.unwrap());
    }
    handed.sort();
    assert_eq!(handed, ["A", "B", "C", "D"]);
    assert_eq!(app.claim("pool", "p5", 1).await.outcome, Outcome::SoldOut);
    app.stop().await;
}

async fn orders_filter_and_cursor(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "list", "stock": 100, "per_user_limit": 10}))
        .await;
    for i in 0..7 {
        let user = if i % 2 == 0 { "even" } else { "odd" };
        assert_eq!(app.claim("list", user, 1).await.outcome, Outcome::Won);
    }
    app.settle().await;
    let (s, v) = app
        .admin(Method::GET, "/v1/campaigns/list/orders?user_id=even", None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["orders"].as_array().unwrap().len(), 4);
    assert!(v["next_cursor"].is_null());
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (s, v) = app
            .admin(
                Method::GET,
                &format!("/v1/campaigns/list/orders?limit=3&cursor={cursor}"),
                None,
            )
            .await;
        assert_eq!(s, 200);
        for o in v["orders"].as_array().unwrap() {
            seen.push(o["order_id"].as_str().unwrap().to_owned());
        }
        match v["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
    }
    let expected: Vec<String> = (1..=7).map(|i| format!("list-{i}")).collect();
    assert_eq!(seen, expected, "oldest first, each order once");
    let order = app.client.order("list-3").await.unwrap().unwrap();
    assert_eq!(
        (
            order.user_id.as_str(),
            order.qty,
            order.campaign_id.as_str()
        ),
        ("even", 1, "list")
    );
    assert!(app.client.order("list-99").await.unwrap().is_none());
    app.stop().await;
}
