//! Two `seckill serve` processes on one Redis and one PostgreSQL, hammered at once.

use seckill::bench::fire::{self, Shot};
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
        fire::storm(&ca, "shared-stock", shots(2000, 400, 0), 64),
        fire::storm(&cb, "shared-stock", shots(2000, 400, 3), 64),
        fire::storm(&ca, "shared-codes", shots(2000, 400, 1), 64),
        fire::storm(&cb, "shared-codes", shots(2000, 400, 5), 64),
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

/// Seed 001's scenario across instances: buyers race on one instance while the admin pauses
/// the campaign through the other; no claim sent after the pause answered wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_through_one_instance_stops_buyers_on_the_other() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use parking_lot::Mutex;
    use seckill::bench::client::ClaimReply;
    use seckill::domain::Outcome;

    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let (a, b) = (
        Seckill::serve(&urls, &postgres, &[]),
        Seckill::serve(&urls, &postgres, &[]),
    );
    let (admin, buyers) = (a.client(), b.client());
    admin
        .create_campaign(&json!({"id": "racing", "stock": 1_000_000}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let n = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let (client, stop, seen, n) = (buyers.clone(), stop.clone(), seen.clone(), n.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let user = format!("buyer-{}", n.fetch_add(1, Ordering::Relaxed));
                    let sent = Instant::now();
                    if let Ok(ClaimReply::Processed(a)) =
                        client.claim("racing", &user, 1, None).await
                    {
                        seen.lock().push((sent, a.outcome));
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = admin
        .admin(reqwest::Method::POST, "/v1/campaigns/racing/pause", None)
        .await
        .unwrap();
    let answered = Instant::now();
    assert_eq!((s.as_u16(), v["status"].as_str()), (200, Some("paused")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let seen = seen.lock();
    assert!(seen
        .iter()
        .any(|(t, o)| *t < answered && *o == Outcome::Won));
    let after: Vec<_> = seen.iter().filter(|(t, _)| *t > answered).collect();
    assert!(!after.is_empty(), "buyers kept claiming after the pause");
    assert!(
        after.iter().all(|(_, o)| *o == Outcome::Paused),
        "a claim sent after the pause answered did not get `paused`"
    );
}
