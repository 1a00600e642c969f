//! The load of the kill -9 tests: buyers winning 1-second holds of campaign `k` and paying
//! (or not) like real ones, and the check that the ledger resolved every order as its
//! answers said.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use reqwest::Method;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{Order, OrderState, Outcome};

/// What the buyers were answered.
#[derive(Default)]
pub struct Seen {
    pub won: Vec<String>,
    pub confirmed: HashSet<String>,
    pub refused: HashSet<String>,
}

/// Claims on `k` from 32 tasks spread over `clients`, users `u0`… coming back after `users`
/// (a user whose order expired may win again; with `per_user_limit` 1 never two live orders);
/// half of the winners confirm: a quarter of those at once and twice, the others 0.85–1.15 s
/// later, around their 1-second `pay_by`. Runs until `stop`.
pub fn load(
    clients: &[Client],
    users: u64,
    stop: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Seen>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let n = Arc::new(AtomicU64::new(0));
    (0..32u64)
        .map(|w| {
            let client = clients[w as usize % clients.len()].clone();
            let (seen, stop, n) = (seen.clone(), stop.clone(), n.clone());
            tokio::spawn(async move {
                // The payments in flight, so that this task ends after its last one.
                let mut payments = tokio::task::JoinSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let i = n.fetch_add(1, Ordering::Relaxed);
                    let user = format!("u{}", i % users);
                    let Ok(ClaimReply::Processed(a)) = client.claim("k", &user, 1, None).await
                    else {
                        // A killed server refuses connections: back off.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    if a.outcome != Outcome::Won {
                        continue;
                    }
                    let id = a.order_id.unwrap();
                    seen.lock().won.push(id.clone());
                    if w % 2 == 0 {
                        let twice = w % 8 == 0;
                        let delay = if twice { 0 } else { 850 + i % 300 };
                        payments.spawn(pay(client.clone(), id, delay, twice, seen.clone()));
                    }
                }
                while payments.join_next().await.is_some() {}
            })
        })
        .collect()
}

/// Confirms order `id` after `delay_ms` (twice when `twice`), noting the answers.
async fn pay(client: Client, id: String, delay_ms: u64, twice: bool, seen: Arc<Mutex<Seen>>) {
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    let path = format!("/v1/orders/{id}/confirm");
    for _ in 0..1 + u64::from(twice) {
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

/// Asserts the final `orders` (nothing pending any more) agree with what was answered: every
/// `won` listed, every 200 confirmed, every 409 expired and never also 200, every order
/// confirmed or expired, no code and no user in two confirmed orders. The confirmed count.
pub fn resolved_as_answered(orders: &[Order], seen: &Seen) -> usize {
    let by_id: HashMap<&str, &Order> = orders.iter().map(|o| (o.order_id.as_str(), o)).collect();
    let state = |id: &str| by_id.get(id).map(|o| o.state);
    for id in &seen.won {
        assert!(
            by_id.contains_key(id.as_str()),
            "won {id} is not in the ledger"
        );
    }
    for id in &seen.confirmed {
        assert_eq!(state(id), Some(OrderState::Confirmed), "{id} answered 200");
    }
    for id in &seen.refused {
        assert!(!seen.confirmed.contains(id), "{id} answered 200 and 409");
        assert_eq!(state(id), Some(OrderState::Expired), "{id} answered 409");
    }
    let (mut codes, mut users) = (HashSet::new(), HashSet::new());
    for o in orders {
        match o.state {
            OrderState::Confirmed => {
                assert!(users.insert(&o.user_id), "{} confirmed twice", o.user_id);
                for c in o.codes.iter().flatten() {
                    assert!(codes.insert(c), "code {c} in two live orders");
                }
            }
            OrderState::Expired => {}
            s => panic!("{} ended {s:?}", o.order_id),
        }
    }
    users.len()
}
