//! Restocks and cancels racing rebuilds of the gate from the ledger: the rebuild reads one
//! snapshot, and a cancel whose campaign was rebuilt from an older snapshot releases again, so
//! no code is ever in the pool twice and no cancelled unit stays stuck.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use seckill::domain::{OrderState, Outcome};
use seckill::engine::redis::Keys;

use crate::conformance::dropped::converge;
use crate::helpers::{App, Deploy};

const CODES: usize = 120;
const CANCELS: usize = 80;
const RESTOCKS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restock_and_cancel_racing_a_rebuild() {
    let app = App::spawn(Deploy::ScaleOut).await;
    let codes: Vec<String> = (0..CODES).map(|i| format!("C{i}")).collect();
    app.create(json!({"id": "rr", "codes": codes})).await;
    let mut orders = Vec::new();
    for i in 0..CODES {
        let a = app.claim("rr", &format!("u{i}"), 1).await;
        assert_eq!(a.outcome, Outcome::Won);
        orders.push(a.order_id.unwrap());
    }
    app.settle().await;
    let mut redis = redis::Client::open(app.redis[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let rebuilds = {
        let (stop, client) = (stop.clone(), app.client.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let _: i64 = redis::cmd("DEL")
                    .arg(Keys::new("rr").meta())
                    .query_async(&mut redis)
                    .await
                    .unwrap();
                client.campaign("rr").await.expect("rebuilt on read");
                n += 1;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            n
        })
    };
    let cancels = async {
        for o in &orders[..CANCELS] {
            let (s, v) = app
                .admin(Method::POST, &format!("/v1/orders/{o}/cancel"), None)
                .await;
            assert_eq!((s, v["state"].as_str()), (200, Some("cancelled")), "{v}");
        }
    };
    let restocks = async {
        for i in 0..RESTOCKS {
            let (s, v) = app
                .admin(
                    Method::POST,
                    "/v1/campaigns/rr/restock",
                    Some(json!({"codes": [format!("R{i}")]})),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        }
    };
    tokio::join!(cancels, restocks);
    stop.store(true, Ordering::Relaxed);
    let n = rebuilds.await.unwrap();
    eprintln!("{n} rebuilds raced the cancels and restocks");
    let views = converge(&app, &["rr".to_owned()]).await;
    let free = (CANCELS + RESTOCKS) as u64;
    assert_eq!(
        views["rr"],
        (CODES as u64 + RESTOCKS as u64, free, "active".to_owned())
    );
    // Exactly the free codes sell, each once, then nothing.
    for i in 0..=free {
        let a = app.claim("rr", &format!("late-{i}"), 1).await;
        let want = if i < free {
            Outcome::Won
        } else {
            Outcome::SoldOut
        };
        assert_eq!(a.outcome, want, "late claim {i}: {a:?}");
    }
    app.settle().await;
    let all = app.client.all_orders("rr").await.unwrap();
    let mut held: Vec<String> = all
        .iter()
        .filter(|o| o.state == OrderState::Active)
        .flat_map(|o| o.codes.clone().unwrap_or_default())
        .collect();
    let sold = CODES + RESTOCKS;
    assert_eq!(held.len(), sold);
    held.sort();
    held.dedup();
    assert_eq!(held.len(), sold, "a code was handed out twice");
    app.stop().await;
}

/// A status change the ledger committed but the gate never took (the process died between
/// the two writes) is applied by `reconcile` at the next start, in either direction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_committed_but_not_applied_is_reconciled() {
    let mut app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "sr", "stock": 10})).await;
    let ledger = seckill::ledger::PgLedger::open(app.postgres.as_deref().unwrap(), 1)
        .await
        .unwrap();
    for (status, outcome) in [
        (seckill::domain::Status::Paused, Outcome::Paused),
        (seckill::domain::Status::Active, Outcome::Won),
    ] {
        let (mut tx, _) = ledger.lock_campaign("sr").await.unwrap();
        seckill::ledger::PgLedger::write_status(&mut tx, "sr", status, chrono::Utc::now())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_ne!(app.client.campaign("sr").await.unwrap().status, status);
        app.restart().await;
        assert_eq!(app.client.campaign("sr").await.unwrap().status, status);
        let user = format!("after-{}", status.as_str());
        assert_eq!(app.claim("sr", &user, 1).await.outcome, outcome);
    }
    app.stop().await;
}
