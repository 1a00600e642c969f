//! The sold-out fast path: exact winners under 10,000 concurrent claims, no engine calls once
//! sold out, and never an under-sell — a restock or cancel reopens the sale before it answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::join_all;
use reqwest::{Method, StatusCode};
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::bench::fire;
use seckill::domain::Outcome;

use super::{claim_as, engine_claims, sample, ServerProc};
use crate::helpers::{App, TOKEN};
use crate::invariants;

fn won(report: &fire::Report) -> Vec<(String, seckill::domain::ClaimAnswer)> {
    report
        .answers
        .iter()
        .filter(|(_, a)| a.outcome == Outcome::Won)
        .map(|(s, a)| (s.user.clone(), a.clone()))
        .collect()
}

/// 10,000 concurrent claims on stock 10 against the real binary (its own process, so the
/// 10,000 server-side sockets do not count against this test process's descriptors).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_concurrent_claims_on_stock_10() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProc::start(dir.path(), &["--max-in-flight", "20000"], "info");
    let client = Client::new(&server.url, TOKEN);
    client
        .create_campaign(&json!({"id": "ten", "stock": 10}))
        .await
        .unwrap();
    let report = fire::storm(&client, "ten", fire::distinct_users(10_000), 10_000).await;
    assert_eq!(report.transport_errors, 0);
    assert!(report.refused.is_empty(), "refused: {:?}", report.refused);
    assert_eq!(report.count("won"), 10);
    assert_eq!(report.count("sold_out"), 10_000 - 10);
    let view = client.campaign("ten").await.unwrap();
    let orders = client.all_orders("ten").await.unwrap();
    invariants::check(&view, &orders, &won(&report), true);

    // Sold out: the next 2,000 claims never reach the engine.
    let before = sample(&server.url, &engine_claims("ten")).await;
    assert!(before <= 10_000);
    let late: Vec<fire::Shot> = (0..2000)
        .map(|i| fire::Shot {
            user: format!("late-{i}"),
            qty: 1,
            key: None,
        })
        .collect();
    let report = fire::storm(&client, "ten", late, 500).await;
    assert_eq!(report.count("sold_out"), 2000);
    assert_eq!(sample(&server.url, &engine_claims("ten")).await, before);
    let fast = "seckill_campaign_fast_sold_out_total{campaign=\"ten\"}";
    assert!(sample(&server.url, fast).await >= 2000);
    // A winner still hears already_claimed (the engine's order of outcomes is kept).
    let winner = &orders[0].user_id;
    let (_, v) = claim_as(&server.url, "ten", winner).await;
    assert_eq!(v["outcome"], "already_claimed");
    assert_eq!(sample(&server.url, &engine_claims("ten")).await, before + 1);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restock_and_cancel_reopen_the_sale_before_they_answer() {
    let app = App::spawn_with(|_| {}).await;
    let url = app.client.url("");
    app.create(json!({"id": "re", "stock": 3})).await;
    for round in 0..20 {
        // Sell out, make sure the fast path is answering, then restock and claim at once.
        let mut n = 0;
        while app.claim("re", &format!("r{round}-{n}"), 1).await.outcome == Outcome::Won {
            n += 1;
        }
        let calls = sample(&url, &engine_claims("re")).await;
        assert_eq!(
            app.claim("re", &format!("r{round}-x"), 1).await.outcome,
            Outcome::SoldOut
        );
        assert_eq!(sample(&url, &engine_claims("re")).await, calls, "fast path");
        let (s, _) = app
            .admin(
                Method::POST,
                "/v1/campaigns/re/restock",
                Some(json!({"units": 2})),
            )
            .await;
        assert_eq!(s, 200);
        for k in 0..2 {
            let a = app.claim("re", &format!("r{round}-after-{k}"), 1).await;
            assert_eq!(
                a.outcome,
                Outcome::Won,
                "round {round}: unit {k} of the restock"
            );
        }
        // A cancel reopens it too.
        let orders = app.client.all_orders("re").await.unwrap();
        let last = orders
            .iter()
            .rev()
            .find(|o| o.state == seckill::domain::OrderState::Active);
        let cancel = format!("/v1/orders/{}/cancel", last.unwrap().order_id);
        assert_eq!(app.admin(Method::POST, &cancel, None).await.0, 200);
        let a = app.claim("re", &format!("r{round}-cancelled"), 1).await;
        assert_eq!(a.outcome, Outcome::Won, "round {round}: the cancelled unit");
    }
    let view = app.client.campaign("re").await.unwrap();
    let orders = app.client.all_orders("re").await.unwrap();
    invariants::check(&view, &orders, &[], true);
    app.stop().await;
}

/// A restock during a sold-out storm: every restocked unit sells, none is over-sold, and the
/// fast path never outlives the restock (at the end remaining is 0 again, not stuck above 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restock_during_a_sold_out_storm_sells_every_unit() {
    let app = App::spawn_with(|_| {}).await;
    app.create(json!({"id": "storm", "stock": 5})).await;
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..64)
        .map(|w| {
            let (client, stop) = (app.client.clone(), stop.clone());
            tokio::spawn(async move {
                let mut won = Vec::new();
                let mut i = 0;
                let mut sold_out_after_stop = false;
                while !sold_out_after_stop {
                    let stopping = stop.load(Ordering::SeqCst);
                    let user = format!("w{w}-{i}");
                    i += 1;
                    match client.claim("storm", &user, 1, None).await {
                        Ok(ClaimReply::Processed(a)) if a.outcome == Outcome::Won => {
                            won.push((user, a))
                        }
                        Ok(ClaimReply::Processed(a)) => {
                            assert_eq!(a.outcome, Outcome::SoldOut);
                            sold_out_after_stop = stopping;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                won
            })
        })
        .collect();
    for _ in 0..10 {
        let (s, _) = app
            .admin(
                Method::POST,
                "/v1/campaigns/storm/restock",
                Some(json!({"units": 3})),
            )
            .await;
        assert_eq!(s, 200);
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::SeqCst);
    let won: Vec<_> = join_all(workers)
        .await
        .into_iter()
        .flat_map(|w| w.unwrap())
        .collect();
    let view = app.client.campaign("storm").await.unwrap();
    assert_eq!(view.total, 35);
    assert_eq!(won.len(), 35, "every restocked unit sold");
    let orders = app.client.all_orders("storm").await.unwrap();
    invariants::check(&view, &orders, &won, true);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_and_sold_out_answers_paused() {
    let app = App::spawn_with(|_| {}).await;
    let url = app.client.url("");
    app.create(json!({"id": "pz", "stock": 1})).await;
    assert_eq!(app.claim("pz", "u1", 1).await.outcome, Outcome::Won);
    assert_eq!(app.claim("pz", "u2", 1).await.outcome, Outcome::SoldOut);
    app.admin(Method::POST, "/v1/campaigns/pz/pause", None)
        .await;
    assert_eq!(app.claim("pz", "u2", 1).await.outcome, Outcome::Paused);
    app.admin(Method::POST, "/v1/campaigns/pz/resume", None)
        .await;
    let (s, v) = claim_as(&url, "pz", "u3").await;
    assert_eq!(
        (s, v),
        (
            StatusCode::OK,
            json!({"outcome": "sold_out", "remaining": 0})
        )
    );
    // A keyed retry always gets its first answer from the engine.
    let first = app.claim_with_key("pz", "u4", 1, Some("k1")).await;
    assert_eq!(first.outcome, Outcome::SoldOut);
    app.stop().await;
}
