//! Holds in scale-out under the faults that matter: kill -9 of an instance and of the worker
//! while pending orders are won, confirmed and expired; a worker that stalls while the gate
//! expires orders (the bench's drain must not take the stale ledger for the final one); and
//! `seckill bench --scenario holds` against two instances and a worker.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use reqwest::Method;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::bench::{self, drain, BenchOpts, ScenarioName, Win};
use seckill::domain::{OrderState, Outcome};

use crate::helpers::{settle_url, TOKEN};
use crate::scale_out::procs::Seckill;
use crate::servers::{pg, RedisServer};

const CODES: usize = 3000;
/// Users come back: a user whose order expired may win again, never two live orders at once.
const USERS: u64 = 2000;

#[derive(Default)]
struct Seen {
    won: Vec<(String, String)>,
    confirmed: HashSet<String>,
    refused: HashSet<String>,
}

/// Claims from 32 tasks spread over `clients`; half of the winners confirm: at once (some
/// twice) or 0.85–1.15 s later, around their 1-second `pay_by`.
fn load(
    clients: &[Client],
    stop: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Seen>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let n = Arc::new(AtomicU64::new(0));
    (0..32u64)
        .map(|w| {
            let client = clients[w as usize % clients.len()].clone();
            let (seen, stop, n) = (seen.clone(), stop.clone(), n.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let i = n.fetch_add(1, Ordering::Relaxed);
                    let user = format!("u{}", i % USERS);
                    let Ok(ClaimReply::Processed(a)) = client.claim("k", &user, 1, None).await
                    else {
                        // The killed instance refuses connections: back off.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    if a.outcome != Outcome::Won {
                        continue;
                    }
                    let id = a.order_id.unwrap();
                    seen.lock().won.push((user, id.clone()));
                    if w % 2 == 1 {
                        continue;
                    }
                    // Half the payers pay at once (some twice), the others around `pay_by`.
                    if w % 4 == 2 {
                        tokio::time::sleep(Duration::from_millis(850 + i % 300)).await;
                    }
                    let path = format!("/v1/orders/{id}/confirm");
                    for _ in 0..1 + u64::from(w % 8 == 0) {
                        match client.admin(Method::POST, &path, None).await {
                            Ok((s, _)) if s.as_u16() == 200 => {
                                seen.lock().confirmed.insert(id.clone());
                            }
                            Ok((s, _)) if s.as_u16() == 409 => {
                                seen.lock().refused.insert(id.clone());
                            }
                            _ => {}
                        }
                    }
                }
            })
        })
        .collect()
}

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
    let tasks = load(&[a.client(), b.client()], &stop, &seen);
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
    let orders: HashMap<String, _> = client
        .all_orders("k")
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.order_id.clone(), o))
        .collect();
    for (_, id) in &seen.won {
        assert!(orders.contains_key(id), "won {id} is not in the ledger");
    }
    // A claim in flight on the killed instance may have won without its answer arriving.
    assert!(orders.len() >= seen.won.len());
    for id in &seen.confirmed {
        assert_eq!(orders[id].state, OrderState::Confirmed, "{id} answered 200");
    }
    for id in &seen.refused {
        assert!(
            !seen.confirmed.contains(id),
            "{id} answered both 200 and 409"
        );
        assert_eq!(orders[id].state, OrderState::Expired, "{id} answered 409");
    }
    let (mut live_codes, mut confirmed_of) = (HashSet::new(), HashMap::new());
    for o in orders.values() {
        match o.state {
            OrderState::Confirmed => {
                *confirmed_of.entry(o.user_id.clone()).or_insert(0) += 1;
                for c in o.codes.clone().unwrap() {
                    assert!(live_codes.insert(c.clone()), "code {c} in two live orders");
                }
            }
            OrderState::Expired => {}
            s => panic!("{} ended {s:?}", o.order_id),
        }
    }
    assert!(
        confirmed_of.values().all(|n| *n == 1),
        "a user over the limit"
    );
    let confirmed = live_codes.len();
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
        });
    }
    settle_url(&client).await;
    worker.sigkill();
    // The gate expires all five; the transitions wait in the stream.
    super::nothing_pending(&client, "d").await;
    let quick = Duration::from_millis(50);
    let stale = drain::wait(&client, "d", &wins, Duration::from_secs(2), quick)
        .await
        .unwrap();
    assert!(
        !stale.settled,
        "a ledger with overdue pending orders drained"
    );
    assert!(stale.orders.iter().all(|o| o.state == OrderState::Pending));

    let _worker = Seckill::worker(&urls, &postgres, &[]);
    let drained = drain::wait(&client, "d", &wins, Duration::from_secs(30), quick)
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
    let mut o = BenchOpts::new(&both, TOKEN, ScenarioName::Holds);
    o.drain_interval = Duration::from_millis(50);
    o.codes = Some(100);
    o.hold_seconds = Some(1);
    o.duration = Some(Duration::from_secs(4));
    o.connections = Some(8);
    o.rate = Some(150.0);
    let r = bench::run(&o).await.expect("the bench runs");
    let v = r.verification.expect("verification ran");
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    assert!(v.drained);
    let h = v.holds.expect("the holds summary");
    assert!(h.expired > 0 && h.confirmed > 0, "{h:?}");
    assert!(
        v.orders > 100,
        "expired codes sold again: {} orders",
        v.orders
    );
    assert_eq!(v.remaining + v.active_units, v.total);
}
