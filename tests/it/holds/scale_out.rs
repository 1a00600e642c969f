//! Holds across scale-out instances: two `seckill serve` processes on one Redis and one
//! PostgreSQL, confirms from several clients on both fired around `pay_by` while both
//! instances' sweepers expire; and a restart with orders that became overdue while no
//! instance ran.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::{stream, StreamExt};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use reqwest::Method;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{ClaimAnswer, OrderState, Outcome};

use crate::helpers::settle_url;
use crate::scale_out::procs::Seckill;
use crate::servers::{pg, RedisServer};

async fn won(c: &Client, campaign: &str, user: &str) -> ClaimAnswer {
    match c.claim(campaign, user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) => a,
        ClaimReply::Refused(s, b) => panic!("claim refused {s}: {b}"),
    }
}

const ORDERS: usize = 200;

/// Polls the instance's `seckill_campaign_pending{campaign=id}` until it equals the units
/// pending as the campaign view reports them (unchanged across the scrape); that value.
async fn pending_gauge_matches_the_view(c: &Client, id: &str) -> u64 {
    let series = format!("seckill_campaign_pending{{campaign=\"{id}\"}}");
    let pending = || async { c.campaign(id).await.unwrap().holds.expect("holds").pending };
    let mut last = None;
    for _ in 0..100 {
        let before = pending().await;
        let text = c
            .http()
            .get(c.url("/metrics"))
            .bearer_auth(crate::helpers::TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let gauge = seckill::guard::metrics::sample(&text, &series);
        if gauge == Some(before) && pending().await == before {
            return before;
        }
        last = Some((gauge, before));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{series} never matched the view's pending (last gauge, view: {last:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_confirm_and_expire_each_order_exactly_once() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let (a, b) = (
        Seckill::serve(&urls, &postgres, &[]),
        Seckill::serve(&urls, &postgres, &[]),
    );
    let clients = [a.client(), b.client()];
    let codes: Vec<String> = (0..ORDERS).map(|i| format!("H-{i:04}")).collect();
    clients[0]
        .create_campaign(&json!({"id": "race", "codes": codes, "hold_seconds": 2}))
        .await
        .unwrap();
    let orders: Vec<ClaimAnswer> = stream::iter(0..ORDERS)
        .map(|i| {
            let c = &clients[i % 2];
            async move { won(c, "race", &format!("u{i}")).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(orders
        .iter()
        .all(|o| o.outcome == Outcome::Won && o.pay_by.is_some()));
    let pay_by: HashMap<String, _> = orders
        .iter()
        .map(|o| (o.order_id.clone().unwrap(), o.pay_by.unwrap()))
        .collect();
    // Both instances export the gate's count of pending units (not their own share).
    for c in &clients {
        assert!(pending_gauge_matches_the_view(c, "race").await > 0);
    }
    let first = pay_by.values().min().unwrap();
    let wait = (*first - chrono::Utc::now() - chrono::Duration::milliseconds(300))
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait).await;

    // Four confirmers (two on each instance) and a canceller of every tenth order.
    let ids: Vec<String> = pay_by.keys().cloned().collect();
    let answers: Vec<(String, u16, Option<String>)> = stream::iter(0..5u64)
        .map(|seed| {
            let c = clients[seed as usize % 2].clone();
            let mut ids = ids.clone();
            async move {
                ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
                let cancel = seed == 4;
                let mut out = Vec::new();
                for o in ids {
                    if cancel && !o.ends_with('0') {
                        continue;
                    }
                    let op = if cancel { "cancel" } else { "confirm" };
                    let (s, body) = c
                        .admin(Method::POST, &format!("/v1/orders/{o}/{op}"), None)
                        .await
                        .unwrap();
                    let state = body["state"].as_str().map(str::to_owned);
                    if !cancel {
                        out.push((o, s.as_u16(), state));
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                out
            }
        })
        .buffer_unordered(5)
        .flat_map(stream::iter)
        .collect()
        .await;

    let v = super::nothing_pending(&clients[0], "race").await;
    assert_eq!(pending_gauge_matches_the_view(&clients[1], "race").await, 0);
    settle_url(&clients[0]).await;
    settle_url(&clients[1]).await;
    let ledger = clients[1].all_orders("race").await.unwrap();
    assert_eq!(ledger.len(), ORDERS);
    let by_id: HashMap<String, _> = ledger.iter().map(|o| (o.order_id.clone(), o)).collect();
    let mut confirmed = 0;
    let mut live_codes = HashSet::new();
    for o in &ledger {
        let due = pay_by[&o.order_id];
        assert_eq!(o.pay_by, Some(due));
        match o.state {
            OrderState::Confirmed => {
                confirmed += 1;
                assert!(o.resolved_at.unwrap() < due, "{o:?}");
                for c in o.codes.clone().unwrap() {
                    assert!(live_codes.insert(c), "a code in two live orders");
                }
            }
            OrderState::Expired => assert!(o.resolved_at.unwrap() >= due, "{o:?}"),
            OrderState::Cancelled => assert!(o.order_id.ends_with('0'), "{o:?}"),
            s => panic!("{} ended {s:?}", o.order_id),
        }
    }
    let (mut ok, mut refused) = (0, 0);
    for (o, status, state) in &answers {
        let end = by_id[o].state;
        match status {
            200 => {
                ok += 1;
                assert_eq!(state.as_deref(), Some("confirmed"));
                // Every tenth order may be cancelled after its confirm (cancel takes
                // confirmed orders too).
                let cancelled_later = end == OrderState::Cancelled && o.ends_with('0');
                assert!(
                    end == OrderState::Confirmed || cancelled_later,
                    "{o}: {end:?}"
                );
            }
            409 => {
                refused += 1;
                assert!(
                    matches!(end, OrderState::Expired | OrderState::Cancelled),
                    "{o}"
                );
            }
            s => panic!("confirm of {o} answered {s}"),
        }
    }
    assert!(
        ok > 0 && refused > 0,
        "the confirms did not race the deadlines"
    );
    assert!(confirmed > 0 && confirmed < ORDERS);
    assert_eq!(v.remaining as usize, ORDERS - confirmed, "stock exact");
    // No transition contradicted PostgreSQL's row (each applied once, in order).
    let pool = sqlx::PgPool::connect(&postgres).await.unwrap();
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM failed_orders")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(failed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orders_overdue_while_no_instance_ran_expire_before_the_first_claim() {
    let redis = RedisServer::start_aof();
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let mut a = Seckill::serve(&urls, &postgres, &[]);
    let c = a.client();
    c.create_campaign(&json!({"id": "r", "codes": ["K1", "K2"], "hold_seconds": 1}))
        .await
        .unwrap();
    let x = won(&c, "r", "u1").await;
    let y = won(&c, "r", "u2").await;
    assert_eq!(won(&c, "r", "u3").await.outcome, Outcome::SoldOut);
    settle_url(&c).await;
    a.sigkill();
    let due = x.pay_by.unwrap().max(y.pay_by.unwrap());
    tokio::time::sleep((due - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = Seckill::serve(&urls, &postgres, &[]);
    let c = b.client();
    // The very first request: a returned code is already there.
    let first = won(&c, "r", "u3").await;
    assert_eq!(first.outcome, Outcome::Won, "{first:?}");
    assert!(
        b.log_text().contains("expired at start"),
        "{}",
        b.log_text()
    );
    settle_url(&c).await;
    for o in [x, y] {
        let o = c.order(&o.order_id.unwrap()).await.unwrap().unwrap();
        assert_eq!(o.state, OrderState::Expired);
    }
}
