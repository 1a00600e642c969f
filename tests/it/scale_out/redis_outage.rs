//! Redis killed -9 under full load (AOF `always`) for outages of 0.5 s, 3 s and 15 s, with two
//! `serve --no-worker` instances and a `seckill worker`: each instance wins claims again within
//! 1 s of Redis answering PING, claims during the outage are refused at once (no pile-up of
//! timeouts), every `won` reaches PostgreSQL exactly once, and every other order belongs to a
//! client whose answer was lost or who was told the claim may have been processed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{ClaimAnswer, Outcome};

use super::procs::Seckill;
use crate::helpers::settle_url;
use crate::invariants;
use crate::servers::{pg, RedisServer};

/// How one claim ended, as its client saw it.
#[derive(Debug, Clone)]
pub(super) enum Seen {
    Answer(ClaimAnswer),
    /// A 503 that says nothing was changed.
    Unchanged,
    /// A 503 that says the claim may have been processed, or no answer at all.
    Unknown(#[allow(dead_code)] String),
}

#[derive(Debug, Clone)]
pub(super) struct Claim {
    pub(super) instance: usize,
    pub(super) user: String,
    pub(super) start: Instant,
    pub(super) end: Instant,
    pub(super) seen: Seen,
}

pub(super) type Log = Arc<Mutex<Vec<Claim>>>;

fn classify(reply: Result<ClaimReply, reqwest::Error>) -> Seen {
    match reply {
        Ok(ClaimReply::Processed(a)) => Seen::Answer(a),
        Ok(ClaimReply::Refused(status, body)) => {
            let msg = body["error"]["message"].as_str().unwrap_or_default();
            if status.as_u16() == 503 && msg.contains("nothing was changed") {
                Seen::Unchanged
            } else {
                Seen::Unknown(format!("{status}: {body}"))
            }
        }
        Err(e) => Seen::Unknown(e.to_string()),
    }
}

/// `per_instance` tasks per instance claiming with fresh users until `stop`.
pub(super) fn load(
    clients: &[Client],
    campaign: &str,
    per_instance: usize,
    stop: Arc<AtomicBool>,
    log: Log,
) -> Vec<tokio::task::JoinHandle<()>> {
    let n = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (instance, client) in clients.iter().enumerate() {
        for _ in 0..per_instance {
            let (client, campaign) = (client.clone(), campaign.to_owned());
            let (stop, log, n) = (stop.clone(), log.clone(), n.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let user = format!("u{}", n.fetch_add(1, Ordering::Relaxed));
                    let start = Instant::now();
                    let seen = classify(client.claim(&campaign, &user, 1, None).await);
                    let refused = !matches!(seen, Seen::Answer(_));
                    let end = Instant::now();
                    log.lock().push(Claim {
                        instance,
                        user,
                        start,
                        end,
                        seen,
                    });
                    if refused {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }));
        }
    }
    tasks
}

/// When each instance first answered `won` after `since` (None: not yet).
pub(super) fn first_win_after(log: &Log, instances: usize, since: Instant) -> Vec<Option<Instant>> {
    let mut first = vec![None; instances];
    for c in log.lock().iter() {
        if c.end > since && matches!(&c.seen, Seen::Answer(a) if a.outcome == Outcome::Won) {
            let f: &mut Option<Instant> = &mut first[c.instance];
            match f {
                Some(t) if *t <= c.end => {}
                _ => *f = Some(c.end),
            }
        }
    }
    first
}

/// Waits until every instance won a claim after `up`; the time each took.
pub(super) async fn recovery(
    log: &Log,
    instances: usize,
    up: Instant,
    procs: &[&Seckill],
) -> Vec<Duration> {
    let deadline = up + Duration::from_secs(30);
    loop {
        let first = first_win_after(log, instances, up);
        if first.iter().all(Option::is_some) {
            return first.into_iter().map(|t| t.unwrap() - up).collect();
        }
        if Instant::now() > deadline {
            let tails: Vec<String> = procs.iter().map(|p| tail(&p.log_text())).collect();
            panic!(
                "an instance wins no claim 30 s after Redis answered again: {first:?}\n{tails:#?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn tail(log: &str) -> String {
    log.lines()
        .rev()
        .take(30)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long after `up` the first order won after `up` was in PostgreSQL (the worker moves
/// orders again).
pub(super) async fn first_order_persisted(log: &Log, client: &Client, up: Instant) -> Duration {
    let order = log
        .lock()
        .iter()
        .filter(|c| c.end > up)
        .find_map(|c| match &c.seen {
            Seen::Answer(a) => a.order_id.clone(),
            _ => None,
        })
        .expect("an order was won after Redis answered");
    let deadline = up + Duration::from_secs(30);
    while client.order(&order).await.ok().flatten().is_none() {
        assert!(
            Instant::now() < deadline,
            "order {order} never reached PostgreSQL"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    up.elapsed()
}

/// The slowest refusal of a claim sent while Redis was down (`from`..`to`), and how many.
pub(super) fn refusals_between(log: &Log, from: Instant, to: Instant) -> (usize, Duration) {
    let log = log.lock();
    let during = log
        .iter()
        .filter(|c| c.start >= from && c.start < to && !matches!(c.seen, Seen::Answer(_)));
    during.fold((0, Duration::ZERO), |(n, max), c| {
        (n + 1, max.max(c.end - c.start))
    })
}

/// After the pipeline drained: the ledger holds every `won` once, and every order nobody was
/// told about belongs to a client who was told nothing definite.
pub(super) async fn check_orders(client: &Client, campaign: &str, log: &Log) {
    settle_url(client).await;
    let log = log.lock().clone();
    let won: Vec<(String, ClaimAnswer)> = log
        .iter()
        .filter_map(|c| match &c.seen {
            Seen::Answer(a) if a.outcome == Outcome::Won => Some((c.user.clone(), a.clone())),
            _ => None,
        })
        .collect();
    let unknown: HashSet<&str> = log
        .iter()
        .filter(|c| matches!(c.seen, Seen::Unknown(_)))
        .map(|c| c.user.as_str())
        .collect();
    let answered: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    let orders = client.all_orders(campaign).await.unwrap();
    let mut extra = Vec::new();
    for o in orders
        .iter()
        .filter(|o| !answered.contains(o.order_id.as_str()))
    {
        assert!(
            unknown.contains(o.user_id.as_str()),
            "order {} of {} exists, but its client was told nothing changed (or never claimed)",
            o.order_id,
            o.user_id
        );
        extra.push(o.order_id.clone());
    }
    let view = client.campaign(campaign).await.unwrap();
    invariants::check(&view, &orders, &won, false);
    let ids: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    assert_eq!(ids.len(), won.len(), "an order id was answered twice");
    eprintln!(
        "answered won {}, orders in PostgreSQL {}, orders of clients with an unknown outcome {} \
         (of {} such clients)",
        won.len(),
        orders.len(),
        extra.len(),
        unknown.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_under_load_recovers_within_a_second_of_answering() {
    let mut redis = RedisServer::start_aof();
    let db = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let a = Seckill::serve(&urls, &db, &["--no-worker"]);
    let b = Seckill::serve(&urls, &db, &["--no-worker"]);
    let worker = Seckill::worker(&urls, &db, &[]);
    let clients = [a.client(), b.client()];
    clients[0]
        .create_campaign(&json!({"id": "storm", "stock": 1_000_000_000u64, "per_user_limit": 1}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let tasks = load(&clients, "storm", 8, stop.clone(), log.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;

    for outage in [500u64, 3_000, 15_000] {
        let killed = Instant::now();
        tokio::task::block_in_place(|| redis.kill_9());
        tokio::time::sleep(Duration::from_millis(outage)).await;
        tokio::task::block_in_place(|| redis.start_again());
        let up = Instant::now();
        let took = recovery(&log, clients.len(), up, &[&a, &b]).await;
        let moved = first_order_persisted(&log, &clients[0], up).await;
        let (refused, slowest) = refusals_between(&log, killed, up);
        eprintln!(
            "outage {outage} ms: instances won again after {took:?}; {refused} claims refused \
             during the outage, the slowest refusal took {slowest:?}"
        );
        eprintln!("outage {outage} ms: the worker stored an order won after the restart {moved:?} after Redis answered");
        assert!(
            moved <= Duration::from_secs(1),
            "outage {outage} ms: the worker moved orders again only {moved:?} after Redis answered: {}",
            tail(&worker.log_text())
        );
        for t in &took {
            assert!(
                *t <= Duration::from_secs(1),
                "outage {outage} ms: an instance won again only {t:?} after Redis answered \
                 \nA: {}\nB: {}",
                a.log_text(),
                b.log_text()
            );
        }
        assert!(
            slowest < Duration::from_secs(2),
            "outage {outage} ms: a claim waited {slowest:?} for a dead Redis"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    drained_or_explain(&clients[0], &redis.url(), "storm", &worker).await;
    check_orders(&clients[0], "storm", &log).await;
}

/// Waits for the pipeline to drain; if it does not, fails with what is left in the stream
/// (length, packed count, the group's pending entries) and the worker's last log lines.
async fn drained_or_explain(client: &Client, redis: &str, campaign: &str, worker: &Seckill) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let health: serde_json::Value = match client.http().get(client.url("/healthz")).send().await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        if health["pipeline_lag"].as_u64() == Some(0) {
            return;
        }
        if Instant::now() > deadline {
            let mut c = redis::Client::open(redis)
                .unwrap()
                .get_multiplexed_async_connection_with_config(&crate::servers::patient())
                .await
                .unwrap();
            let k = seckill::engine::scale_out::Keys::new(campaign);
            let len: redis::RedisResult<u64> =
                redis::cmd("XLEN").arg(k.orders()).query_async(&mut c).await;
            let packed: redis::RedisResult<Option<i64>> =
                redis::cmd("GET").arg(k.packed()).query_async(&mut c).await;
            let pending: redis::RedisResult<redis::Value> = redis::cmd("XPENDING")
                .arg(k.orders())
                .arg(seckill::engine::scale_out::GROUP)
                .query_async(&mut c)
                .await;
            let entries: redis::RedisResult<redis::Value> = redis::cmd("XRANGE")
                .arg(k.orders())
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(10)
                .query_async(&mut c)
                .await;
            panic!(
                "the order pipeline did not drain: {health}\nXLEN {len:?}, packed {packed:?}\n\
                 XPENDING {pending:?}\nXRANGE {entries:?}\nworker log:\n{}",
                tail(&worker.log_text())
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
