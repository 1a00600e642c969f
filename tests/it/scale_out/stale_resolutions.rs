//! Redis back from a snapshot whose numbering equals the ledger's, while the ledger saw a
//! confirm and a restock after the snapshot.
//!
//! Before, only the numbering was compared: nothing was rebuilt, the confirmed order expired
//! again at its pay_by and its code was sold a second time (the ledger then held `g-1
//! confirmed [GIFT-1]` and `g-2 pending [GIFT-1]`), and the restock stayed unsold until a
//! restart. Now a gate holding pending an order the ledger resolved is rebuilt, and every
//! campaign left in service takes the ledger's restocks, status and cancels.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{OrderState, Outcome};

use super::procs::Seckill;
use crate::helpers::settle_url;
use crate::servers::{pg, redis_raw, RedisServer};

async fn outcome(c: &Client, campaign: &str, user: &str) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.claim(campaign, user, 1, None).await.unwrap() {
            ClaimReply::Processed(a) => return a.outcome,
            other => {
                assert!(Instant::now() < deadline, "{user}: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gate_restored_from_before_a_confirm_and_a_restock_levels_with_the_ledger() {
    let mut redis = RedisServer::start(&["--appendonly", "no"]);
    let db = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let serve = Seckill::serve(&urls, &db, &[]);
    let c = serve.client();
    c.create_campaign(&json!({"id": "g", "codes": ["GIFT-1"], "hold_seconds": 2}))
        .await
        .unwrap();
    c.create_campaign(&json!({"id": "s", "stock": 1}))
        .await
        .unwrap();
    assert_eq!(outcome(&c, "g", "u1").await, Outcome::Won);
    settle_url(&c).await;
    let saved = redis_raw(redis.port, "SAVE").unwrap();
    assert!(saved.starts_with("+OK"), "SAVE: {saved}");
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    std::fs::copy(redis.dir().join("dump.rdb"), snapshot.path()).unwrap();

    let (s, body) = c
        .admin(Method::POST, "/v1/orders/g-1/confirm", None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 200, "{body}");
    let (s, body) = c
        .admin(
            Method::POST,
            "/v1/campaigns/s/restock",
            Some(&json!({"units": 2})),
        )
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 200, "{body}");
    settle_url(&c).await;

    tokio::task::block_in_place(|| {
        redis.kill_9();
        std::fs::copy(snapshot.path(), redis.dir().join("dump.rdb")).unwrap();
        redis.start_again();
    });
    // Past g-1's pay_by: a gate that still held it pending would have expired it by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        outcome(&c, "g", "u2").await,
        Outcome::SoldOut,
        "GIFT-1 is confirmed"
    );
    let sold = [
        outcome(&c, "s", "w1").await,
        outcome(&c, "s", "w2").await,
        outcome(&c, "s", "w3").await,
        outcome(&c, "s", "w4").await,
    ];
    assert_eq!(
        sold,
        [Outcome::Won, Outcome::Won, Outcome::Won, Outcome::SoldOut],
        "the restock sells"
    );
    settle_url(&c).await;
    let g = c.all_orders("g").await.unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0].state, OrderState::Confirmed);
}
