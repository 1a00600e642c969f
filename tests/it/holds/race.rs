//! The race at the instant of `pay_by`: several clients confirm every order while the
//! deadlines pass and the sweeper expires, and a cancel client joins in. Each order must end
//! in exactly one state consistent with every answer, and the stock must add up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use parking_lot::Mutex;
use rand::seq::SliceRandom;
use reqwest::Method;
use serde_json::json;

use seckill::domain::{OrderState, Outcome};

use super::{clocked, until_nothing_pending};

/// A confirm's answer: order, status, the state its body showed.
type Answer = (String, u16, Option<String>);

const ORDERS: usize = 300;
const HOLD: u64 = 30;

/// The ledger's resolutions per order (`confirmed`/`expired` events), read from its file.
pub async fn resolutions(db: &std::path::Path, campaign: &str) -> HashMap<String, usize> {
    let url = format!("sqlite://{}?mode=ro", db.join("seckill.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.expect("ledger opens");
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT detail, count(*) FROM events WHERE campaign_id = ? \
         AND kind IN ('confirmed', 'expired') GROUP BY detail",
    )
    .bind(campaign)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows.into_iter().map(|(o, n)| (o, n as usize)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirms_racing_the_deadline_resolve_each_order_exactly_once() {
    let (app, clock) = clocked().await;
    app.create(json!({"id": "race", "stock": ORDERS, "per_user_limit": 1, "hold_seconds": HOLD}))
        .await;
    let first_claim = Instant::now();
    let won: Vec<String> = stream::iter(0..ORDERS)
        .map(|i| {
            let app = &app;
            async move {
                let a = app.claim("race", &format!("u{i}"), 1).await;
                assert_eq!(a.outcome, Outcome::Won);
                a.order_id.unwrap()
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    // Jump to 100 ms before the earliest deadline: the deadlines pass during the storm.
    let to = Duration::from_secs(HOLD) - first_claim.elapsed() - Duration::from_millis(100);
    clock.advance(to);

    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let mut tasks = Vec::new();
    for c in 0..4 {
        let (client, answers) = (app.client.clone(), answers.clone());
        let mut mine = won.clone();
        mine.shuffle(&mut rand::thread_rng());
        tasks.push(tokio::spawn(async move {
            for id in mine {
                let path = format!("/v1/orders/{id}/confirm");
                let (s, body) = client.admin(Method::POST, &path, None).await.unwrap();
                let state = body["state"].as_str().map(str::to_owned);
                answers.lock().push((id, s.as_u16(), state));
            }
            c
        }));
    }
    let cancels: Vec<String> = won.iter().step_by(10).cloned().collect();
    let cancel_task = {
        let client = app.client.clone();
        let cancels = cancels.clone();
        tokio::spawn(async move {
            for id in cancels {
                let path = format!("/v1/orders/{id}/cancel");
                let (s, body) = client.admin(Method::POST, &path, None).await.unwrap();
                assert_eq!(s.as_u16(), 200, "{body}");
                let state = body["state"].as_str().unwrap();
                assert!(["cancelled", "expired"].contains(&state), "{body}");
            }
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    cancel_task.await.unwrap();
    clock.advance(Duration::from_secs(HOLD + 5));
    let view = until_nothing_pending(&app, "race").await;

    let orders = app.client.all_orders("race").await.unwrap();
    assert_eq!(orders.len(), ORDERS);
    let final_state: HashMap<String, OrderState> = orders
        .iter()
        .map(|o| (o.order_id.clone(), o.state))
        .collect();
    let mut confirmed_ok: HashMap<&str, usize> = HashMap::new();
    let answers = std::mem::take(&mut *answers.lock());
    for (id, status, state) in answers.iter() {
        let fin = final_state[id.as_str()];
        match status {
            200 => {
                assert_eq!(state.as_deref(), Some("confirmed"));
                assert!(
                    matches!(fin, OrderState::Confirmed | OrderState::Cancelled),
                    "{id} was confirmed (200) but ended {fin:?}"
                );
                *confirmed_ok.entry(id).or_default() += 1;
            }
            409 => assert!(
                matches!(fin, OrderState::Expired | OrderState::Cancelled),
                "{id} was refused (409) but ended {fin:?}"
            ),
            other => panic!("confirm of {id} answered {other}"),
        }
    }
    for o in &orders {
        assert!(
            matches!(
                o.state,
                OrderState::Confirmed | OrderState::Expired | OrderState::Cancelled
            ),
            "{} ended {:?}",
            o.order_id,
            o.state
        );
        let pay_by = o.pay_by.expect("pay_by");
        match o.state {
            OrderState::Confirmed => {
                assert!(o.resolved_at.unwrap() < pay_by, "confirmed at/after pay_by");
                assert!(confirmed_ok.contains_key(o.order_id.as_str()));
            }
            OrderState::Expired => {
                assert!(o.resolved_at.unwrap() >= pay_by, "expired before pay_by");
                assert!(!confirmed_ok.contains_key(o.order_id.as_str()));
            }
            _ => assert!(cancels.contains(&o.order_id)),
        }
    }
    let confirmed = orders
        .iter()
        .filter(|o| o.state == OrderState::Confirmed)
        .count();
    assert_eq!(view.remaining as usize, ORDERS - confirmed, "stock exact");
    for (order, n) in resolutions(app.data_dir(), "race").await {
        assert_eq!(n, 1, "{order} resolved {n} times in the ledger");
    }
    let expired = orders
        .iter()
        .filter(|o| o.state == OrderState::Expired)
        .count();
    eprintln!(
        "race: {confirmed} confirmed, {expired} expired, {} cancelled, {} confirm answers",
        ORDERS - confirmed - expired,
        answers.len()
    );
}
