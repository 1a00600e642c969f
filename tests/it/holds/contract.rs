//! The holds contract on every deployment (embedded, scale-out on one Redis, on a Redis
//! Cluster), with real 2-second holds: the pending answer, confirm twice, the 409 after
//! `pay_by` with the order expired, units and allowance back, cancel of pending, confirmed and
//! expired orders, the listing, an order the sweeper alone expires, and the refusals (400
//! without holds, 404 unknown).

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use seckill::domain::{OrderState, Outcome};

use super::{confirm, state_of, until_nothing_pending};
use crate::helpers::{App, Deploy};

crate::conformance!(holds_contract_with_real_deadlines);

/// Sleeps until `t` has passed (by this machine's clock, which Redis shares here).
async fn until(t: chrono::DateTime<chrono::Utc>) {
    let wait = (t - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
}

async fn holds_contract_with_real_deadlines(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    let v = app
        .create(
            json!({"id": "h", "codes": ["K1", "K2", "K3"], "per_user_limit": 1, "hold_seconds": 2}),
        )
        .await;
    let holds = v.holds.expect("the view shows holds");
    assert_eq!((holds.hold_seconds, holds.pending), (2, 0));

    let before = seckill::domain::now();
    let won = app.claim("h", "u1", 1).await;
    assert_eq!(
        (won.outcome, won.state),
        (Outcome::Won, Some(OrderState::Pending))
    );
    let pay_by = won.pay_by.expect("pay_by");
    let ms = (pay_by - before).num_milliseconds();
    assert!(
        (1_500..=2_500).contains(&ms),
        "pay_by {pay_by} is won + 2 s"
    );
    let a = won.order_id.unwrap();
    let v = app.client.campaign("h").await.unwrap();
    assert_eq!((v.remaining, v.holds.unwrap().pending), (2, 1));

    // Confirm, twice: the same confirmed order, and the ledger agrees once it caught up.
    let (s, first) = confirm(&app, &a).await;
    assert_eq!(
        (s, first["state"].as_str()),
        (200, Some("confirmed")),
        "{first}"
    );
    let (s, again) = confirm(&app, &a).await;
    assert_eq!((s, &again), (200, &first));
    app.settle().await;
    let (s, read) = app
        .admin(Method::GET, &format!("/v1/orders/{a}"), None)
        .await;
    assert_eq!(
        (s, &read),
        (200, &first),
        "the ledger's order is the confirm's answer"
    );
    let v = app.client.campaign("h").await.unwrap();
    assert_eq!((v.remaining, v.holds.unwrap().pending), (2, 0));

    // b passes its deadline: the confirm is refused, b is expired, its code comes back.
    let b = app.claim("h", "u2", 1).await;
    let c = app.claim("h", "u3", 1).await.order_id.unwrap();
    assert_eq!(app.claim("h", "u4", 1).await.outcome, Outcome::SoldOut);
    let (s, body) = app
        .admin(Method::POST, &format!("/v1/orders/{c}/cancel"), None)
        .await;
    assert_eq!(
        (s, body["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    until(b.pay_by.unwrap()).await;
    let b = b.order_id.unwrap();
    let (s, body) = confirm(&app, &b).await;
    assert_eq!(
        (s, body["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    let v = until_nothing_pending(&app, "h").await;
    assert_eq!(v.remaining, 2, "u2's and u3's codes are back");
    app.settle().await;
    assert_eq!(state_of(&app, &b).await, OrderState::Expired);
    assert_eq!(state_of(&app, &c).await, OrderState::Cancelled);
    // Resolved orders stay as they are.
    let (s, _) = confirm(&app, &b).await;
    assert_eq!(s, 409);
    let (s, body) = confirm(&app, &c).await;
    assert_eq!((s, body["error"]["code"].as_str()), (409, Some("conflict")));
    let (s, body) = app
        .admin(Method::POST, &format!("/v1/orders/{b}/cancel"), None)
        .await;
    assert_eq!(
        (s, body["state"].as_str()),
        (200, Some("expired")),
        "{body}"
    );
    // The allowance came back with the code: u2 wins again.
    let d = app.claim("h", "u2", 1).await;
    assert_eq!(d.outcome, Outcome::Won);
    // A confirmed order can still be cancelled; its code returns, and it is not confirmable.
    let (s, body) = app
        .admin(Method::POST, &format!("/v1/orders/{a}/cancel"), None)
        .await;
    assert_eq!(
        (s, body["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    let (s, _) = confirm(&app, &a).await;
    assert_eq!(s, 409, "a cancelled order is not confirmed again");
    assert_eq!(app.client.campaign("h").await.unwrap().remaining, 2);

    app.settle().await;
    let orders = app.client.all_orders("h").await.unwrap();
    let states: Vec<_> = orders.iter().map(|o| o.state).collect();
    use OrderState::*;
    assert_eq!(states, [Cancelled, Expired, Cancelled, Pending]);
    assert!(orders.iter().all(|o| o.pay_by.is_some()));
    // Nobody confirms d: the sweeper alone expires it at its deadline.
    until(d.pay_by.unwrap()).await;
    let v = until_nothing_pending(&app, "h").await;
    assert_eq!(v.remaining, 3);
    app.settle().await;
    assert_eq!(
        state_of(&app, &d.order_id.unwrap()).await,
        OrderState::Expired
    );

    // A campaign without holds: confirm is 400 and changes nothing; unknown orders are 404.
    app.create(json!({"id": "plain", "stock": 2})).await;
    let plain = app.claim("plain", "u1", 1).await;
    assert_eq!((plain.state, plain.pay_by), (None, None), "no hold fields");
    let plain = plain.order_id.unwrap();
    let (s, code) = app
        .refusal(Method::POST, &format!("/v1/orders/{plain}/confirm"), None)
        .await;
    assert_eq!((s, code.as_str()), (400, "invalid_request"));
    for unknown in ["h-99", "nope-1", "h-0", "h-x"] {
        let (s, code) = app
            .refusal(Method::POST, &format!("/v1/orders/{unknown}/confirm"), None)
            .await;
        assert_eq!((s, code.as_str()), (404, "not_found"), "{unknown}");
    }
    app.settle().await;
    assert_eq!(state_of(&app, &plain).await, OrderState::Active);
    let v = app.client.campaign("plain").await.unwrap();
    assert_eq!((v.remaining, v.holds), (1, None));
}
