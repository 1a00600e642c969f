//! Order holds: confirm, cancel and expiry resolve each pending order once; the deadline
//! decides; bad input changes nothing. The tests in this file run embedded on a `ManualClock`
//! the tests move; `contract` runs the contract with real 2-second holds on every deployment,
//! `gate` the scale-out scripts against a real redis-server, `scale_out` two instances
//! racing their sweepers and a restart with overdue orders, `scale_out_crash` kill -9 of an
//! instance and the worker mid-expiry and the bench's holds preset on two instances.

mod burst;
mod codes;
mod contract;
mod crash;
mod gate;
mod payers;
mod race;
mod scale_out;
mod scale_out_crash;

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use seckill::bench::client::Client;
use seckill::clock::ManualClock;
use seckill::domain::{OrderState, Outcome};

use crate::helpers::App;

/// An embedded deployment on a clock the test moves.
pub async fn clocked() -> (App, Arc<ManualClock>) {
    let clock = ManualClock::new();
    let c = clock.clone();
    let app = App::spawn_with(move |cfg| cfg.clock = Some(c)).await;
    (app, clock)
}

/// Polls `GET /v1/campaigns/{id}` until `pending` is 0 (the sweeper ran); the view.
pub async fn until_nothing_pending(app: &App, id: &str) -> seckill::domain::CampaignView {
    nothing_pending(&app.client, id).await
}

/// [`until_nothing_pending`] through any client; a read refused for a moment (a deployment
/// coming back from a fault) is retried. Gives up after 30 s.
pub async fn nothing_pending(client: &Client, id: &str) -> seckill::domain::CampaignView {
    for _ in 0..1500 {
        if let Ok(v) = client.campaign(id).await {
            if v.holds.expect("a campaign with holds").pending == 0 {
                return v;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("pending orders of {id} were not expired within 30 s");
}

async fn confirm(app: &App, order_id: &str) -> (u16, Value) {
    app.admin(
        Method::POST,
        &format!("/v1/orders/{order_id}/confirm"),
        None,
    )
    .await
}

async fn state_of(app: &App, order_id: &str) -> OrderState {
    let o = app.client.order(order_id).await.unwrap().expect("order");
    o.state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_orders_confirm_once_expire_at_the_deadline_and_cancel_as_documented() {
    let (app, clock) = clocked().await;
    let v = app
        .create(json!({"id": "h", "stock": 3, "per_user_limit": 1, "hold_seconds": 60}))
        .await;
    let holds = v.holds.expect("the view shows holds");
    assert_eq!((holds.hold_seconds, holds.pending), (60, 0));

    let before = seckill::domain::now();
    let won = app.claim("h", "u1", 1).await;
    assert_eq!(won.outcome, Outcome::Won);
    assert_eq!(won.state, Some(OrderState::Pending));
    let pay_by = won.pay_by.expect("pay_by");
    let secs = (pay_by - before).num_milliseconds();
    assert!(
        (59_000..=61_000).contains(&secs),
        "pay_by {pay_by} is won + 60 s"
    );
    let a = won.order_id.unwrap();
    let v = app.client.campaign("h").await.unwrap();
    assert_eq!((v.remaining, v.holds.unwrap().pending), (2, 1));

    // Confirm, twice: the same confirmed order.
    let (s, first) = confirm(&app, &a).await;
    assert_eq!(s, 200, "{first}");
    assert_eq!(first["state"], "confirmed");
    assert!(first["pay_by"].as_str().is_some());
    let (s, again) = confirm(&app, &a).await;
    assert_eq!((s, &again), (200, &first));
    let v = app.client.campaign("h").await.unwrap();
    assert_eq!((v.remaining, v.holds.unwrap().pending), (2, 0));

    // A second order passes its deadline: the confirm is refused, the order is expired and
    // its unit and allowance are back.
    let b = app.claim("h", "u2", 1).await.order_id.unwrap();
    let c = app.claim("h", "u3", 1).await.order_id.unwrap();
    assert_eq!(app.claim("h", "u4", 1).await.outcome, Outcome::SoldOut);
    let (s, body) = app
        .admin(Method::POST, &format!("/v1/orders/{c}/cancel"), None)
        .await;
    assert_eq!((s, body["state"].as_str()), (200, Some("cancelled")));
    clock.advance(Duration::from_secs(61));
    let (s, body) = confirm(&app, &b).await;
    assert_eq!(s, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    assert_eq!(state_of(&app, &b).await, OrderState::Expired);
    let v = until_nothing_pending(&app, "h").await;
    assert_eq!(v.remaining, 2, "u2's and u3's units are back");
    // Resolved orders stay as they are.
    let (s, _) = confirm(&app, &b).await;
    assert_eq!(s, 409);
    let (s, body) = confirm(&app, &c).await;
    assert_eq!((s, body["error"]["code"].as_str()), (409, Some("conflict")));
    let (s, body) = app
        .admin(Method::POST, &format!("/v1/orders/{b}/cancel"), None)
        .await;
    assert_eq!((s, body["state"].as_str()), (200, Some("expired")));
    assert_eq!(app.client.campaign("h").await.unwrap().remaining, 2);
    // The allowance came back with the unit: u2 wins again.
    assert_eq!(app.claim("h", "u2", 1).await.outcome, Outcome::Won);
    // A confirmed order can still be cancelled; its unit returns.
    let (s, body) = app
        .admin(Method::POST, &format!("/v1/orders/{a}/cancel"), None)
        .await;
    assert_eq!((s, body["state"].as_str()), (200, Some("cancelled")));
    assert_eq!(app.client.campaign("h").await.unwrap().remaining, 2);

    // The listing shows state and pay_by.
    let orders = app.client.all_orders("h").await.unwrap();
    let states: Vec<_> = orders.iter().map(|o| o.state).collect();
    use OrderState::*;
    assert_eq!(states, [Cancelled, Expired, Cancelled, Pending]);
    assert!(orders.iter().all(|o| o.pay_by.is_some()));

    let text = app
        .client
        .http()
        .get(app.client.url("/metrics"))
        .bearer_auth(crate::helpers::TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("seckill_holds_confirmed_total 1"), "{text}");
    assert!(text.contains("seckill_holds_expired_total 1"), "{text}");
    // u2's second win is the one pending unit.
    assert_eq!(
        seckill::guard::metrics::sample(&text, r#"seckill_campaign_pending{campaign="h"}"#),
        Some(1),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_confirms_and_hold_seconds_are_refused_and_change_nothing() {
    let (app, _clock) = clocked().await;
    for bad in [json!(0), json!(86_401), json!(-1), json!("60"), json!(1.5)] {
        let (s, code) = app
            .refusal(
                Method::POST,
                "/v1/campaigns",
                Some(json!({"id": "x", "stock": 1, "hold_seconds": bad})),
            )
            .await;
        assert_eq!((s, code.as_str()), (400, "invalid_request"), "{bad}");
    }
    let (s, _) = app.admin(Method::GET, "/v1/campaigns/x", None).await;
    assert_eq!(s, 404, "nothing was created");
    app.create(json!({"id": "plain", "stock": 2})).await;
    app.create(json!({"id": "held", "stock": 2, "hold_seconds": 86_400}))
        .await;
    let plain = app.claim("plain", "u1", 1).await;
    assert_eq!((plain.state, plain.pay_by), (None, None), "no hold fields");
    let plain = plain.order_id.unwrap();
    let held = app.claim("held", "u1", 1).await.order_id.unwrap();
    let (s, code) = app
        .refusal(Method::POST, &format!("/v1/orders/{plain}/confirm"), None)
        .await;
    assert_eq!((s, code.as_str()), (400, "invalid_request"));
    assert_eq!(state_of(&app, &plain).await, OrderState::Active);
    for unknown in ["held-99", "nope-1", "held-0", "held-x"] {
        let (s, code) = app
            .refusal(Method::POST, &format!("/v1/orders/{unknown}/confirm"), None)
            .await;
        assert_eq!((s, code.as_str()), (404, "not_found"), "{unknown}");
    }
    let resp = app
        .client
        .http()
        .post(app.client.url(&format!("/v1/orders/{held}/confirm")))
        .bearer_auth("wrong-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let resp = app
        .client
        .http()
        .post(app.client.url(&format!("/v1/orders/{held}/confirm")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(state_of(&app, &held).await, OrderState::Pending);
    let v = app.client.campaign("held").await.unwrap();
    assert_eq!((v.remaining, v.holds.unwrap().pending), (1, 1));
    let v = app.client.campaign("plain").await.unwrap();
    assert_eq!(
        (v.remaining, v.holds),
        (1, None),
        "a plain view has no hold fields"
    );
}

/// A graceful restart keeps pending orders pending with their deadlines; one whose deadline
/// passed while the server was down is expired before the first claim is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_keeps_deadlines_and_expires_the_overdue_before_serving() {
    let (mut app, clock) = clocked().await;
    app.create(json!({"id": "r", "codes": ["K1", "K2"], "hold_seconds": 100}))
        .await;
    let a = app.claim("r", "u1", 1).await.order_id.unwrap();
    clock.advance(Duration::from_secs(50));
    let b = app.claim("r", "u2", 1).await.order_id.unwrap();
    assert_eq!(app.claim("r", "u3", 1).await.outcome, Outcome::SoldOut);
    app.restart().await;
    let v = app.client.campaign("r").await.unwrap();
    assert_eq!((v.remaining, v.holds.unwrap().pending), (0, 2));
    app.stop_keep().await;
    clock.advance(Duration::from_secs(60)); // a's deadline passes while down
    app.start_again().await;
    // The first request after the restart: a's code is already back.
    let won = app.claim("r", "u3", 1).await;
    assert_eq!(won.outcome, Outcome::Won, "{won:?}");
    assert_eq!(won.codes, Some(vec!["K1".to_string()]));
    assert_eq!(state_of(&app, &a).await, OrderState::Expired);
    let (s, _) = confirm(&app, &b).await;
    assert_eq!(s, 200, "b's deadline has not passed");
}
