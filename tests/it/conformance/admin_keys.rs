//! `Idempotency-Key` on admin POSTs: a retry after an unknown outcome (the connection dropped
//! at any point, or a restart) changes nothing twice and gives the documented answer.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use seckill::domain::{OrderState, Outcome};

use super::dropped::{converge, send_and_drop};
use crate::helpers::{App, Deploy, TOKEN};

crate::conformance!(
    admin_retries_with_a_key_change_nothing_twice,
    dropped_admin_requests_retried_with_their_key
);

pub(crate) async fn keyed(app: &App, path: &str, body: Option<Value>, key: &str) -> (u16, Value) {
    let mut req = app
        .client
        .http()
        .post(app.client.url(path))
        .bearer_auth(TOKEN)
        .header("idempotency-key", key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("admin request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn admin_retries_with_a_key_change_nothing_twice(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    // Create: same key and definition answers the campaign; another definition is 409;
    // without a key a duplicate is 409.
    let def = json!({"id": "kc", "stock": 5});
    let (s, v) = keyed(&app, "/v1/campaigns", Some(def.clone()), "c1").await;
    assert_eq!((s, v["total"].as_u64()), (201, Some(5)), "{v}");
    let (s, v) = keyed(&app, "/v1/campaigns", Some(def.clone()), "c1").await;
    assert_eq!((s, v["id"].as_str()), (201, Some("kc")), "{v}");
    let (s, v) = keyed(
        &app,
        "/v1/campaigns",
        Some(json!({"id": "kc", "stock": 6})),
        "c1",
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    let (s, _) = app.admin(Method::POST, "/v1/campaigns", Some(def)).await;
    assert_eq!(s, 409);
    // Restock: the same key adds once; the same key with other units is 409.
    for _ in 0..3 {
        let (s, v) = keyed(
            &app,
            "/v1/campaigns/kc/restock",
            Some(json!({"units": 2})),
            "r1",
        )
        .await;
        assert_eq!((s, v["total"].as_u64()), (200, Some(7)), "{v}");
    }
    let (s, v) = keyed(
        &app,
        "/v1/campaigns/kc/restock",
        Some(json!({"units": 3})),
        "r1",
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    let (s, v) = keyed(
        &app,
        "/v1/campaigns/kc/restock",
        Some(json!({"units": 3})),
        "r2",
    )
    .await;
    assert_eq!((s, v["total"].as_u64()), (200, Some(10)), "{v}");
    // Status: a replay answers the current state; the key cannot be reused for another change.
    let (s, v) = keyed(&app, "/v1/campaigns/kc/pause", None, "p1").await;
    assert_eq!((s, v["status"].as_str()), (200, Some("paused")), "{v}");
    let (s, v) = keyed(&app, "/v1/campaigns/kc/pause", None, "p1").await;
    assert_eq!((s, v["status"].as_str()), (200, Some("paused")), "{v}");
    let (s, v) = keyed(&app, "/v1/campaigns/kc/resume", None, "p1").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    let (s, v) = keyed(&app, "/v1/campaigns/kc/resume", None, "p2").await;
    assert_eq!((s, v["status"].as_str()), (200, Some("active")), "{v}");
    // Cancel: a retry returns the cancelled order, its unit given back once.
    let a = app.claim("kc", "u1", 1).await;
    assert_eq!(a.outcome, Outcome::Won);
    app.settle().await;
    let path = format!("/v1/orders/{}/cancel", a.order_id.unwrap());
    for _ in 0..3 {
        let (s, v) = keyed(&app, &path, None, "x1").await;
        assert_eq!((s, v["state"].as_str()), (200, Some("cancelled")), "{v}");
        let (s, v) = app.admin(Method::POST, &path, None).await;
        assert_eq!((s, v["state"].as_str()), (200, Some("cancelled")), "{v}");
        assert_eq!(app.client.campaign("kc").await.unwrap().remaining, 10);
    }
    converge(&app, &["kc".to_owned()]).await;
    app.stop().await;
}

/// Each request is first sent on a socket dropped after a delay (its outcome unknown), then
/// retried with the same key until it answers: every key takes effect exactly once, also when
/// the retry comes after a restart.
async fn dropped_admin_requests_retried_with_their_key(deploy: Deploy) {
    let mut app = App::spawn(deploy).await;
    app.create(json!({"id": "kr", "stock": 1})).await;
    let addr = app.admin_addr();
    let delays = [100u64, 250, 500, 1_000, 2_000, 5_000, 20_000];
    let mut keys = Vec::new();
    for (i, us) in delays.iter().cycle().take(21).enumerate() {
        let key = format!("restock-{i}");
        let after = Duration::from_micros(*us);
        send_and_drop(
            addr,
            "/v1/campaigns/kr/restock",
            r#"{"units":1}"#,
            Some(&key),
            after,
        )
        .await;
        let created = format!("kr-new-{i}");
        let body = json!({"id": created, "stock": 2}).to_string();
        send_and_drop(addr, "/v1/campaigns", &body, Some(&key), after).await;
        let (s, v) = keyed(
            &app,
            "/v1/campaigns/kr/restock",
            Some(json!({"units": 1})),
            &key,
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let (s, v) = keyed(
            &app,
            "/v1/campaigns",
            Some(json!({"id": created, "stock": 2})),
            &key,
        )
        .await;
        assert_eq!((s, v["total"].as_u64()), (201, Some(2)), "{v}");
        keys.push((key, created));
    }
    let want = 1 + keys.len() as u64;
    let mut ids: Vec<String> = keys.iter().map(|(_, c)| c.clone()).collect();
    ids.push("kr".into());
    assert_eq!(converge(&app, &ids).await["kr"].0, want);
    app.restart().await;
    for (key, created) in &keys {
        let (s, v) = keyed(
            &app,
            "/v1/campaigns/kr/restock",
            Some(json!({"units": 1})),
            key,
        )
        .await;
        assert_eq!((s, v["total"].as_u64()), (200, Some(want)), "{v}");
        let (s, _) = keyed(
            &app,
            "/v1/campaigns",
            Some(json!({"id": created, "stock": 2})),
            key,
        )
        .await;
        assert_eq!(s, 201);
    }
    let views = converge(&app, &ids).await;
    assert_eq!(views["kr"], (want, want, "active".to_owned()));
    let orders = app.client.all_orders("kr").await.unwrap();
    assert!(orders.iter().all(|o| o.state == OrderState::Active));
    app.stop().await;
}
