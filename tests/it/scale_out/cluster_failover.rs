//! A Redis Cluster master killed -9 while its replica had stopped following it, and the replica
//! promoted (`CLUSTER FAILOVER TAKEOVER`, as an operator or a failover after the node timeout
//! does): the promoted node holds the campaign as it was `UNSEEN` wins earlier, while
//! PostgreSQL already has those wins. Before anything is decided on that node, the campaign is
//! checked against the ledger on its new replication lineage and rebuilt (`engine/scale_out/
//! lineage.rs`): no order id is answered twice, no buyer who won before wins again, every
//! `won` answered afterwards is that buyer's order in PostgreSQL, nothing lands in
//! `failed_orders`. Without the check the first claims after the failover were answered `won`
//! with the order ids of the unseen wins, which the ledger then refused (the fault campaign's
//! Cluster deployment found it: seed 11, schedule 2).

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{ClaimAnswer, Outcome};
use seckill::ledger::PgLedger;

use super::procs::Seckill;
use crate::helpers::settle_url;
use crate::invariants;
use crate::servers::{pg, redis_raw, wait_until, RedisCluster};

pub(super) const CAMPAIGN: &str = "lag";
/// Wins the replica saw.
const BEFORE: usize = 20;
/// Wins while the replica was stopped: in PostgreSQL, not in the replica.
const UNSEEN: usize = 20;

pub(super) async fn claim_won(client: &Client, user: &str) -> ClaimAnswer {
    match client.claim(CAMPAIGN, user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) if a.outcome == Outcome::Won => a,
        other => panic!("{user} did not win before the failover: {other:?}"),
    }
}

/// Claims until answered (a 503 "nothing was changed" is retried); `None` if the outcome
/// stayed unknown.
pub(super) async fn claim_answered(client: &Client, user: &str) -> Option<ClaimAnswer> {
    for _ in 0..200 {
        match client.claim(CAMPAIGN, user, 1, None).await {
            Ok(ClaimReply::Processed(a)) => return Some(a),
            Ok(ClaimReply::Refused(status, body)) => {
                assert_eq!(status.as_u16(), 503, "{user}: {body}");
                let msg = body["error"]["message"].as_str().unwrap_or_default();
                if !msg.contains("nothing was changed") {
                    return None;
                }
            }
            Err(e) => panic!("{user}: no answer: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{user}: refused for 10 s after the failover");
}

/// Once the replica has everything the master wrote so far, it is stopped and its link cut,
/// so that not even bytes already in its socket reach it.
pub(super) fn stop_following(cluster: &RedisCluster, master: usize, replica: usize) {
    let (mport, rport) = (cluster.nodes[master].port, cluster.nodes[replica].port);
    let offset = |port: u16, field: &str| -> u64 {
        let info = redis_raw(port, "INFO replication").unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let written = offset(mport, "master_repl_offset");
    tokio::task::block_in_place(|| {
        wait_until("the replica to have the first writes", || {
            offset(rport, "slave_repl_offset") >= written
        })
    });
    cluster.nodes[replica].signal(libc::SIGSTOP);
    let cut = redis_raw(mport, "CLIENT KILL TYPE replica").unwrap_or_default();
    assert!(cut.starts_with(":1"), "CLIENT KILL TYPE replica: {cut}");
}

/// The master killed -9 and the stopped replica thawed and promoted at once.
pub(super) fn promote(cluster: &mut RedisCluster, master: usize, replica: usize) {
    let rport = cluster.nodes[replica].port;
    tokio::task::block_in_place(|| {
        cluster.nodes[master].kill_9();
        cluster.nodes[replica].signal(libc::SIGCONT);
        let taken = redis_raw(rport, "CLUSTER FAILOVER TAKEOVER").unwrap_or_default();
        assert!(
            taken.starts_with("+OK"),
            "CLUSTER FAILOVER TAKEOVER: {taken}"
        );
        wait_until("the promoted replica to serve", || {
            redis_raw(rport, "INFO replication").is_some_and(|r| r.contains("role:master"))
                && redis_raw(rport, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
        });
    });
}

/// A pause answered by the master alone (its replica stopped), then the replica promoted:
/// the promoted node still has the campaign active, the ledger has it paused. No claim may
/// win there: the check applies the ledger's status before the node serves (before, it was
/// left to the catch-up task, up to half a second later).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_the_promoted_replica_missed_still_holds() {
    let mut cluster =
        RedisCluster::start_with_replicas(&["--appendonly", "yes", "--appendfsync", "always"]);
    let db = pg().fresh_db().await;
    let serve = Seckill::serve(&cluster.urls(), &db, &[]);
    let client = serve.client();
    let spec = json!({"id": CAMPAIGN, "stock": 1000, "per_user_limit": 1});
    client.create_campaign(&spec).await.unwrap();
    claim_won(&client, "u0").await;
    settle_url(&client).await;
    let (master, replica) = cluster.serving(&format!("{{c:{CAMPAIGN}}}:meta"));
    stop_following(&cluster, master, replica);
    let path = format!("/v1/campaigns/{CAMPAIGN}/pause");
    let (status, body) = client
        .admin(reqwest::Method::POST, &path, None)
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 200, "{body}");
    promote(&mut cluster, master, replica);
    let port = cluster.nodes[replica].port;
    let status = redis_raw(port, &format!("HGET {{c:{CAMPAIGN}}}:meta status"));
    assert!(
        status.as_deref().is_some_and(|m| m.contains("active")),
        "the promoted replica should have missed the pause: {status:?}"
    );
    for i in 1..=50 {
        let user = format!("u{i}");
        // An outcome left unknown (sent as the master died) is asked again; had it won, its
        // order would show below.
        let a = loop {
            if let Some(a) = claim_answered(&client, &user).await {
                break a;
            }
        };
        assert_eq!(
            a.outcome,
            Outcome::Paused,
            "{user} claimed a paused campaign: {a:?}"
        );
    }
    settle_url(&client).await;
    assert_eq!(client.all_orders(CAMPAIGN).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_promoted_behind_the_ledger_reissues_no_order_id() {
    let mut cluster =
        RedisCluster::start_with_replicas(&["--appendonly", "yes", "--appendfsync", "always"]);
    let db = pg().fresh_db().await;
    let a = Seckill::serve(&cluster.urls(), &db, &[]);
    let b = Seckill::serve(&cluster.urls(), &db, &["--no-worker"]);
    let clients = [a.client(), b.client()];
    let spec = json!({"id": CAMPAIGN, "stock": 1000, "per_user_limit": 1});
    clients[0].create_campaign(&spec).await.unwrap();
    let mut won: Vec<(String, ClaimAnswer)> = Vec::new();
    for i in 0..BEFORE {
        let user = format!("old{i}");
        won.push((user.clone(), claim_won(&clients[i % 2], &user).await));
    }
    let (master, replica) = cluster.serving(&format!("{{c:{CAMPAIGN}}}:meta"));
    let (mport, rport) = (cluster.nodes[master].port, cluster.nodes[replica].port);
    let seq_at = |port: u16| redis_raw(port, &format!("GET {{c:{CAMPAIGN}}}:seq"));
    let level = format!("\r\n{BEFORE}\r\n");
    stop_following(&cluster, master, replica);
    for i in BEFORE..BEFORE + UNSEEN {
        let user = format!("old{i}");
        won.push((user.clone(), claim_won(&clients[i % 2], &user).await));
    }
    settle_url(&clients[0]).await;
    assert_eq!(
        clients[0].all_orders(CAMPAIGN).await.unwrap().len(),
        BEFORE + UNSEEN,
        "every win before the failover is in PostgreSQL"
    );
    assert!(seq_at(mport).is_some_and(|r| r.contains(&format!("\r\n{}\r\n", BEFORE + UNSEEN))));

    promote(&mut cluster, master, replica);
    // The promoted node missed the unseen wins (what this test is about).
    assert!(
        seq_at(rport).is_some_and(|r| r.contains(&level)),
        "the promoted replica holds {:?}",
        seq_at(rport)
    );

    // 400 claims from 16 at a time over both instances: the old buyers again, and new ones.
    let users: Vec<String> = (0..BEFORE + UNSEEN)
        .map(|i| format!("old{i}"))
        .chain((0..400 - BEFORE - UNSEEN).map(|i| format!("new{i}")))
        .collect();
    let answers: Vec<(String, Option<ClaimAnswer>)> = futures::stream::iter(users)
        .enumerate()
        .map(|(i, user)| {
            let client = clients[i % 2].clone();
            async move {
                let a = claim_answered(&client, &user).await;
                (user, a)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    settle_url(&clients[0]).await;

    let again: Vec<&str> = answers
        .iter()
        .filter(|(u, a)| {
            u.starts_with("old") && a.as_ref().is_some_and(|a| a.outcome == Outcome::Won)
        })
        .map(|(u, _)| u.as_str())
        .collect();
    let after: Vec<(String, ClaimAnswer)> = answers
        .iter()
        .filter_map(|(u, a)| Some((u.clone(), a.clone()?)))
        .filter(|(_, a)| a.outcome == Outcome::Won)
        .collect();
    let unknown: HashSet<&str> = answers
        .iter()
        .filter(|(_, a)| a.is_none())
        .map(|(u, _)| u.as_str())
        .collect();
    won.extend(after.iter().cloned());
    let orders = clients[0].all_orders(CAMPAIGN).await.unwrap();
    let missing = super::not_their_order(&won, &orders);
    let ids: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    let failed = PgLedger::open(&db, 1)
        .await
        .unwrap()
        .failed_orders(CAMPAIGN)
        .await
        .unwrap();
    eprintln!(
        "after the failover: {} wins, {} of unknown outcome, {} orders in PostgreSQL, {} in \
         failed_orders",
        after.len(),
        unknown.len(),
        orders.len(),
        failed.len()
    );
    assert!(again.is_empty(), "buyers at the limit won again: {again:?}");
    assert!(
        missing.is_empty(),
        "won answers not that buyer's order: {missing:?}"
    );
    assert_eq!(ids.len(), won.len(), "an order id was answered twice");
    assert!(failed.is_empty(), "the ledger refused orders: {failed:?}");
    assert!(!after.is_empty(), "nothing won after the failover");
    let view = clients[0].campaign(CAMPAIGN).await.unwrap();
    invariants::check(&view, &orders, &won, false);
    for o in orders.iter().filter(|o| !ids.contains(o.order_id.as_str())) {
        assert!(
            unknown.contains(o.user_id.as_str()),
            "order {} of {} exists, but its buyer was never told it won",
            o.order_id,
            o.user_id
        );
    }
}
