//! Redis Sentinel: the gate follows a failover from a killed primary to its replica.

use std::collections::HashSet;

use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::bench::fire;
use seckill::config::ServeConfig;

use super::won_of;
use crate::helpers::{settle_url, TOKEN};
use crate::invariants;
use crate::servers::{pg, SentinelSetup};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_to_the_replica_keeps_selling() {
    let mut redis = SentinelSetup::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::ephemeral(dir.path().into(), TOKEN);
    cfg.scale.redis = vec![redis.sentinel_url()];
    cfg.scale.redis_sentinel = Some(SentinelSetup::MASTER.into());
    cfg.scale.postgres = Some(pg().fresh_db().await);
    // Once the primary is killed the promoted replica has no replica of its own (this setup
    // does not bring the old primary back), so the default wait for one replica would refuse
    // every claim: this test is about following the failover, with that wait turned off.
    // Failovers with the wait on: `sentinel_failover` and `seckill chaos --deployment sentinel`.
    cfg.scale.pipeline.redis_wait_replicas = Some(0);
    let server = seckill::app::App::build(cfg)
        .await
        .expect("serve via Sentinel");
    let client = Client::new(&server.url(), TOKEN);
    client
        .create_campaign(&json!({"id": "failover", "stock": 100_000}))
        .await
        .unwrap();
    let before = fire::storm(&client, "failover", fire::distinct_users(1000), 64).await;
    assert_eq!(before.count("won"), 1000);
    settle_url(&client).await;
    redis.wait_replicated();

    redis.kill_primary_and_fail_over();
    let failed_over = std::time::Instant::now();
    // Requests fail until the gate has found the new primary; then they are answered again.
    let mut tried = HashSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut answers = Vec::new();
    while answers.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no claim answered after the failover"
        );
        let user = format!("retry-{}", tried.len());
        tried.insert(user.clone());
        if let Ok(ClaimReply::Processed(a)) = client.claim("failover", &user, 1, None).await {
            answers.push((user, a));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let took = failed_over.elapsed();
    eprintln!(
        "sentinel failover: first claim answered {took:?} after the sentinel named the new primary"
    );
    assert!(
        took <= std::time::Duration::from_secs(1),
        "the new primary served only {took:?} after the sentinel named it"
    );
    let shots = (0..1000)
        .map(|i| fire::Shot {
            user: format!("after-{i}"),
            qty: 1,
            key: None,
        })
        .collect();
    let after = fire::storm(&client, "failover", shots, 64).await;
    assert_eq!(
        after.count("won"),
        1000,
        "the new primary sells: {:?}",
        after.refused
    );
    settle_url(&client).await;

    answers.extend(
        before
            .answers
            .iter()
            .chain(&after.answers)
            .map(|(s, a)| (s.user.clone(), a.clone())),
    );
    let won = won_of(&answers);
    let view = client.campaign("failover").await.unwrap();
    let orders = client.all_orders("failover").await.unwrap();
    invariants::check(&view, &orders, &won, false);
    let answered: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    for o in orders
        .iter()
        .filter(|o| !answered.contains(o.order_id.as_str()))
    {
        assert!(
            tried.contains(&o.user_id),
            "order {} was never claimed",
            o.order_id
        );
    }
    server.stop().await.unwrap();
}
