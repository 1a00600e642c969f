//! The sold-out board learns holder changes by version, not by count: a cancel followed at
//! once by a re-win leaves the number of holders unchanged, yet the other instance must hear
//! the new holder answer `already_claimed`, not the fast `sold_out`.

use std::time::{Duration, Instant};

use reqwest::Method;
use seckill::client::{ClaimReply, Client};
use seckill::domain::Outcome;
use serde_json::json;

use super::procs::Seckill;
use crate::helpers::settle_url;
use crate::servers::{pg, RedisServer};

async fn outcome(c: &Client, campaign: &str, user: &str) -> Outcome {
    match c.claim(campaign, user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) => a.outcome,
        ClaimReply::Refused(s, body) => panic!("refused {s}: {body}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_then_rewin_is_seen_by_the_other_instance() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    // The documented bound: a stale board outlives a change by --stock-max-staleness-ms.
    let a = Seckill::serve(&urls, &postgres, &["--stock-max-staleness-ms", "500"]);
    let b = Seckill::serve(&urls, &postgres, &["--stock-max-staleness-ms", "500"]);
    let (ca, cb) = (a.client(), b.client());
    ca.create_campaign(&json!({"id": "board", "stock": 2, "per_user_limit": 1}))
        .await
        .unwrap();
    let mut orders = Vec::new();
    for u in ["u1", "u2"] {
        let ClaimReply::Processed(a) = ca.claim("board", u, 1, None).await.unwrap() else {
            panic!("refused")
        };
        assert_eq!(a.outcome, Outcome::Won);
        orders.push(a.order_id.unwrap());
    }
    // B learns the campaign is sold out (and loads its holders).
    for i in 0..5 {
        assert_eq!(
            outcome(&cb, "board", &format!("late-{i}")).await,
            Outcome::SoldOut
        );
    }
    assert_eq!(outcome(&cb, "board", "u2").await, Outcome::AlreadyClaimed);
    settle_url(&ca).await;
    // Cut the announcements, so only B's periodic re-read can tell it what follows.
    let mut raw = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
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
            &format!("/v1/orders/{}/cancel", orders[0]),
            None,
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{body}");
    assert_eq!(outcome(&ca, "board", "u4").await, Outcome::Won);
    let rewon = Instant::now();
    let bound = Duration::from_millis(500 * 4 + 2000);
    loop {
        match outcome(&cb, "board", "u4").await {
            Outcome::AlreadyClaimed => break,
            Outcome::SoldOut => assert!(
                rewon.elapsed() < bound,
                "instance B still answers the new holder sold_out after {:?}",
                rewon.elapsed()
            ),
            other => panic!("unexpected {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "new holder known on the other instance after {:?}",
        rewon.elapsed()
    );
    // It stays known, and the campaign stays sold out for everyone else.
    for i in 0..5 {
        assert_eq!(outcome(&cb, "board", "u4").await, Outcome::AlreadyClaimed);
        assert_eq!(
            outcome(&cb, "board", &format!("later-{i}")).await,
            Outcome::SoldOut
        );
    }
}
