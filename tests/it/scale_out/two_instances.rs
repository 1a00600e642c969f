//! Two `seckill serve` processes on one Redis and one PostgreSQL, hammered at once.

use seckill::load::{self, Shot};
use serde_json::json;

use super::procs::Seckill;
use super::{check_exact, won_of};
use crate::helpers::settle_url;
use crate::servers::{pg, RedisServer};

fn shots(n: usize, users: usize, salt: usize) -> Vec<Shot> {
    (0..n)
        .map(|i| Shot {
            user: format!("u{}", (i * 7 + salt) % users),
            qty: 1 + (i % 2) as u64,
            key: None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_share_one_gate_and_one_ledger() {
    let redis = RedisServer::start_aof();
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let a = Seckill::serve(&urls, &postgres, &[]);
    let b = Seckill::serve(&urls, &postgres, &[]);
    let (ca, cb) = (a.client(), b.client());
    ca.create_campaign(&json!({"id": "shared-stock", "stock": 500, "per_user_limit": 3}))
        .await
        .unwrap();
    let codes: Vec<String> = (0..300).map(|i| format!("SC-{i:04}")).collect();
    cb.create_campaign(&json!({"id": "shared-codes", "codes": codes, "per_user_limit": 2}))
        .await
        .unwrap();
    // 8,000 claims from 400 users (each on both instances), 128 in flight on each instance.
    let (ra, rb, rc, rd) = tokio::join!(
        load::storm(&ca, "shared-stock", shots(2000, 400, 0), 64),
        load::storm(&cb, "shared-stock", shots(2000, 400, 3), 64),
        load::storm(&ca, "shared-codes", shots(2000, 400, 1), 64),
        load::storm(&cb, "shared-codes", shots(2000, 400, 5), 64),
    );
    for r in [&ra, &rb, &rc, &rd] {
        assert_eq!(r.transport_errors, 0);
        assert!(r.refused.is_empty(), "refused: {:?}", r.refused);
    }
    settle_url(&ca).await;
    settle_url(&cb).await;
    for (campaign, reports, total) in [
        ("shared-stock", [&ra, &rb], 500),
        ("shared-codes", [&rc, &rd], 300),
    ] {
        let answers: Vec<_> = reports
            .iter()
            .flat_map(|r| r.answers.iter().map(|(s, a)| (s.user.clone(), a.clone())))
            .collect();
        let won = won_of(&answers);
        let units: u64 = won.iter().map(|(_, a)| a.qty.unwrap()).sum();
        assert_eq!(
            units, total,
            "{campaign}: exactly total units won across both instances"
        );
        assert!(
            reports.iter().all(|r| r.count("won") > 0),
            "both instances sold"
        );
        let sold_out_qty1 = answers
            .iter()
            .any(|(_, a)| a.outcome == seckill::domain::Outcome::SoldOut);
        check_exact(&ca, campaign, &won, sold_out_qty1).await;
        check_exact(&cb, campaign, &won, sold_out_qty1).await;
    }
}
