//! Holds in scale-out under the faults that matter: kill -9 of an instance and of the worker
//! while pending orders are won, confirmed and expired; a worker that stalls while the gate
//! expires orders (the bench's drain must not take the stale ledger for the final one); and
//! `seckill bench --scenario holds` against two instances and a worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::bench::{drain, Win};
use seckill::domain::{OrderState, Outcome};

use super::payers::{load, resolved_as_answered, Seen};
use crate::helpers::settle_url;
use crate::scale_out::procs::Seckill;
use crate::servers::{pg, RedisServer};

const CODES: usize = 3000;
/// Users come back: a user whose order expired may win again, never two live orders at once.
const USERS: u64 = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instance_and_worker_killed_mid_expiry_lose_and_repeat_nothing() {
    let redis = RedisServer::start_aof();
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let serve = ["--no-worker", "--reclaim-after-ms", "500"];
    let work = ["--reclaim-after-ms", "500", "--pipeline-batch", "50"];
    let mut a = Seckill::serve(&urls, &postgres, &serve);
    let b = Seckill::serve(&urls, &postgres, &serve);
    let mut worker = Seckill::worker(&urls, &postgres, &work);
    let codes: Vec<String> = (0..CODES).map(|i| format!("S-{i:05}")).collect();
    a.client()
        .create_campaign(
            &json!({"id": "k", "codes": codes, "per_user_limit": 1, "hold_seconds": 1}),
        )
        .await
        .unwrap();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(&[a.client(), b.client()], USERS, &stop, &seen);
    // Long enough for deadlines to pass: expiries and confirms are under way when both die.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    a.sigkill();
    worker.sigkill();
    // Instance b keeps selling, confirming and expiring while nothing consumes the stream.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let a = Seckill::serve(&urls, &postgres, &serve);
    let worker = Seckill::worker(&urls, &postgres, &work);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    let client = a.client();
    let view = super::nothing_pending(&client, "k").await;
    settle_url(&client).await;
    settle_url(&b.client()).await;
    let seen = std::mem::take(&mut *seen.lock());
    assert!(!seen.confirmed.is_empty() && !seen.refused.is_empty());
    let orders = client.all_orders("k").await.unwrap();
    // A claim in flight on the killed instance may have won without its answer arriving.
    assert!(orders.len() >= seen.won.len());
    let confirmed = resolved_as_answered(&orders, &seen);
    assert_eq!(view.remaining as usize, CODES - confirmed, "stock exact");
    // Each transition was applied once and in order: none contradicted PostgreSQL's row.
    let pool = sqlx::PgPool::connect(&postgres).await.unwrap();
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM failed_orders")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(failed, 0, "a transition contradicted the ledger");
    let expired = orders.len() - confirmed;
    eprintln!(
        "kill -9 of an instance and the worker: {} won, {confirmed} confirmed ({} answered 200), \
         {expired} expired, {} confirms answered 409",
        seen.won.len(),
        seen.confirmed.len(),
        seen.refused.len()
    );
    drop(worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_drain_waits_for_expiries_a_stalled_worker_has_not_applied() {
    let redis = RedisServer::start_aof();
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let serve = Seckill::serve(&urls, &postgres, &["--no-worker"]);
    let mut worker = Seckill::worker(&urls, &postgres, &[]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "d", "stock": 5, "hold_seconds": 1}))
        .await
        .unwrap();
    let mut wins = Vec::new();
    for i in 0..5 {
        let user = format!("u{i}");
        let ClaimReply::Processed(a) = client.claim("d", &user, 1, None).await.unwrap() else {
            panic!("claim refused");
        };
        assert_eq!(a.outcome, Outcome::Won);
        let (order_id, codes) = (a.order_id.unwrap(), None);
        wins.push(Win {
            user,
            order_id,
            qty: 1,
            codes,
            key: None,
            sent: std::time::Instant::now(),
            answered: std::time::Instant::now(),
        });
    }
    settle_url(&client).await;
    worker.sigkill();
    // The gate expires all five; the transitions wait in the stream.
    super::nothing_pending(&client, "d").await;
    let quick = Duration::from_millis(50);
    let stale = drain::wait(
        &client,
        std::slice::from_ref(&client),
        "d",
        &wins,
        Duration::from_secs(2),
        quick,
    )
    .await
    .unwrap();
    assert!(
        !stale.settled,
        "a ledger with overdue pending orders drained"
    );
    assert!(stale.orders.iter().all(|o| o.state == OrderState::Pending));

    let _worker = Seckill::worker(&urls, &postgres, &[]);
    let drained = drain::wait(
        &client,
        std::slice::from_ref(&client),
        "d",
        &wins,
        Duration::from_secs(30),
        quick,
    )
    .await
    .unwrap();
    assert!(drained.settled);
    assert!(drained
        .orders
        .iter()
        .all(|o| o.state == OrderState::Expired));
}

/// `seckill bench --scenario holds` spread over two instances and a separate worker: a clean
/// verification (every order resolved once, as its answers said; codes resold).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bench_holds_preset_verifies_across_two_instances() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let a = Seckill::serve(&urls, &postgres, &["--no-worker"]);
    let b = Seckill::serve(&urls, &postgres, &["--no-worker"]);
    let _worker = Seckill::worker(&urls, &postgres, &[]);
    let both = format!("{},{}", a.url.clone().unwrap(), b.url.clone().unwrap());
    crate::bench_run::holds_preset_runs_clean(&both).await;
}
