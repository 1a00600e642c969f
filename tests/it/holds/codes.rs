//! A code campaign with thousands of pending orders on staggered deadlines: expired codes go
//! back to the pool and are won again by other users, while a checker reads the ledger the
//! whole time and finds no code (and no user) in two live orders in any snapshot.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{stream, StreamExt};
use reqwest::Method;
use serde_json::json;

use seckill::config::SyncMode;
use seckill::domain::{ClaimAnswer, OrderState, Outcome};

use crate::helpers::App;

const CODES: usize = 10_000;
const WAVES: usize = 5;
const HOLD: u64 = 500;
/// Engine-clock time between waves: far more than a wave takes in real time.
const STEP: Duration = Duration::from_secs(100);
/// Every CONFIRM_EVERY-th order of a wave is confirmed (paid); the rest expire.
const CONFIRM_EVERY: usize = 4;

/// Live orders of `campaign` in one read of the ledger: no code and no user twice.
async fn check_snapshot(pool: &sqlx::SqlitePool) -> usize {
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT user_id, codes FROM orders WHERE campaign_id = 'pool' \
         AND state IN ('active', 'pending', 'confirmed')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut codes = HashSet::new();
    let mut users = HashSet::new();
    for (user, c) in &rows {
        assert!(users.insert(user.clone()), "{user} holds two live orders");
        let c: Vec<String> = serde_json::from_str(c.as_deref().unwrap()).unwrap();
        for code in c {
            assert!(
                codes.insert(code.clone()),
                "code {code} is in two live orders"
            );
        }
    }
    rows.len()
}

async fn claim_all(app: &App, users: Vec<String>) -> Vec<ClaimAnswer> {
    stream::iter(users)
        .map(|u| async move { app.claim("pool", &u, 1).await })
        .buffer_unordered(48)
        .collect()
        .await
}

async fn confirm_all(app: &App, ids: &[String]) {
    stream::iter(ids)
        .map(|id| async move {
            let (s, body) = app
                .admin(Method::POST, &format!("/v1/orders/{id}/confirm"), None)
                .await;
            assert_eq!(s, 200, "{id}: {body}");
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expired_codes_are_won_again_and_never_held_by_two_live_orders() {
    let clock = seckill::clock::ManualClock::new();
    let c = clock.clone();
    let app = App::spawn_with(move |cfg| {
        cfg.clock = Some(c);
        cfg.sync = SyncMode::Normal;
    })
    .await;
    let codes: Vec<String> = (0..CODES).map(|i| format!("P-{i:05}")).collect();
    app.create(json!({"id": "pool", "codes": codes, "per_user_limit": 1, "hold_seconds": HOLD}))
        .await;

    let url = format!(
        "sqlite://{}?mode=ro",
        app.data_dir().join("seckill.db").display()
    );
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicUsize::new(0));
    let checker = {
        let (pool, stop, checks) = (pool.clone(), stop.clone(), checks.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                check_snapshot(&pool).await;
                checks.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    // Waves of winners STEP apart (of the engine's clock): staggered deadlines.
    let per_wave = CODES / WAVES;
    let mut unpaid_codes: Vec<HashSet<String>> = Vec::new();
    for w in 0..WAVES {
        let users = (0..per_wave).map(|i| format!("w{w}-{i}")).collect();
        let answers = claim_all(&app, users).await;
        assert!(answers.iter().all(|a| a.outcome == Outcome::Won));
        let (paid, unpaid): (Vec<_>, Vec<_>) = answers
            .iter()
            .enumerate()
            .partition(|(i, _)| i % CONFIRM_EVERY == 0);
        let paid: Vec<String> = paid
            .iter()
            .map(|(_, a)| a.order_id.clone().unwrap())
            .collect();
        confirm_all(&app, &paid).await;
        unpaid_codes.push(
            unpaid
                .iter()
                .flat_map(|(_, a)| a.codes.clone().unwrap())
                .collect(),
        );
        if w + 1 < WAVES {
            clock.advance(STEP);
        }
    }
    assert_eq!(app.claim("pool", "late", 1).await.outcome, Outcome::SoldOut);
    clock.advance(STEP); // wave 0's deadline

    // Each step passes one more wave's deadline; its unpaid codes come back and new users
    // win exactly them.
    let mut rewon = 0;
    for (w, unpaid) in unpaid_codes.iter().enumerate() {
        let want = unpaid.len() as u64;
        let mut remaining = 0;
        for _ in 0..1000 {
            remaining = app.client.campaign("pool").await.unwrap().remaining;
            if remaining >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(remaining, want, "wave {w}: its unpaid codes are back");
        let users = (0..unpaid.len()).map(|i| format!("again{w}-{i}")).collect();
        let answers = claim_all(&app, users).await;
        let got: HashSet<String> = answers
            .iter()
            .inspect(|a| assert_eq!(a.outcome, Outcome::Won))
            .flat_map(|a| a.codes.clone().unwrap())
            .collect();
        assert_eq!(&got, unpaid, "wave {w}: the expired codes were won again");
        rewon += got.len();
        if w + 1 < WAVES {
            // Not after the last wave: the re-won orders' own deadlines must not pass.
            clock.advance(STEP);
        }
    }
    stop.store(true, Ordering::Relaxed);
    checker.await.unwrap();
    let live = check_snapshot(&pool).await;
    assert_eq!(live, CODES, "every code is in exactly one live order");
    assert!(
        checks.load(Ordering::Relaxed) >= 10,
        "the checker kept reading"
    );
    let orders = app.client.all_orders("pool").await.unwrap();
    let expired = orders
        .iter()
        .filter(|o| o.state == OrderState::Expired)
        .count();
    assert_eq!(expired, rewon, "every unpaid order expired once");
    eprintln!(
        "codes: {} orders, {expired} expired and re-won, {} ledger snapshots checked",
        orders.len(),
        checks.load(Ordering::Relaxed)
    );
}
