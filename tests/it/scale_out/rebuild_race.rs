//! Ledger first, gate second, for every scale-out admin change: restocks and cancels racing
//! rebuilds of the gate from the ledger (the rebuild reads one snapshot, and a cancel whose
//! campaign was rebuilt from an older snapshot releases again, so no code is ever in the pool
//! twice and no cancelled unit stays stuck); a status the gate never took is reconciled; a
//! restock Redis refused says it is saved and is applied once by its keyed retry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use seckill::domain::{OrderState, Outcome};
use seckill::engine::scale_out::Keys;

use crate::conformance::admin_keys::keyed;
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
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
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
            // A rebuild can delete the gate again between the cancel's commit and its
            // release: the answer then says the cancel is saved, and the retry applies it.
            let mut tries = 0;
            let (s, v) = loop {
                let (s, v) = app
                    .admin(Method::POST, &format!("/v1/orders/{o}/cancel"), None)
                    .await;
                tries += 1;
                let saved = v.to_string().contains("saved in the ledger");
                if s == 503 && saved && tries < 5 {
                    continue;
                }
                break (s, v);
            };
            assert_eq!((s, v["state"].as_str()), (200, Some("cancelled")), "{v}");
        }
    };
    let restocks = async {
        for i in 0..RESTOCKS {
            // As an operator would: a 503 saying the restock is saved (the gate vanished
            // before it could be read back) is retried with the same key, which adds nothing.
            let body = json!({"codes": [format!("R{i}")]});
            let mut tries = 0;
            let (s, v) = loop {
                let (s, v) = keyed(
                    &app,
                    "/v1/campaigns/rr/restock",
                    Some(body.clone()),
                    &format!("r{i}"),
                )
                .await;
                tries += 1;
                if s == 503 && v.to_string().contains("saved in the ledger") && tries < 5 {
                    continue;
                }
                break (s, v);
            };
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

/// A restock PostgreSQL committed but Redis refused: the 503 says it is saved (never "nothing
/// was changed"), and retries with the same Idempotency-Key apply it to the gate exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restock_saved_but_not_applied_is_said_and_retried_once() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "sf", "codes": ["A", "B"]})).await;
    for u in ["u1", "u2"] {
        assert_eq!(app.claim("sf", u, 1).await.outcome, Outcome::Won);
    }
    // The pool is empty (Redis removed the list); damage its key so restock.lua fails.
    let mut redis = redis::Client::open(app.redis[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let codes = Keys::new("sf").codes();
    let _: () = redis::cmd("SET")
        .arg(&codes)
        .arg("damaged")
        .query_async(&mut redis)
        .await
        .unwrap();
    let restock = |key: &'static str| {
        let client = app.client.clone();
        async move {
            let resp = client
                .http()
                .post(client.url("/v1/campaigns/sf/restock"))
                .bearer_auth(crate::helpers::TOKEN)
                .header("idempotency-key", key)
                .json(&json!({"codes": ["N1"]}))
                .send()
                .await
                .unwrap();
            let s = resp.status().as_u16();
            (s, resp.json::<serde_json::Value>().await.unwrap())
        }
    };
    for _ in 0..2 {
        let (s, v) = restock("rk").await;
        assert_eq!(s, 503, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("saved in the ledger"), "{message}");
        assert!(!message.contains("nothing was changed"), "{message}");
    }
    let _: () = redis::cmd("DEL")
        .arg(&codes)
        .query_async(&mut redis)
        .await
        .unwrap();
    for _ in 0..3 {
        let (s, v) = restock("rk").await;
        assert_eq!(
            (s, v["total"].as_u64(), v["remaining"].as_u64()),
            (200, Some(3), Some(1)),
            "{v}"
        );
    }
    let a = app.claim("sf", "u3", 1).await;
    assert_eq!(a.codes, Some(vec!["N1".to_owned()]));
    assert_eq!(app.claim("sf", "u4", 1).await.outcome, Outcome::SoldOut);
    converge(&app, &["sf".to_owned()]).await;
    app.stop().await;
}
