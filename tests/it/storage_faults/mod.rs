//! Storage faults injected into a real `seckill serve` process under load: a full disk, a
//! commit whose outcome is unknown, a panicking ledger writer, an order id the ledger already
//! holds, a second server on the same data directory, and waiting-room joins meeting I/O
//! errors at their commit. After each, every `won` answer the
//! clients received must be an order, exactly once, and no order may exist that nobody could
//! have been told about.

mod ambiguous;
mod data_dir;
pub(crate) mod disk_full;
mod idem_shadow;
mod room_io_error;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{ClaimAnswer, Outcome};

use crate::invariants;

/// What the load saw: (user, key, reply) of every request that got an HTTP answer, and how
/// many got none.
#[derive(Default)]
pub struct Seen {
    pub replies: Mutex<Vec<(String, Option<String>, ClaimReply)>>,
    pub lost: AtomicU64,
}

impl Seen {
    pub fn count(&self, f: impl Fn(&ClaimReply) -> bool) -> usize {
        self.replies.lock().iter().filter(|(_, _, r)| f(r)).count()
    }
}

pub fn won(r: &ClaimReply) -> bool {
    matches!(r, ClaimReply::Processed(a) if a.outcome == Outcome::Won)
}

pub fn refused_503(r: &ClaimReply) -> bool {
    matches!(r, ClaimReply::Refused(s, _) if s.as_u16() == 503)
}

/// `workers` clients claiming one unit each for fresh users on `campaign` until stopped; one
/// in four sends an Idempotency-Key.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub seen: Arc<Seen>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(client: &Client, campaign: &str, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Seen::default());
        let n = Arc::new(AtomicU64::new(0));
        let tasks = (0..workers)
            .map(|w| {
                let (client, stop, seen, n) =
                    (client.clone(), stop.clone(), seen.clone(), n.clone());
                let campaign = campaign.to_owned();
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let i = n.fetch_add(1, Ordering::Relaxed);
                        let user = format!("u{i}");
                        let key = (w % 4 == 0).then(|| format!("k{i}"));
                        match client.claim(&campaign, &user, 1, key.as_deref()).await {
                            Ok(reply) => {
                                let pause = refused_503(&reply);
                                seen.replies.lock().push((user, key, reply));
                                if pause {
                                    tokio::time::sleep(Duration::from_millis(5)).await;
                                }
                            }
                            Err(_) => {
                                seen.lost.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        }
                    }
                })
            })
            .collect();
        Load { stop, seen, tasks }
    }

    /// Waits until `f` holds for the replies seen so far, or panics after `limit`.
    pub async fn until(&self, limit: Duration, what: &str, f: impl Fn(&Seen) -> bool) {
        let deadline = tokio::time::Instant::now() + limit;
        while !f(&self.seen) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "waited {limit:?} for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(self) -> Arc<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        self.seen
    }
}

/// Every `won` is its order exactly once, the campaign's numbers add up, and every order
/// nobody was answered `won` for belongs to a request whose outcome its client could not know
/// (no answer, or a 503 saying the outcome is unknown). Returns the number of orders.
pub async fn verify(client: &Client, campaign: &str, seen: &Seen) -> usize {
    let view = client.campaign(campaign).await.unwrap();
    let orders = client.all_orders(campaign).await.unwrap();
    let replies = seen.replies.lock();
    let won: Vec<(String, ClaimAnswer)> = replies
        .iter()
        .filter_map(|(u, _, r)| match r {
            ClaimReply::Processed(a) if a.outcome == Outcome::Won => Some((u.clone(), a.clone())),
            _ => None,
        })
        .collect();
    invariants::check(&view, &orders, &won, false);
    let answered: HashMap<&str, ()> = won.iter().map(|(u, _)| (u.as_str(), ())).collect();
    let unknown: HashMap<&str, ()> = replies
        .iter()
        .filter(|(_, _, r)| r.outcome_unknown())
        .map(|(u, _, _)| (u.as_str(), ()))
        .collect();
    let known: HashMap<&str, ()> = replies.iter().map(|(u, _, _)| (u.as_str(), ())).collect();
    for o in &orders {
        if answered.contains_key(o.user_id.as_str()) || unknown.contains_key(o.user_id.as_str()) {
            continue;
        }
        assert!(
            !known.contains_key(o.user_id.as_str()),
            "order {} exists although its client was told it failed or lost: {:?}",
            o.order_id,
            replies.iter().find(|(u, _, _)| *u == o.user_id)
        );
    }
    let unanswered_orders = orders
        .iter()
        .filter(|o| !answered.contains_key(o.user_id.as_str()))
        .count() as u64;
    assert!(
        unanswered_orders <= seen.lost.load(Ordering::Relaxed) + unknown.len() as u64,
        "{unanswered_orders} orders nobody was answered won for, but only {} requests lost their \
         answer and {} were told the outcome is unknown",
        seen.lost.load(Ordering::Relaxed),
        unknown.len()
    );
    orders.len()
}
