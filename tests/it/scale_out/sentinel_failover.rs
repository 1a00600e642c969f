//! A graceful `SENTINEL FAILOVER` under load, with an instance (re)connecting meanwhile.
//!
//! Sentinel promotes the replica first and demotes the old primary only seconds later (when it
//! next sees it still claim the role). Meanwhile the old primary keeps accepting the writes of
//! the instances connected to it, while any instance that connects in that window is sent to
//! the new primary: two primaries selling one campaign, and the old one's writes are thrown
//! away when it is demoted. Found by `seckill chaos --deployment sentinel --seed 1` (schedule
//! 1: 19 units oversold). With `--redis-wait-replicas` (1 by default behind Sentinel) nothing
//! is answered `won` or moved into the ledger before a replica has it, and the old primary has
//! none once the replica is promoted: no oversell, and every `won` is in the ledger. Admin
//! changes made on the old primary in that window (a restock here) are not lost either, nor
//! are confirms answered 200 there (a payment callback captures the payment on that 200).
//!
//! With two replicas, `WAIT 1` used to be met by the replica still following the old primary
//! after the other was promoted: a won order missing from the ledger (`handover-2302` of 2,304
//! wins, seen once in two runs). Only replicas of the primary Sentinel names, outside a
//! failover, count now (`promotable.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::bench::fire;
use seckill::config::ServeConfig;
use seckill::domain::ClaimAnswer;

use super::won_of;
use crate::helpers::{settle_url, TOKEN};
use crate::invariants;
use crate::servers::{pg, redis_raw, SentinelSetup};

pub(super) const CAMPAIGN: &str = "handover";
pub(super) const PAID: &str = "paid";
pub(super) const HOLD_SECS: u64 = 20;

pub(super) async fn serve(
    redis: &SentinelSetup,
    pg_url: &str,
    dir: &std::path::Path,
) -> seckill::app::App {
    let mut cfg = ServeConfig::ephemeral(dir.into(), TOKEN);
    cfg.scale.redis = vec![redis.sentinel_url()];
    cfg.scale.redis_sentinel = Some(SentinelSetup::MASTER.into());
    cfg.scale.postgres = Some(pg_url.to_owned());
    seckill::app::App::build(cfg)
        .await
        .expect("serve via Sentinel")
}

/// Claims of fresh users on `client` in rounds of 32 until `stop`; every processed answer.
pub(super) fn storm(
    client: Client,
    prefix: &'static str,
    next: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(String, ClaimAnswer)>> {
    tokio::spawn(async move {
        let mut answers = Vec::new();
        while !stop.load(Ordering::Acquire) {
            let shots = (0..32)
                .map(|_| fire::Shot {
                    user: format!("{prefix}-{}", next.fetch_add(1, Ordering::Relaxed)),
                    qty: 1,
                    key: None,
                })
                .collect();
            let r = fire::storm(&client, CAMPAIGN, shots, 8).await;
            answers.extend(r.answers.into_iter().map(|(s, a)| (s.user, a)));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        answers
    })
}

pub(super) fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Returns once the sentinel names either replica as the primary.
pub(super) fn wait_for_promotion(redis: &SentinelSetup) {
    let replicas: Vec<String> = std::iter::once(&redis.replica)
        .chain(&redis.others)
        .map(|r| format!("\r\n{}\r\n", r.port))
        .collect();
    let master = format!("SENTINEL get-master-addr-by-name {}", SentinelSetup::MASTER);
    wait_for("the promotion of either replica", || {
        redis_raw(redis.sentinel_port, &master)
            .is_some_and(|r| replicas.iter().any(|p| r.contains(p)))
    });
}

/// Stops the storms; every answer they got.
pub(super) async fn stop_storms(
    stop: &AtomicBool,
    storms: Vec<tokio::task::JoinHandle<Vec<(String, ClaimAnswer)>>>,
) -> Vec<(String, ClaimAnswer)> {
    stop.store(true, Ordering::Release);
    let mut answers = Vec::new();
    for s in storms {
        answers.extend(s.await.unwrap());
    }
    answers
}

/// Past every hold's deadline (held at `held_at`), each order answered 200 to its confirm is
/// `confirmed` in the ledger: one lost by the failover would have expired by now.
pub(super) async fn assert_confirms_kept(c: &Client, held_at: Instant, confirmed: &[String]) {
    tokio::time::sleep(Duration::from_secs(HOLD_SECS + 1).saturating_sub(held_at.elapsed())).await;
    settle_url(c).await;
    let ledger = c.all_orders(PAID).await.unwrap();
    for id in confirmed {
        let state = ledger.iter().find(|o| &o.order_id == id).map(|o| o.state);
        assert_eq!(
            state,
            Some(seckill::domain::OrderState::Confirmed),
            "order {id} was answered 200 to its confirm"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_failover_neither_oversells_nor_loses_wins() {
    graceful_failover(SentinelSetup::start()).await;
}

/// With two replicas, `WAIT 1` was met by the replica not yet re-pointed to the promoted one
/// while it still followed the old primary: such wins (and confirms) were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_failover_with_two_replicas_keeps_every_win_and_confirm() {
    graceful_failover(SentinelSetup::start_with(&[100])).await;
}

/// Orders of buyers on a campaign with holds, to confirm during the failover.
pub(super) async fn held_orders(c: &Client, n: usize) -> Vec<String> {
    c.create_campaign(&json!({"id": PAID, "stock": n, "hold_seconds": HOLD_SECS}))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // Keyed: a retry after an unknown outcome learns it.
            let key = format!("payer-{i}");
            match c.claim(PAID, &key, 1, Some(&key)).await.unwrap() {
                ClaimReply::Processed(a) => {
                    ids.extend(a.order_id);
                    break;
                }
                // A replica a moment behind on a busy machine.
                ClaimReply::Refused(s, _) if s.as_u16() == 503 && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                other => panic!("payer-{i}: {other:?}"),
            }
        }
    }
    ids
}

/// Confirms each order through `c`, all at once, until it answers 200 or says the order is no
/// longer pending; the orders answered 200.
pub(super) async fn confirm_all(c: Client, ids: Vec<String>) -> Vec<String> {
    let tries = ids.into_iter().map(|id| {
        let c = c.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(HOLD_SECS);
            loop {
                let (status, body) = c
                    .admin(
                        reqwest::Method::POST,
                        &format!("/v1/orders/{id}/confirm"),
                        None,
                    )
                    .await
                    .unwrap();
                if status.as_u16() == 200 {
                    return Some(id);
                }
                if status.is_client_error() || Instant::now() > deadline {
                    eprintln!("confirm of {id}: {status} {body}");
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    futures::future::join_all(tries)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn graceful_failover(redis: SentinelSetup) {
    // The replica's first sync done: until then no claim can be acknowledged.
    let replica_port = redis.replica.port;
    wait_for("the replica's first sync", || {
        redis_raw(replica_port, "INFO replication")
            .is_some_and(|r| r.contains("master_link_status:up"))
    });
    let pg_url = pg().fresh_db().await;
    let (da, db, db2) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let a = serve(&redis, &pg_url, da.path()).await;
    let b = serve(&redis, &pg_url, db.path()).await;
    let client_a = Client::new(&a.url(), TOKEN);
    client_a
        .create_campaign(&json!({"id": CAMPAIGN, "stock": 20_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let payers = held_orders(&client_a, 60).await;
    let held_at = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut storms = vec![
        storm(client_a.clone(), "a", next.clone(), stop.clone()),
        storm(
            Client::new(&b.url(), TOKEN),
            "b",
            next.clone(),
            stop.clone(),
        ),
    ];
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let sentinel = redis.sentinel_port;
    let reply = redis_raw(
        sentinel,
        &format!("SENTINEL FAILOVER {}", SentinelSetup::MASTER),
    );
    assert!(
        reply.as_deref().is_some_and(|r| r.starts_with("+OK")),
        "{reply:?}"
    );
    // The payment callback confirms through A, connected to the old primary.
    let confirms = tokio::spawn(confirm_all(client_a.clone(), payers));
    wait_for_promotion(&redis);
    // B reconnects now (a restart): the sentinel sends it to the new primary while A is
    // still connected to the old one, which has not been demoted yet.
    let old = redis.primary.port;
    let still_primary = redis_raw(old, "ROLE").is_some_and(|r| r.contains("master"));
    b.stop().await.unwrap();
    let b2 = serve(&redis, &pg_url, db2.path()).await;
    storms.push(storm(
        Client::new(&b2.url(), TOKEN),
        "c",
        next.clone(),
        stop.clone(),
    ));
    eprintln!("old primary still a primary when B reconnected: {still_primary}");
    // A restock through A, which still talks to the old primary: the ledger commits it, the
    // old primary applies it and loses it when demoted. It must not be lost for good: without
    // a replica's acknowledgement it answers 503 (saved, not applied) and the catch-up applies
    // it to the new primary. (Found by `seckill chaos --deployment sentinel --seed 20261125`:
    // the gate's `remaining` 20 units short after failovers with admin changes in them.)
    // With an Idempotency-Key, retried while the answer says nothing was changed (Redis was
    // unreachable for a moment): a 200, or a 503 saying the restock is saved, ends it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = client_a
            .http()
            .post(client_a.url(&format!("/v1/campaigns/{CAMPAIGN}/restock")))
            .bearer_auth(TOKEN)
            .header("Idempotency-Key", "restock-in-the-window")
            .json(&json!({"units": 500}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        eprintln!("restock during the failover window: {status} {body}");
        if status.is_success() || body.contains("saved in the ledger") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restock never went through: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wait_for("the old primary's demotion", || {
        redis_raw(old, "ROLE").is_some_and(|r| r.contains("slave"))
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answers = stop_storms(&stop, storms).await;
    settle_url(&client_a).await;
    settle_url(&Client::new(&b2.url(), TOKEN)).await;

    // The restock reaches the new primary's gate (at once, or through the catch-up).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let total = client_a.campaign(CAMPAIGN).await.map(|v| v.total).ok();
        if total == Some(20_500) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restock made during the failover is lost from the gate: total {total:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let confirmed = confirms.await.unwrap();
    assert_confirms_kept(&client_a, held_at, &confirmed).await;
    eprintln!(
        "{} of 60 confirms answered 200 across the failover",
        confirmed.len()
    );
    let won = won_of(&answers);
    eprintln!(
        "graceful failover: {} claims answered, {} won",
        answers.len(),
        won.len()
    );
    assert!(!won.is_empty(), "nothing was sold");
    let view = client_a.campaign(CAMPAIGN).await.unwrap();
    let orders = client_a.all_orders(CAMPAIGN).await.unwrap();
    // No oversell, remaining consistent, no code twice, per-user limits, every `won` in the
    // ledger as answered.
    invariants::check(&view, &orders, &won, false);
    a.stop().await.unwrap();
    b2.stop().await.unwrap();
}
