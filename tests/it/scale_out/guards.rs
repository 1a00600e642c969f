//! The guards across two real `seckill serve` processes sharing one Redis: rate limits hold
//! for the sum of both instances (one Redis script per request), and limits set through one
//! instance apply on the other.

use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::{Method, StatusCode};
use seckill::bench::client::{ClaimReply, Client};
use seckill::bench::fire::{self, Shot};
use seckill::domain::Outcome;
use serde_json::{json, Value};

use super::procs::Seckill;
use crate::guards::{claim_raw, sample};
use crate::servers::{pg, RedisServer};

/// Sets a campaign's limits through `via` and waits until `other` applies them too.
pub(super) async fn put_limits_everywhere(
    via: &Client,
    other: &Client,
    campaign: &str,
    limits: Value,
) {
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
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
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

fn shots(n: usize, users: usize, prefix: &str) -> Vec<Shot> {
    (0..n)
        .map(|i| Shot {
            user: format!("{prefix}{}", (i * 7) % users),
            qty: 1,
            key: None,
        })
        .collect()
}

fn series(name: &str, campaign: &str) -> String {
    format!("seckill_campaign_{name}_total{{campaign=\"{campaign}\"}}")
}

async fn won_once(c: &Client, campaign: &str, user: &str) -> bool {
    match c.claim(campaign, user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) => a.outcome == Outcome::Won,
        ClaimReply::Refused(s, body) => panic!("refused {s}: {body}"),
    }
}

/// Sold out across two instances: no further claim reaches Redis, holders still hear
/// `already_claimed`, and a restock through one instance sells on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sold_out_is_answered_from_memory_until_a_restock_reaches_every_instance() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let a = Seckill::serve(&urls, &postgres, &[]);
    let b = Seckill::serve(&urls, &postgres, &[]);
    let (ca, cb) = (a.client(), b.client());
    ca.create_campaign(&json!({"id": "flash", "stock": 10, "per_user_limit": 1}))
        .await
        .unwrap();
    // 3,000 claims of 1,000 users, half through each instance.
    let (ra, rb) = tokio::join!(
        fire::storm(&ca, "flash", shots(1500, 1000, "u"), 32),
        fire::storm(&cb, "flash", shots(1500, 1000, "u"), 32),
    );
    assert!(ra.refused.is_empty() && rb.refused.is_empty());
    let winners: Vec<String> = [&ra, &rb]
        .iter()
        .flat_map(|r| r.answers.iter())
        .filter(|(_, a)| a.outcome == Outcome::Won)
        .map(|(s, _)| s.user.clone())
        .collect();
    assert_eq!(winners.len(), 10, "exactly the stock was won");

    // A further burst of new users on both instances never reaches Redis.
    let engine = series("engine_claims", "flash");
    let fast = series("fast_sold_out", "flash");
    let before = [
        sample(&ca.url(""), &engine).await,
        sample(&cb.url(""), &engine).await,
    ];
    let (ra, rb) = tokio::join!(
        fire::storm(&ca, "flash", shots(300, 300, "late-a"), 16),
        fire::storm(&cb, "flash", shots(300, 300, "late-b"), 16),
    );
    assert_eq!((ra.count("sold_out"), rb.count("sold_out")), (300, 300));
    let after = [
        sample(&ca.url(""), &engine).await,
        sample(&cb.url(""), &engine).await,
    ];
    assert_eq!(after, before, "claims reached Redis after the sell-out");
    assert!(sample(&ca.url(""), &fast).await >= 300);
    assert!(sample(&cb.url(""), &fast).await >= 300);
    // A winner, on either instance, hears already_claimed, not the fast sold_out.
    for w in &winners {
        for c in [&ca, &cb] {
            let ClaimReply::Processed(answer) = c.claim("flash", w, 1, None).await.unwrap() else {
                panic!("refused")
            };
            assert_eq!(answer.outcome, Outcome::AlreadyClaimed, "winner {w}");
        }
    }

    // Restock through A; B sells within the bound (pub/sub, else the periodic re-read).
    let (s, body) = ca
        .admin(
            Method::POST,
            "/v1/campaigns/flash/restock",
            Some(&json!({"units": 3})),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{body}");
    let restocked = Instant::now();
    let mut tries = 0;
    while !won_once(&cb, "flash", &format!("after-{tries}")).await {
        tries += 1;
        assert!(
            restocked.elapsed() < Duration::from_secs(10),
            "instance B never saw the restock"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let delay = restocked.elapsed();
    eprintln!("restock seen by the other instance after {delay:?} ({tries} sold_out first)");
    // The rest of the restock sells too, and then nothing more.
    let (ra, rb) = tokio::join!(
        fire::storm(&ca, "flash", shots(100, 100, "again-a"), 8),
        fire::storm(&cb, "flash", shots(100, 100, "again-b"), 8),
    );
    assert_eq!(ra.count("won") + rb.count("won"), 2);

    // A lost announcement: the subscribers' connections are cut just before a restock, so
    // only the periodic re-read (every --stock-max-staleness-ms, 1 s here) can tell B.
    let mut raw = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .unwrap();
    let (s, body) = ca
        .admin(
            Method::POST,
            "/v1/campaigns/flash/restock",
            Some(&json!({"units": 1})),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{body}");
    let restocked = Instant::now();
    let mut tries = 0;
    while !won_once(&cb, "flash", &format!("lost-{tries}")).await {
        tries += 1;
        assert!(
            restocked.elapsed() < Duration::from_secs(10),
            "instance B never saw the unannounced restock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "unannounced restock seen by the other instance after {:?}",
        restocked.elapsed()
    );
}

/// On a Redis Cluster: a request's limiter buckets share one slot (one script, no CROSSSLOT),
/// and the sold-out fast path and a restock work as on one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guards_work_on_a_redis_cluster() {
    let app = crate::helpers::App::spawn(crate::helpers::Deploy::Cluster).await;
    let url = app.client.url("");
    app.create(json!({"id": "cl", "stock": 3, "per_user_limit": 1}))
        .await;
    let (s, v) = app
        .admin(
            Method::PUT,
            "/v1/campaigns/cl/limits",
            Some(json!({"per_user": "4/h", "per_ip": "1000/h"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let answers =
        join_all((0..30).map(|_| claim_raw(&url, "cl", json!({"user_id": "bot"}), &[]))).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.0.as_u16()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 4);
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 26);

    let mut sold_out = 0;
    for i in 0..20 {
        if app.claim("cl", &format!("u{i}"), 1).await.outcome == Outcome::SoldOut {
            sold_out += 1;
        }
    }
    assert_eq!(sold_out, 18, "bot won 1, u0 and u1 the other 2");
    let engine = series("engine_claims", "cl");
    let before = sample(&url, &engine).await;
    for i in 0..20 {
        let a = app.claim("cl", &format!("late{i}"), 1).await;
        assert_eq!(a.outcome, Outcome::SoldOut);
    }
    assert_eq!(sample(&url, &engine).await, before, "fast path");
    assert_eq!(
        app.claim("cl", "u0", 1).await.outcome,
        Outcome::AlreadyClaimed
    );
    let (s, _) = app
        .admin(
            Method::POST,
            "/v1/campaigns/cl/restock",
            Some(json!({"units": 1})),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(app.claim("cl", "after", 1).await.outcome, Outcome::Won);
}

/// Per-user rate buckets live in Redis in this deployment: claims for a campaign that does not
/// exist must not create them (a flood of made-up ids would fill Redis, and a Redis at
/// maxmemory refuses every claim). The instance re-reads every campaign id with the limits;
/// a real campaign is limited as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn made_up_campaigns_leave_no_rate_buckets_in_redis() {
    let redis = RedisServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = seckill::config::ServeConfig::ephemeral(dir.path().into(), crate::helpers::TOKEN);
    cfg.scale.redis = vec![redis.url()];
    cfg.scale.postgres = Some(pg().fresh_db().await);
    cfg.guard.rate_per_user = Some("1/h".parse().unwrap());
    let server = seckill::app::App::build(cfg)
        .await
        .expect("scale-out server");
    let c = Client::new(&server.url(), crate::helpers::TOKEN);
    c.create_campaign(&json!({"id": "real", "stock": 100}))
        .await
        .unwrap();
    // The campaign ids are re-read every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let keys = || {
        crate::servers::redis_raw(redis.port, "DBSIZE")
            .and_then(|r| r.trim().trim_start_matches(':').parse::<u64>().ok())
            .unwrap()
    };
    let before = keys();
    let shots = (0..500)
        .map(|i| Shot {
            user: format!("ghost-{i}"),
            qty: 1,
            key: None,
        })
        .collect();
    let made_up = fire::storm(&c, "made-up", shots, 32).await;
    assert_eq!(
        made_up.refused.get(&404),
        Some(&500),
        "{:?}",
        made_up.refused
    );
    assert_eq!(keys(), before, "no key was created for a made-up campaign");
    let first = claim_raw(&c.url(""), "real", json!({"user_id": "alice"}), &[]).await;
    assert_eq!(first.0, StatusCode::OK, "{:?}", first.2);
    let second = claim_raw(&c.url(""), "real", json!({"user_id": "alice"}), &[]).await;
    assert_eq!(second.0, StatusCode::TOO_MANY_REQUESTS, "{:?}", second.2);
    server.stop().await.unwrap();
}
