//! The guards across two real `seckill serve` processes sharing one Redis: rate limits hold
//! for the sum of both instances (one Redis script per request), and limits set through one
//! instance apply on the other.

use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::{Method, StatusCode};
use seckill::client::Client;
use serde_json::{json, Value};

use super::procs::Seckill;
use crate::guards::claim_raw;
use crate::servers::{pg, RedisServer};

/// Sets a campaign's limits through `via` and waits until `other` applies them too.
async fn put_limits_everywhere(via: &Client, other: &Client, campaign: &str, limits: Value) {
    let path = format!("/v1/campaigns/{campaign}/limits");
    let (s, stored) = via.admin(Method::PUT, &path, Some(&limits)).await.unwrap();
    assert_eq!(s, 200, "{stored}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, seen) = other.admin(Method::GET, &path, None).await.unwrap();
        if seen == stored {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "limits never reached the other instance"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fires `n` concurrent claims, alternately at `a` and `b`, from `user(i)`; returns
/// (processed, 429s) after checking every 429 carries Retry-After.
async fn burst_across(
    a: &Client,
    b: &Client,
    campaign: &str,
    n: usize,
    user: impl Fn(usize) -> String,
) -> (usize, usize) {
    let answers = join_all((0..n).map(|i| {
        let base = if i % 2 == 0 { a.url("") } else { b.url("") };
        let user = user(i);
        async move { claim_raw(&base, campaign, json!({"user_id": user}), &[]).await }
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
    }
    (ok, limited.len())
}

/// Rates are per hour so nothing refills during the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limits_hold_across_two_instances() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let a = Seckill::serve(&urls, &postgres, &[]);
    let b = Seckill::serve(&urls, &postgres, &[]);
    let (ca, cb) = (a.client(), b.client());
    for id in ["per-user", "per-ip"] {
        ca.create_campaign(&json!({"id": id, "stock": 1000, "per_user_limit": 1000}))
            .await
            .unwrap();
    }

    // One user's burst, half through each instance: 10 processed in all, not 10 per instance.
    put_limits_everywhere(&ca, &cb, "per-user", json!({"per_user": "10/h"})).await;
    let (ok, limited) = burst_across(&ca, &cb, "per-user", 80, |_| "scripter".into()).await;
    assert_eq!((ok, limited), (10, 70));
    let (s, _, _) = claim_raw(&cb.url(""), "per-user", json!({"user_id": "other"}), &[]).await;
    assert_eq!(s, StatusCode::OK, "another user is not limited");

    // One IP (this test's), many users, limits set through the other instance.
    put_limits_everywhere(&cb, &ca, "per-ip", json!({"per_ip": "8/h"})).await;
    let (ok, limited) = burst_across(&ca, &cb, "per-ip", 60, |i| format!("u{i}")).await;
    assert_eq!((ok, limited), (8, 52));

    // Every limiter key lives on the {rl} slot and carries a TTL.
    let mut raw = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{rl}:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(keys.len() >= 2, "limiter keys: {keys:?}");
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}
