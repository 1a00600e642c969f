//! Outages of the stores during a sale: PostgreSQL down (claims keep being answered, the
//! stream buffers, everything drains later) and Redis killed with AOF on (scripts reload,
//! invariants hold).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{ClaimAnswer, Outcome};

use super::procs::Seckill;
use super::{check_exact, won_of};
use crate::helpers::settle_url;
use crate::invariants;
use crate::servers::{pg, PgServer, RedisServer};

/// What a claim loop saw: processed answers, and users whose claim got no answer (503 or a
/// broken connection), whose outcome is therefore unknown to the client.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) answers: Mutex<Vec<(String, Option<String>, ClaimAnswer)>>,
    pub(super) unknown: Mutex<HashSet<String>>,
}

impl Seen {
    pub(super) fn won(&self) -> Vec<(String, ClaimAnswer)> {
        let answers: Vec<_> = self
            .answers
            .lock()
            .iter()
            .map(|(u, _, a)| (u.clone(), a.clone()))
            .collect();
        won_of(&answers)
    }
}

/// 32 workers claiming on `campaign` with fresh users (a quarter with keys) until `stop`.
pub(super) fn claim_loop(
    client: &Client,
    campaign: &str,
    stop: Arc<AtomicBool>,
    seen: Arc<Seen>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let n = Arc::new(AtomicU64::new(0));
    (0..32)
        .map(|w| {
            let (client, campaign) = (client.clone(), campaign.to_owned());
            let (stop, seen, n) = (stop.clone(), seen.clone(), n.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let i = n.fetch_add(1, Ordering::Relaxed);
                    let user = format!("user-{i}");
                    let key = (w % 4 == 0).then(|| format!("key-{i}"));
                    match client.claim(&campaign, &user, 1, key.as_deref()).await {
                        Ok(ClaimReply::Processed(a)) => seen.answers.lock().push((user, key, a)),
                        _ => {
                            seen.unknown.lock().insert(user);
                            tokio::time::sleep(Duration::from_millis(5)).await
                        }
                    }
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_down_during_a_sale_loses_no_order() {
    let redis = RedisServer::start(&[]);
    let mut postgres = PgServer::start();
    let db = postgres.fresh_db().await;
    let serve = Seckill::serve(&[redis.url()], &db, &[]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "outage", "stock": 1_000_000}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let load = claim_loop(&client, "outage", stop.clone(), seen.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    postgres.stop();
    let before = seen.answers.lock().len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = seen.answers.lock().len() - before;
    let health = client
        .http()
        .get(client.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        health.status().as_u16(),
        503,
        "healthz reports the ledger is down"
    );
    postgres.restart();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert!(
        during > 0,
        "claims kept being answered while PostgreSQL was down"
    );
    assert!(
        seen.unknown.lock().is_empty(),
        "no claim failed while PostgreSQL was down"
    );
    settle_url(&client).await;
    let won = seen.won();
    assert_eq!(
        won.len(),
        seen.answers.lock().len(),
        "every claim of this sale wins"
    );
    check_exact(&client, "outage", &won, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_kill_9_with_aof_keeps_every_won_order() {
    let mut redis = RedisServer::start_aof();
    let db = pg().fresh_db().await;
    let serve = Seckill::serve(&[redis.url()], &db, &[]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "aof", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let load = claim_loop(&client, "aof", stop.clone(), seen.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.kill_and_restart();
    let at_restart = seen.answers.lock().len();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert!(
        seen.answers.lock().len() > at_restart,
        "claims are answered again after Redis restarted (scripts reloaded)"
    );
    settle_url(&client).await;
    let won = seen.won();
    let view = client.campaign("aof").await.unwrap();
    let orders = client.all_orders("aof").await.unwrap();
    invariants::check(&view, &orders, &won, false);
    // A claim cut off by the kill may have been processed without its answer reaching the
    // client (the API says so in the 503); every order beyond the answered ones is one of those.
    let answered: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    let unknown = seen.unknown.lock().clone();
    for o in orders
        .iter()
        .filter(|o| !answered.contains(o.order_id.as_str()))
    {
        assert!(
            unknown.contains(&o.user_id),
            "order {} of {} was never claimed as far as the client knows",
            o.order_id,
            o.user_id
        );
    }
    // Idempotency answers survived too: each key replays its first answer.
    let keyed: HashMap<String, (String, ClaimAnswer)> = seen
        .answers
        .lock()
        .iter()
        .filter_map(|(u, k, a)| k.clone().map(|k| (k, (u.clone(), a.clone()))))
        .collect();
    for (key, (user, answer)) in keyed.iter().take(100) {
        match client.claim("aof", user, 1, Some(key)).await.unwrap() {
            ClaimReply::Processed(r) => assert_eq!(&r, answer, "key {key} replays"),
            other => panic!("replay refused: {other:?}"),
        }
    }
    let after = client.claim("aof", "after-restart", 1, None).await.unwrap();
    assert!(matches!(after, ClaimReply::Processed(ref a) if a.outcome == Outcome::Won));
}
