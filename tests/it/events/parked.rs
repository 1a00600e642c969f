//! Events an endpoint refuses while it takes others (docs/EVENTS.md "Webhooks", a poison
//! event): parked with their order's later events, so only that order waits; dead letters, in
//! order, after the max age; a replay sends them in order; on every deployment.

use std::time::Duration;

use reqwest::Method;
use seckill::bench::client::Client;
use seckill::guard::secret::Secret;
use serde_json::{json, Value};

use super::receiver::{check_against_feed, Receiver};
use super::webhooks::{feed_of, ids, some_orders, wait_endpoint, with_webhook, SECRET};
use crate::helpers::App;

crate::conformance!(a_poison_event_holds_back_only_its_order_then_dies_and_a_replay_sends_it);

/// The feed once it holds `n` events (in scale-out, wins reach the ledger through the
/// pipeline, and the feed numbers them every 25 ms).
async fn feed_until(client: &Client, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let feed = feed_of(client).await;
        if feed.len() >= n || std::time::Instant::now() > deadline {
            return feed;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn a_poison_event_holds_back_only_its_order_then_dies_and_a_replay_sends_it(
    deploy: crate::helpers::Deploy,
) {
    let mut r = Receiver::start(SECRET, 204);
    // The receiver refuses every event of u0's order, and takes the others.
    r.run_with(204, &["--refuse-user", "u0"]);
    let app = App::spawn_tuned(deploy, |cfg| {
        cfg.delivery.webhooks = vec![r.url()];
        cfg.delivery.webhook_secret = Some(Secret::new(SECRET));
        cfg.delivery.webhook_max_age = Duration::from_secs(3);
        cfg.delivery.webhook_max_backoff = Duration::from_secs(1);
    })
    .await;
    some_orders(&app.client, "dl", 6).await;
    // campaign.created, six wins, two confirms (orders 0 and 3), two cancels (0 and 5).
    let feed = feed_until(&app.client, 11).await;
    assert_eq!(feed.len(), 11, "{feed:?}");
    let poisoned: Vec<Value> = feed
        .iter()
        .filter(|e| e["order"]["user_id"] == "u0")
        .cloned()
        .collect();
    assert!(
        poisoned.len() >= 2,
        "u0's order has a won and later events: {poisoned:?}"
    );
    let others: Vec<Value> = feed
        .iter()
        .filter(|e| e["order"]["user_id"] != "u0")
        .cloned()
        .collect();
    // The other orders go through at once, while u0's is refused.
    let got = r.wait_for_all(&ids(&others), Duration::from_secs(10)).await;
    check_against_feed(&got, &others);
    let e = wait_endpoint(&app, "u0's events dead", |e| {
        e["dead_letters"].as_u64() == Some(poisoned.len() as u64)
    })
    .await;
    assert_eq!(
        (e["backlog"].clone(), e["retrying"].clone()),
        (json!(0), json!(0)),
        "{e}"
    );
    assert!(e["last_error"].as_str().unwrap().contains("500"), "{e}");
    let id = e["id"].as_str().unwrap().to_owned();
    let (s, dead) = app
        .admin(
            Method::GET,
            &format!("/v1/webhooks/{id}/dead-letters"),
            None,
        )
        .await;
    assert_eq!(s, 200);
    let letters = dead["dead_letters"].as_array().unwrap();
    let events: Vec<Value> = letters.iter().map(|d| d["event"].clone()).collect();
    assert_eq!(
        events, poisoned,
        "u0's events, in order, as the feed shows them"
    );
    assert!(letters[0]["attempts"].as_u64().unwrap() >= 2, "{dead}");
    assert_eq!(letters[1]["attempts"], 0, "{dead}");
    // The receiver takes u0's events now: a replay sends them, in order.
    r.run(204);
    let (s, v) = app
        .admin(Method::POST, &format!("/v1/webhooks/{id}/replay"), None)
        .await;
    assert_eq!(
        (s, v["replaying"].as_u64()),
        (202, Some(poisoned.len() as u64))
    );
    wait_endpoint(&app, "dead letters replayed", |e| {
        e["dead_letters"] == 0 && e["retrying"] == 0
    })
    .await;
    check_against_feed(&r.received(), &feed);
    app.stop().await;
}

#[tokio::test]
async fn a_lone_refused_order_does_not_hold_back_the_next_one() {
    let mut r = Receiver::start(SECRET, 204);
    r.run_with(204, &["--refuse-user", "u0"]);
    let app = with_webhook(r.url(), |cfg| {
        cfg.delivery.webhook_max_backoff = Duration::from_secs(300);
    })
    .await;
    app.create(json!({"id": "lone", "stock": 5, "per_user_limit": 1}))
        .await;
    // u0's win is refused while it is the only event in flight: its order is parked, the
    // endpoint is not taken for down (which would wait out a backoff of up to 5 minutes).
    app.claim("lone", "u0", 1).await;
    // Refused four times by now: an endpoint taken for down would wait 8 s or more next.
    wait_endpoint(&app, "u0's order parked and retried", |e| {
        e["retrying"] == 1 && e["failed_attempts"].as_u64() >= Some(4)
    })
    .await;
    let started = std::time::Instant::now();
    app.claim("lone", "u1", 1).await;
    let feed = feed_of(&app.client).await;
    let others: Vec<Value> = feed
        .iter()
        .filter(|e| e["order"]["user_id"] != "u0")
        .cloned()
        .collect();
    r.wait_for_all(&ids(&others), Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "u1's win waited {:?}",
        started.elapsed()
    );
    app.stop().await;
}
