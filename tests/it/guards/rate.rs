//! Rate limits: bursts from one user or one IP are held to the configured rate (429s counted),
//! per campaign and globally; the client IP comes from a proxy header only for trusted peers.
//! Rates are per hour so nothing refills during a test.

use futures::future::join_all;
use reqwest::{Method, StatusCode};
use serde_json::json;

use seckill::config::ServeConfig;
use seckill::domain::Outcome;

use super::{claim_as, claim_raw};
use crate::helpers::{App, TOKEN};

/// Fires `n` concurrent claims from `users(i)` with `headers(i)`; returns (processed, 429s).
async fn burst(
    app_url: &str,
    campaign: &str,
    n: usize,
    users: impl Fn(usize) -> String,
    xff: impl Fn(usize) -> Option<String>,
) -> (usize, usize) {
    let answers = join_all((0..n).map(|i| {
        let (user, xff) = (users(i), xff(i));
        async move {
            let headers: Vec<(&str, &str)> = xff
                .as_deref()
                .map(|v| vec![("x-forwarded-for", v)])
                .unwrap_or_default();
            claim_raw(app_url, campaign, json!({"user_id": user}), &headers).await
        }
    }))
    .await;
    let ok = answers.iter().filter(|a| a.0 == StatusCode::OK).count();
    let limited: Vec<_> = answers
        .iter()
        .filter(|a| a.0 == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(ok + limited.len(), n, "only 200 or 429 expected");
    for (_, headers, body) in &limited {
        assert_eq!(body["error"]["code"], "rate_limited");
        let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry >= 1);
        assert_eq!(headers["ratelimit-remaining"], "0");
        assert!(headers.contains_key("ratelimit-reset"));
    }
    (ok, limited.len())
}

async fn put_limits(
    app: &App,
    campaign: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    app.admin(
        Method::PUT,
        &format!("/v1/campaigns/{campaign}/limits"),
        Some(body),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_user_burst_is_held_to_the_campaign_rate() {
    let app = App::spawn_with(|_| {}).await;
    app.create(json!({"id": "sale", "stock": 1000, "per_user_limit": 1000}))
        .await;
    let (s, v) = put_limits(&app, "sale", json!({"per_user": "5/h"})).await;
    assert_eq!((s, &v), (200, &json!({"per_user": "5/h", "per_ip": null})));
    let url = app.client.url("");
    let (ok, limited) = burst(&url, "sale", 60, |_| "scripter".into(), |_| None).await;
    assert_eq!((ok, limited), (5, 55));
    // The 429 names the policy; other users are untouched.
    let (_, h, _) = claim_raw(&url, "sale", json!({"user_id": "scripter"}), &[]).await;
    assert_eq!(h["ratelimit-limit"], "5");
    assert!(h["ratelimit-policy"]
        .to_str()
        .unwrap()
        .contains("campaign_per_user"));
    let (s, v) = claim_as(&url, "sale", "someone-else").await;
    assert_eq!((s, v["outcome"].as_str()), (StatusCode::OK, Some("won")));
    // Exactly the 5 processed claims became orders.
    let orders = app.client.all_orders("sale").await.unwrap();
    assert_eq!(orders.iter().filter(|o| o.user_id == "scripter").count(), 5);
    // Removing the limit lets the user in again.
    assert_eq!(put_limits(&app, "sale", json!({})).await.0, 200);
    assert_eq!(app.claim("sale", "scripter", 1).await.outcome, Outcome::Won);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_limits_per_ip_and_per_user() {
    let app = App::spawn_with(|c: &mut ServeConfig| {
        c.guard.rate_per_ip = Some("20/h".parse().unwrap());
        c.guard.rate_per_user = Some("3/h".parse().unwrap());
    })
    .await;
    app.create(json!({"id": "a", "stock": 1000, "per_user_limit": 10}))
        .await;
    app.create(json!({"id": "b", "stock": 1000, "per_user_limit": 10}))
        .await;
    let url = app.client.url("");
    // 100 distinct users from one IP: the IP's 20.
    let (ok, limited) = burst(&url, "a", 100, |i| format!("u{i}"), |_| None).await;
    assert_eq!((ok, limited), (20, 80));
    app.stop().await;

    // The per-user bucket is shared by every campaign.
    let app = App::spawn_with(|c: &mut ServeConfig| {
        c.guard.rate_per_user = Some("3/h".parse().unwrap());
    })
    .await;
    for id in ["a", "b"] {
        app.create(json!({"id": id, "stock": 1000, "per_user_limit": 10}))
            .await;
    }
    let url = app.client.url("");
    let (ok_a, _) = burst(&url, "a", 2, |_| "u1".into(), |_| None).await;
    let (ok_b, limited_b) = burst(&url, "b", 2, |_| "u1".into(), |_| None).await;
    assert_eq!((ok_a, ok_b, limited_b), (2, 1, 1));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proxy_header_is_believed_only_from_trusted_proxies() {
    for trusted in [false, true] {
        let app = App::spawn_with(|c: &mut ServeConfig| {
            if trusted {
                c.guard.trusted_proxy = vec!["127.0.0.0/8".parse().unwrap()];
            }
        })
        .await;
        app.create(json!({"id": "p", "stock": 1000, "per_user_limit": 10}))
            .await;
        let (s, _) = put_limits(&app, "p", json!({"per_ip": "2/h"})).await;
        assert_eq!(s, 200);
        let url = app.client.url("");
        // Ten clients behind the proxy, each its own address.
        let (ok, _) = burst(
            &url,
            "p",
            10,
            |i| format!("u{i}"),
            |i| Some(format!("203.0.113.{i}")),
        )
        .await;
        assert_eq!(ok, if trusted { 10 } else { 2 }, "trusted={trusted}");
        // One client forging its own header in front of the proxy's entry stays one client.
        let forged = |i: usize| Some(format!("198.51.100.{i}, 192.0.2.7"));
        let (ok, _) = burst(&url, "p", 10, |i| format!("v{i}"), forged).await;
        assert_eq!(ok, if trusted { 2 } else { 0 }, "trusted={trusted}");
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn campaign_limits_survive_a_restart_and_bad_ones_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || ServeConfig::ephemeral(dir.path().into(), TOKEN);
    let server = seckill::app::App::build(cfg()).await.unwrap();
    let client = seckill::bench::client::Client::new(&server.url(), TOKEN);
    client
        .create_campaign(&json!({"id": "keep", "stock": 100, "per_user_limit": 100}))
        .await
        .unwrap();
    let put = |body: serde_json::Value| {
        let client = client.clone();
        async move {
            client
                .admin(Method::PUT, "/v1/campaigns/keep/limits", Some(&body))
                .await
                .unwrap()
        }
    };
    let (s, _) = put(json!({"per_user": "2/h", "per_ip": "1000/h;burst=50"})).await;
    assert_eq!(s, 200);
    for bad in [
        json!({"per_user": "2/d"}),
        json!({"per_user": "0/s"}),
        json!({"per_usr": "2/h"}),
        json!({"per_user": 2}),
        json!([]),
    ] {
        let (s, v) = put(bad.clone()).await;
        assert_eq!(s, 400, "{bad} answered {v}");
        assert_eq!(v["error"]["code"], "invalid_request");
    }
    let (s, _) = client
        .admin(Method::PUT, "/v1/campaigns/nope/limits", Some(&json!({})))
        .await
        .unwrap();
    assert_eq!(s, 404);
    let anonymous = reqwest::Client::new()
        .put(client.url("/v1/campaigns/keep/limits"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    server.stop().await.unwrap();

    let server = seckill::app::App::build(cfg()).await.unwrap();
    let client = seckill::bench::client::Client::new(&server.url(), TOKEN);
    let (s, v) = client
        .admin(Method::GET, "/v1/campaigns/keep/limits", None)
        .await
        .unwrap();
    assert_eq!(
        (s.as_u16(), v),
        (200, json!({"per_user": "2/h", "per_ip": "1000/h;burst=50"}))
    );
    let (ok, limited) = burst(&server.url(), "keep", 6, |_| "u1".into(), |_| None).await;
    assert_eq!((ok, limited), (2, 4));
    server.stop().await.unwrap();
}

/// A flood of made-up user ids never locks a real buyer out: user buckets are charged only for
/// campaigns that exist, and a full table forgets its oldest buckets instead of refusing new
/// keys. Before, 3,000 fresh ids to a campaign that does not exist filled the 640-key table
/// and alice, bob and carol were answered 429 `capacity` for up to an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_fresh_user_ids_never_locks_out_a_real_buyer() {
    use seckill::bench::fire::{storm, Shot};
    let app = App::spawn_with(|c: &mut ServeConfig| {
        c.guard.rate_per_user = Some("1/h".parse().unwrap());
        c.guard.rate_max_keys = 640;
    })
    .await;
    app.create(json!({"id": "real", "stock": 10_000})).await;
    let fresh = |tag: &str| -> Vec<Shot> {
        (0..3000)
            .map(|i| Shot {
                user: format!("{tag}-{i}"),
                qty: 1,
                key: None,
            })
            .collect()
    };
    let made_up = storm(&app.client, "made-up", fresh("ghost"), 64).await;
    assert_eq!(
        made_up.refused.get(&404),
        Some(&3000),
        "{:?}",
        made_up.refused
    );
    let real = storm(&app.client, "real", fresh("spoof"), 64).await;
    assert_eq!(real.count("won"), 3000, "{:?}", real.refused);
    for buyer in ["alice", "bob", "carol"] {
        let (s, _, body) =
            claim_raw(&app.client.url(""), "real", json!({"user_id": buyer}), &[]).await;
        assert_eq!(s, StatusCode::OK, "{buyer}'s first claim: {body}");
        let (s, _, body) =
            claim_raw(&app.client.url(""), "real", json!({"user_id": buyer}), &[]).await;
        assert_eq!(
            s,
            StatusCode::TOO_MANY_REQUESTS,
            "{buyer}'s second claim: {body}"
        );
    }
}
