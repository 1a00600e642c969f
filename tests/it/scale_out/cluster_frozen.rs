//! A consumer frozen across a Redis Cluster failover: it read orders from the old master, the
//! master died before its replica had them, the replica was promoted and checked against the
//! ledger without them, and it issued their order numbers to new buyers. Then the consumer
//! wakes and writes what it read. The ledger must refuse those writes — the failover lost them
//! — rather than the new buyers' orders: every `won` answered after the failover is that
//! buyer's order, and what the failover lost is in `failed_orders` as lost
//! (`ledger/postgres/lineage.rs`). Before, the frozen consumer's orders went in and every new
//! buyer given a reissued number was refused (the model's residual race,
//! `a_cluster_failover_checked_on_the_new_lineage_loses_no_later_buyers_order`).
//!
//! The freeze is real and deterministic: the orders are first read by a consumer that dies
//! (`dead`), then taken over by the worker, which stops itself (SIGSTOP) right after the
//! takeover, before it writes (`SECKILL_FAULTS=stop_after_reclaim`).

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;

use seckill::domain::{ClaimAnswer, Outcome};
use seckill::engine::scale_out::Keys;
use seckill::ledger::PgLedger;
use seckill::pipeline::LOST;

use super::cluster_failover::{claim_answered, claim_won, promote, stop_following, CAMPAIGN};
use super::procs::{stopped, wait_for, Seckill};
use crate::helpers::settle_url;
use crate::invariants;
use crate::servers::{pg, RedisCluster};

/// Wins the replica saw.
const BEFORE: usize = 10;
/// Wins the replica never had, read by the consumer that froze.
const UNSEEN: usize = 20;
/// New buyers after the failover.
const AFTER: usize = 100;

fn signal(pid: i32, sig: i32) {
    // SAFETY: a signal to a child this test started.
    unsafe { libc::kill(pid, sig) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_frozen_across_a_cluster_failover_writes_nothing_it_lost() {
    let mut cluster =
        RedisCluster::start_with_replicas(&["--appendonly", "yes", "--appendfsync", "always"]);
    let db = pg().fresh_db().await;
    let serve = Seckill::serve(&cluster.urls(), &db, &["--no-worker"]);
    let dir = tempfile::tempdir().unwrap();
    let arm = dir.path().join("stop-after-reclaim");
    let faults = format!("stop_after_reclaim={}", arm.display());
    let worker = Seckill::worker_env(
        &cluster.urls(),
        &db,
        &["--consumer", "w", "--reclaim-after-ms", "300"],
        &[("SECKILL_FAULTS", &faults)],
    );
    let client = serve.client();
    let spec = json!({"id": CAMPAIGN, "stock": 1000, "per_user_limit": 1});
    client.create_campaign(&spec).await.unwrap();
    let mut won: Vec<(String, ClaimAnswer)> = Vec::new();
    for i in 0..BEFORE {
        let user = format!("old{i}");
        won.push((user.clone(), claim_won(&client, &user).await));
    }
    settle_url(&client).await;

    // The worker stopped, the replica stopped following: the next wins exist on the master
    // alone, where a consumer reads them and dies.
    signal(worker.pid(), libc::SIGSTOP);
    let (master, replica) = cluster.serving(&format!("{{c:{CAMPAIGN}}}:meta"));
    stop_following(&cluster, master, replica);
    let mut unseen = HashSet::new();
    for i in 0..UNSEEN {
        let user = format!("unseen{i}");
        unseen.insert(claim_won(&client, &user).await.order_id.unwrap());
    }
    let mut conn = redis::Client::open(cluster.nodes[master].url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    super::read_as(&mut conn, &Keys::new(CAMPAIGN).orders(), "dead", 1000).await;

    // The worker takes the dead consumer's orders over and freezes before writing them.
    std::fs::write(&arm, b"").unwrap();
    signal(worker.pid(), libc::SIGCONT);
    let pid = worker.pid();
    wait_for(
        "the worker to freeze after its takeover",
        Duration::from_secs(60),
        || stopped(pid) && !arm.exists(),
    )
    .await;

    promote(&mut cluster, master, replica);
    // New buyers on the promoted node: it is checked against the ledger (which has only the
    // first wins) and issues the unseen wins' numbers again.
    let users: Vec<String> = (0..AFTER).map(|i| format!("new{i}")).collect();
    let answers: Vec<(String, Option<ClaimAnswer>)> = futures::stream::iter(users)
        .map(|user| {
            let client = client.clone();
            async move {
                let a = claim_answered(&client, &user).await;
                (user, a)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let after: Vec<(String, ClaimAnswer)> = answers
        .iter()
        .filter_map(|(u, a)| Some((u.clone(), a.clone()?)))
        .filter(|(_, a)| a.outcome == Outcome::Won)
        .collect();
    let reissued = after
        .iter()
        .filter(|(_, a)| unseen.contains(a.order_id.as_deref().unwrap()))
        .count();
    assert!(
        reissued > 0,
        "the promoted node issued none of the lost numbers again: the test did not reach the \
         race"
    );

    // The worker wakes and writes what it read from the dead master.
    signal(pid, libc::SIGCONT);
    let ledger = PgLedger::open(&db, 1).await.unwrap();
    wait_for_lost(&ledger, UNSEEN).await;
    settle_url(&client).await;

    won.extend(after.iter().cloned());
    let orders = client.all_orders(CAMPAIGN).await.unwrap();
    let missing = super::not_their_order(&won, &orders);
    let failed = ledger.failed_orders(CAMPAIGN).await.unwrap();
    eprintln!(
        "after the failover: {} wins ({reissued} on a number the failover lost), {} orders in \
         PostgreSQL, {} in failed_orders",
        after.len(),
        orders.len(),
        failed.len()
    );
    assert!(
        missing.is_empty(),
        "won answers not that buyer's order: {missing:?}"
    );
    let lost: HashSet<&str> = failed
        .iter()
        .filter(|(_, reason)| reason == LOST)
        .filter_map(|(id, _)| id.as_deref())
        .collect();
    assert_eq!(
        lost.len(),
        failed.len(),
        "failed_orders holds more than the lost wins: {failed:?}"
    );
    let expected: HashSet<&str> = unseen.iter().map(String::as_str).collect();
    assert_eq!(lost, expected, "the lost wins are the unseen ones");
    assert!(
        orders.iter().all(|o| !o.user_id.starts_with("unseen")),
        "a win the failover lost was written"
    );
    let view = client.campaign(CAMPAIGN).await.unwrap();
    invariants::check(&view, &orders, &won, false);
    drop(worker);
}

/// Waits until the ledger recorded `n` lost orders.
async fn wait_for_lost(ledger: &PgLedger, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let failed = ledger.failed_orders(CAMPAIGN).await.unwrap();
        if failed.len() >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the woken worker recorded {} of {n} lost wins: {failed:?}",
            failed.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
