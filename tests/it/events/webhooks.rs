//! Webhooks (docs/EVENTS.md "Webhooks"): every event of the feed reaches each endpoint at
//! least once, signed so that the Standard Webhooks reference implementation accepts it, with
//! the feed's id and body, each order's events in order; a receiver down for 30 s gets
//! everything once it is back; an endpoint down for the whole max age, or answering 410, is
//! disabled; the admin API refuses bad input. Refused events of one order: `parked.rs`.

use std::time::Duration;

use reqwest::Method;
use seckill::bench::client::Client;
use seckill::domain::EventQuery;
use seckill::guard::secret::Secret;
use serde_json::{json, Value};

use super::receiver::{check_against_feed, Receiver};
use crate::helpers::App;

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The whole feed through `client`, oldest first.
pub async fn feed_of(client: &Client) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let q = EventQuery {
            after: after.clone(),
            limit: Some(1000),
            ..EventQuery::default()
        };
        let (status, page) = client.events(&q).await.expect("the feed answers");
        assert_eq!(status, 200, "{page}");
        let got = page["events"].as_array().unwrap().clone();
        after = Some(page["next_cursor"].as_str().unwrap().to_owned());
        let done = got.len() < 1000;
        events.extend(got);
        if done {
            return events;
        }
    }
}

pub fn ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A campaign with holds, `n` wins, every third confirmed and every fifth cancelled.
pub async fn some_orders(client: &Client, campaign: &str, n: usize) {
    let spec = json!({"id": campaign, "stock": n, "per_user_limit": 1, "hold_seconds": 600});
    client
        .create_campaign(&spec)
        .await
        .expect("campaign created");
    let mut wins = Vec::new();
    for i in 0..n {
        let reply = client
            .claim(campaign, &format!("u{i}"), 1, None)
            .await
            .expect("claim sent");
        if let seckill::bench::client::ClaimReply::Processed(a) = reply {
            wins.extend(a.order_id);
        }
    }
    for (i, id) in wins.iter().enumerate() {
        if i % 3 == 0 {
            let (s, v) = client
                .admin(Method::POST, &format!("/v1/orders/{id}/confirm"), None)
                .await
                .unwrap();
            assert_eq!(s, 200, "{v}");
        }
        if i % 5 == 0 {
            let (s, v) = client
                .admin(Method::POST, &format!("/v1/orders/{id}/cancel"), None)
                .await
                .unwrap();
            assert_eq!(s, 200, "{v}");
        }
    }
}

pub(crate) async fn with_webhook(
    url: String,
    tune: impl FnOnce(&mut seckill::config::ServeConfig),
) -> App {
    App::spawn_with(|cfg| {
        cfg.delivery.webhooks = vec![url];
        cfg.delivery.webhook_secret = Some(Secret::new(SECRET));
        tune(cfg);
    })
    .await
}

#[tokio::test]
async fn every_event_reaches_each_endpoint_signed_as_the_standard_says() {
    let flag = Receiver::start(SECRET, 204);
    let app = with_webhook(flag.url(), |_| {}).await;
    // A second endpoint added through the API, with a secret of its own.
    let own = seckill::delivery::sign::Key::generate();
    let api = Receiver::start(&own, 204);
    let (s, created) = app
        .admin(
            Method::POST,
            "/v1/webhooks",
            Some(json!({"url": api.url(), "secret": own, "description": "shop"})),
        )
        .await;
    assert_eq!(s, 201, "{created}");
    assert_eq!(created["secret"], own.as_str());
    // Without a secret, one is generated and shown once.
    let (s, made) = app
        .admin(
            Method::POST,
            "/v1/webhooks",
            Some(json!({"url": "http://127.0.0.1:9/none"})),
        )
        .await;
    assert_eq!(s, 201, "{made}");
    assert!(
        seckill::delivery::sign::Key::parse(made["secret"].as_str().unwrap()).is_ok(),
        "{made}"
    );
    let (s, _) = app
        .admin(
            Method::DELETE,
            &format!("/v1/webhooks/{}", made["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(s, 204);
    some_orders(&app.client, "wh", 30).await;
    let feed = feed_of(&app.client).await;
    assert!(
        feed.len() >= 30 + 10 + 6,
        "the feed has the storm's events: {}",
        feed.len()
    );
    for r in [&flag, &api] {
        let got = r.wait_for_all(&ids(&feed), Duration::from_secs(30)).await;
        check_against_feed(&got, &feed);
    }
    // The listing shows both, caught up.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (s, list) = app.admin(Method::GET, "/v1/webhooks", None).await;
        assert_eq!(s, 200);
        let eps = list["endpoints"].as_array().unwrap();
        assert_eq!(eps.len(), 2, "{list}");
        assert!(
            eps.iter().all(|e| e.get("secret").is_none()),
            "a listing never shows secrets"
        );
        if eps
            .iter()
            .all(|e| e["backlog"] == 0 && e["delivered"].as_u64() >= Some(feed.len() as u64))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "endpoints not caught up: {list}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = crate::guards::metrics(&app.admin_url()).await;
    assert!(
        metrics.contains("seckill_sink_events_total{sink=\""),
        "{metrics}"
    );
    let (s, data) = app.admin(Method::GET, "/dashboard/data", None).await;
    assert_eq!(s, 200);
    let shown = data["sinks"].as_array().unwrap();
    assert_eq!(shown.len(), 2, "the dashboard shows both endpoints: {data}");
    assert!(
        shown
            .iter()
            .all(|k| k["kind"] == "webhook" && k["backlog"] == 0),
        "{data}"
    );
    app.stop().await;
}

#[tokio::test]
async fn bad_endpoints_are_refused_and_change_nothing() {
    let app = App::spawn_with(|_| {}).await;
    for body in [
        json!({"url": "ftp://example.com/x"}),
        json!({"url": "not a url"}),
        json!({"url": "http://127.0.0.1:9/x", "secret": "plain"}),
        json!({"url": "http://127.0.0.1:9/x", "secret": "whsec_AAAA"}),
        json!({"url": "http://127.0.0.1:9/x", "extra": 1}),
        json!({}),
    ] {
        let (s, v) = app
            .admin(Method::POST, "/v1/webhooks", Some(body.clone()))
            .await;
        assert_eq!(s, 400, "{body} → {v}");
        assert!(v["error"]["message"].as_str().is_some(), "{v}");
    }
    let (s, list) = app.admin(Method::GET, "/v1/webhooks", None).await;
    assert_eq!((s, list), (200, json!({"endpoints": []})));
    for (m, path) in [
        (Method::GET, "/v1/webhooks/whk_nope"),
        (Method::DELETE, "/v1/webhooks/whk_nope"),
        (Method::POST, "/v1/webhooks/whk_nope/enable"),
        (Method::POST, "/v1/webhooks/whk_nope/replay"),
        (Method::GET, "/v1/webhooks/whk_nope/dead-letters"),
    ] {
        let (s, v) = app.admin(m, path, None).await;
        assert_eq!(s, 404, "{path}: {v}");
    }
    app.stop().await;
}

pub(crate) async fn endpoint(app: &App) -> Value {
    let (s, list) = app.admin(Method::GET, "/v1/webhooks", None).await;
    assert_eq!(s, 200);
    list["endpoints"][0].clone()
}

pub(crate) async fn wait_endpoint(app: &App, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let e = endpoint(app).await;
        if done(&e) {
            return e;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_endpoint_down_for_the_whole_max_age_is_disabled() {
    let mut r = Receiver::start(SECRET, 204);
    r.stop();
    let app = with_webhook(r.url(), |cfg| {
        cfg.delivery.webhook_max_age = Duration::from_secs(3);
        cfg.delivery.webhook_max_backoff = Duration::from_secs(1);
    })
    .await;
    // First a lone event, which the deliverer reads in a batch of its own: refused without
    // an answer, it is the endpoint that is down, not that event's trouble (it once was
    // parked as a poison event, and then every later one too, until all were dead letters).
    app.client
        .create_campaign(&json!({"id": "alone", "stock": 1}))
        .await
        .expect("campaign created");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    some_orders(&app.client, "down", 3).await;
    let e = wait_endpoint(&app, "disabled", |e| e["state"] == "disabled").await;
    assert!(
        e["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("every delivery failed"),
        "{e}"
    );
    assert_eq!(
        (&e["dead_letters"], &e["retrying"]),
        (&json!(0), &json!(0)),
        "nothing is parked or dead-lettered for an endpoint that is down: {e}"
    );
    // Enabled again once the receiver is back, it gets the whole backlog.
    r.run(204);
    let id = e["id"].as_str().unwrap().to_owned();
    let (s, _) = app
        .admin(Method::POST, &format!("/v1/webhooks/{id}/enable"), None)
        .await;
    assert_eq!(s, 200);
    let feed = feed_of(&app.client).await;
    let got = r.wait_for_all(&ids(&feed), Duration::from_secs(30)).await;
    check_against_feed(&got, &feed);
    app.stop().await;
}

#[tokio::test]
async fn an_endpoint_answering_410_is_disabled_until_enabled_again() {
    let mut r = Receiver::start(SECRET, 410);
    let app = with_webhook(r.url(), |_| {}).await;
    some_orders(&app.client, "gone", 3).await;
    let e = wait_endpoint(&app, "disabled", |e| e["state"] == "disabled").await;
    assert!(
        e["disabled_reason"].as_str().unwrap().contains("410"),
        "{e}"
    );
    let id = e["id"].as_str().unwrap().to_owned();
    // Nothing moved: enabled again, it gets the whole backlog.
    r.run(204);
    let (s, v) = app
        .admin(Method::POST, &format!("/v1/webhooks/{id}/enable"), None)
        .await;
    assert_eq!((s, v["state"].as_str()), (200, Some("enabled")), "{v}");
    let feed = feed_of(&app.client).await;
    let got = r.wait_for_all(&ids(&feed), Duration::from_secs(30)).await;
    check_against_feed(&got, &feed);
    app.stop().await;
}

#[tokio::test]
async fn a_receiver_down_for_30_s_gets_everything_once_back() {
    let mut r = Receiver::start(SECRET, 204);
    let app = with_webhook(r.url(), |cfg| {
        cfg.delivery.webhook_max_backoff = Duration::from_secs(4);
    })
    .await;
    some_orders(&app.client, "before", 10).await;
    let first = feed_of(&app.client).await;
    r.wait_for_all(&ids(&first), Duration::from_secs(30)).await;
    r.stop();
    let down = std::time::Instant::now();
    // Orders keep coming while the receiver is down.
    while down.elapsed() < Duration::from_secs(30) {
        let c = format!("down{}", down.elapsed().as_secs());
        if app
            .client
            .create_campaign(&json!({"id": c, "stock": 5, "per_user_limit": 1}))
            .await
            .is_ok()
        {
            for i in 0..5 {
                let _ = app.client.claim(&c, &format!("u{i}"), 1, None).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let e = endpoint(&app).await;
    assert!(
        e["failing_since"].is_string(),
        "the listing shows the failure: {e}"
    );
    assert!(e["backlog"].as_u64().unwrap() > 0, "{e}");
    r.run(204);
    let feed = feed_of(&app.client).await;
    let got = r.wait_for_all(&ids(&feed), Duration::from_secs(30)).await;
    check_against_feed(&got, &feed);
    let e = wait_endpoint(&app, "caught up", |e| e["backlog"] == 0).await;
    assert!(e.get("failing_since").is_none(), "{e}");
    app.stop().await;
}
