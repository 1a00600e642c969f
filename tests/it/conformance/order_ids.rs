//! Order ids and order cursors are parsed canonically: a spelling the engine never issues names
//! no order (404 at once, never a wait for the pipeline), and a cursor it never issues is a 400.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use seckill::domain::Outcome;

use crate::helpers::{App, Deploy};

crate::conformance!(
    non_canonical_order_ids_are_404_at_once,
    cursor_out_of_range_is_400
);

/// Far below the 10 s a scale-out cancel waits for an order the pipeline has not stored yet,
/// and generous for two shared cores.
const AT_ONCE: Duration = Duration::from_millis(1500);

async fn non_canonical_order_ids_are_404_at_once(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "zz", "stock": 5})).await;
    for user in ["u1", "u2"] {
        assert_eq!(app.claim("zz", user, 1).await.outcome, Outcome::Won);
    }
    app.settle().await;
    let ids = [
        "zz-0",
        "zz-00",
        "zz-01",
        "zz-001",
        "zz-+1",
        "zz-%2B1",
        "zz--1",
        "zz-1.0",
        "zz-1e0",
        "zz-0x1",
        "zz-%201",
        "zz-9223372036854775808",
        "zz-18446744073709551617",
        "zz-99999999999999999999999",
        "zz-",
        "nosuch-0",
        "nosuch-01",
        "nosuch-1",
        "zz",
    ];
    let mut slowest = Duration::ZERO;
    for id in ids {
        for (method, path) in [
            (Method::POST, format!("/v1/orders/{id}/cancel")),
            (Method::GET, format!("/v1/orders/{id}")),
        ] {
            let started = Instant::now();
            let (status, body) = app.admin(method.clone(), &path, None).await;
            let took = started.elapsed();
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (404, Some("not_found")),
                "{method} {path}: {body}"
            );
            assert!(took < AT_ONCE, "{method} {path} took {took:?}");
            slowest = slowest.max(took);
        }
    }
    eprintln!("{deploy:?}: slowest 404 of a non-canonical order id took {slowest:?}");
    // Nothing was cancelled by any of them: both orders stay active, the units stay sold.
    let orders = app.client.all_orders("zz").await.unwrap();
    assert_eq!(orders.len(), 2);
    assert!(orders
        .iter()
        .all(|o| o.state == seckill::domain::OrderState::Active));
    assert_eq!(app.client.campaign("zz").await.unwrap().remaining, 3);
    // The canonical spelling still works.
    let (status, body) = app.admin(Method::GET, "/v1/orders/zz-1", None).await;
    assert_eq!((status, body["order_id"].as_str()), (200, Some("zz-1")));
    app.stop().await;
}

async fn cursor_out_of_range_is_400(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "pg", "stock": 5})).await;
    for user in ["u1", "u2", "u3"] {
        assert_eq!(app.claim("pg", user, 1).await.outcome, Outcome::Won);
    }
    app.settle().await;
    for cursor in [
        "-1",
        "%2B1",
        "01",
        "9223372036854775808",
        "18446744073709551615",
        "1.5",
    ] {
        let path = format!("/v1/campaigns/pg/orders?cursor={cursor}");
        let (status, body) = app.admin(Method::GET, &path, None).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "cursor {cursor}: {body}"
        );
    }
    // The largest cursor in range is an empty last page, not a wrap to the first.
    let (status, body) = app
        .admin(
            Method::GET,
            "/v1/campaigns/pg/orders?cursor=9223372036854775807",
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["orders"], json!([]));
    let (status, body) = app
        .admin(
            Method::GET,
            "/v1/campaigns/pg/orders?cursor=1&limit=1",
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["orders"][0]["order_id"], "pg-2");
    assert_eq!(body["next_cursor"], "2");
    app.stop().await;
}
