//! kill -9 of the primary behind Sentinel with two replicas, under load, while a payment
//! callback confirms held orders, the replicas stalled for the last 600 ms before the kill.
//!
//! Without the wait, what the primary answered in those 600 ms exists nowhere else: a `won`
//! or a confirm answered 200 then is lost when a replica is promoted (the unit sold again,
//! the order expired after its payment was captured). With `--redis-wait-replicas 1` (the default behind Sentinel) and two
//! replicas of one priority, an answer counts once a replica has it, and Sentinel promotes the
//! replica with the highest offset among those of the lowest priority: one that has every
//! answered change. The other replica is re-pointed to it, so waits keep being met and selling
//! goes on after the failover.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use seckill::bench::client::Client;

use super::sentinel_failover::{
    assert_confirms_kept, confirm_all, held_orders, serve, stop_storms, storm, wait_for,
    wait_for_promotion, CAMPAIGN,
};
use super::won_of;
use crate::helpers::{settle_url, TOKEN};
use crate::invariants;
use crate::servers::{pg, redis_raw, SentinelSetup};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_failover_with_two_replicas_keeps_every_win_and_confirm() {
    let mut redis = SentinelSetup::start_with(&[100]);
    let primary = redis.primary.port;
    wait_for("both replicas' first sync", || {
        redis_raw(primary, "INFO replication")
            .is_some_and(|r| r.matches("state=online").count() == 2)
    });
    let pg_url = pg().fresh_db().await;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve(&redis, &pg_url, da.path()).await;
    let b = serve(&redis, &pg_url, db.path()).await;
    let client_a = Client::new(&a.url(), TOKEN);
    let client_b = Client::new(&b.url(), TOKEN);
    client_a
        .create_campaign(&json!({"id": CAMPAIGN, "stock": 20_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let payers = held_orders(&client_a, 60).await;
    let held_at = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let storms = vec![
        storm(client_a.clone(), "a", next.clone(), stop.clone()),
        storm(client_b.clone(), "b", next.clone(), stop.clone()),
    ];
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Both replicas fall behind for 600 ms (SIGSTOP): whatever the primary takes then exists
    // nowhere else when it is killed. The payment callback confirms through A meanwhile.
    for r in std::iter::once(&redis.replica).chain(&redis.others) {
        r.signal(libc::SIGSTOP);
    }
    let confirms = tokio::spawn(confirm_all(client_a.clone(), payers));
    tokio::time::sleep(Duration::from_millis(600)).await;
    redis.primary.kill_9();
    for r in std::iter::once(&redis.replica).chain(&redis.others) {
        r.signal(libc::SIGCONT);
    }
    wait_for_promotion(&redis);
    // Selling goes on once the other replica follows the promoted one.
    let sold_before = next.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let answers = stop_storms(&stop, storms).await;
    settle_url(&client_a).await;
    settle_url(&client_b).await;
    let confirmed = confirms.await.unwrap();
    assert_confirms_kept(&client_a, held_at, &confirmed).await;
    let won = won_of(&answers);
    let won_after: usize = answers
        .iter()
        .filter(|(u, a)| {
            a.outcome == seckill::domain::Outcome::Won
                && u.split_once('-')
                    .and_then(|(_, n)| n.parse::<usize>().ok())
                    .is_some_and(|n| n > sold_before)
        })
        .count();
    eprintln!(
        "kill -9 failover, two replicas: {} of 60 confirms answered 200 and kept; {} claims \
         answered, {} won, {} of them after the promotion",
        confirmed.len(),
        answers.len(),
        won.len(),
        won_after
    );
    if confirmed.is_empty() || won_after == 0 {
        panic!(
            "{}\n{} confirms went through, {won_after} claims won after the promotion",
            redis.report(),
            confirmed.len()
        );
    }
    let view = client_a.campaign(CAMPAIGN).await.unwrap();
    let orders = client_a.all_orders(CAMPAIGN).await.unwrap();
    // No oversell, no code twice, per-user limits, every `won` in the ledger as answered.
    invariants::check(&view, &orders, &won, false);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
