//! A cancel the ledger saved while Redis was down is applied once Redis is back, without
//! anyone retrying it: found by `seckill chaos --seed 5 --deployment scale-out --only
//! redis-server --appendfsync everysec --storm 20s --faults 5` (schedules 0, 2 and 4 ended with
//! `remaining` below total − Σ active orders, and schedule 2 with units never sold again).

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::Outcome;

use super::procs::Seckill;
use crate::helpers::TOKEN;
use crate::servers::{pg, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_saved_during_a_redis_outage_reaches_the_gate() {
    let mut redis = RedisServer::start_aof();
    let db = pg().fresh_db().await;
    let server = Seckill::serve(&[redis.url()], &db, &[]);
    let c = Client::new(server.url.as_deref().unwrap(), TOKEN);
    c.create_campaign(&json!({"id": "co", "stock": 3, "per_user_limit": 1}))
        .await
        .unwrap();
    let won = match c.claim("co", "u1", 1, None).await.unwrap() {
        ClaimReply::Processed(a) if a.outcome == Outcome::Won => a.order_id.unwrap(),
        other => panic!("the first claim did not win: {other:?}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.order(&won).await.ok().flatten().is_none() {
        assert!(
            Instant::now() < deadline,
            "order {won} never reached the ledger"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    redis.kill_9();
    let (status, body) = c
        .admin(Method::POST, &format!("/v1/orders/{won}/cancel"), None)
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 503, "{body}");
    assert!(body.to_string().contains("saved"), "{body}");
    redis.start_again();

    // Nobody retries the cancel and no other admin change comes: the gate must still give the
    // unit back, and sell it.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(v) = c.campaign("co").await {
            if v.remaining == 3 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cancelled unit never came back: remaining {} of 3 with no active order",
                v.remaining
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for u in ["u2", "u3", "u4"] {
        match c.claim("co", u, 1, None).await.unwrap() {
            ClaimReply::Processed(a) => assert_eq!(a.outcome, Outcome::Won, "{u}: {a:?}"),
            other => panic!("{u}: {other:?}"),
        }
    }
}
