//! A Redis Cluster of three masters: campaigns land on different masters (slots), every
//! script touches one slot, and the guarantees hold for each campaign under a storm.

use std::collections::HashSet;

use futures::future::join_all;
use serde_json::json;

use seckill::bench::fire;

use super::{check_exact, won_of};
use crate::helpers::{App, Deploy};
use crate::servers::redis_raw;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn campaigns_spread_over_cluster_slots_all_hold() {
    let app = App::spawn(Deploy::Cluster).await;
    let ids: Vec<String> = (0..6).map(|i| format!("slot-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let spec = if i % 2 == 0 {
            json!({"id": id, "stock": 40, "per_user_limit": 2})
        } else {
            let codes: Vec<String> = (0..40).map(|c| format!("{id}-C{c}")).collect();
            json!({"id": id, "codes": codes, "per_user_limit": 2})
        };
        app.create(spec).await;
    }
    let mut owners = HashSet::new();
    for id in &ids {
        let owner = app
            .redis
            .iter()
            .position(|url| {
                let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
                redis_raw(port, &format!("EXISTS {{c:{id}}}:meta"))
                    .is_some_and(|r| r.starts_with(":1"))
            })
            .expect("the campaign lives on one master");
        owners.insert(owner);
    }
    assert!(
        owners.len() >= 2,
        "campaigns spread over several masters: {owners:?}"
    );

    let storms = ids.iter().map(|id| {
        let shots = (0..300)
            .map(|i| fire::Shot {
                user: format!("u{}", i % 60),
                qty: 1,
                key: None,
            })
            .collect();
        fire::storm(&app.client, id, shots, 32)
    });
    let reports = join_all(storms).await;
    app.settle().await;
    for (id, r) in ids.iter().zip(&reports) {
        assert_eq!(r.count("won"), 40, "{id}");
        let answers: Vec<_> = r
            .answers
            .iter()
            .map(|(s, a)| (s.user.clone(), a.clone()))
            .collect();
        check_exact(&app.client, id, &won_of(&answers), true).await;
    }
    app.stop().await;
}

/// A fence a consumer left behind (it fenced a campaign and died) is lifted on a Cluster: the
/// campaign is rebuilt from the ledger and served again. The consumers looked for fences with
/// one pipeline across slots, which the cluster client refuses: such a campaign answered 503
/// for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fence_left_behind_is_lifted_on_a_cluster() {
    let app = App::spawn(Deploy::Cluster).await;
    for id in ["cf", "other-1", "other-2", "other-3"] {
        app.create(json!({"id": id, "stock": 10})).await;
    }
    assert_eq!(
        app.claim("cf", "u1", 1).await.outcome,
        seckill::domain::Outcome::Won
    );
    app.settle().await;
    let fenced = app.redis.iter().any(|url| {
        let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
        redis_raw(port, "HSET {c:cf}:meta fenced 1").is_some_and(|r| r.starts_with(':'))
    });
    assert!(fenced, "the campaign's master took the fence");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match app.client.claim("cf", "u2", 1, None).await.unwrap() {
            seckill::bench::client::ClaimReply::Processed(a) => {
                assert_eq!(a.outcome, seckill::domain::Outcome::Won);
                break;
            }
            other => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the fence was never lifted: {other:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    app.settle().await;
    assert_eq!(app.client.campaign("cf").await.unwrap().remaining, 8);
}
