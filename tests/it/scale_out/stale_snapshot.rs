//! Redis killed -9 and restarted from an RDB snapshot taken `k` won claims earlier, with every
//! one of those claims already in PostgreSQL (issue: Redis back from an older snapshot). Two
//! `serve --no-worker` instances and a worker (pipeline batch 16, so one `k` is larger than a
//! batch) under load from new buyers and from buyers who already hold their limit: every `won`
//! answered after the restart is that buyer's order in PostgreSQL (no reissued order id), no
//! buyer holds more than the limit, and remaining equals total minus active units.

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
use crate::servers::{pg, redis_raw, RedisServer};

const CAMPAIGN: &str = "snap";
/// Buyers who won before Redis was killed.
const BEFORE: usize = 60;

/// How a claim after the restart ended.
#[derive(Debug, Clone)]
enum Seen {
    Answer(ClaimAnswer),
    /// 503 "nothing was changed".
    Unchanged,
    /// 503 "it may or may not have been processed" (sent on the connection Redis's kill broke).
    Unknown,
}

type Answers = Arc<Mutex<Vec<(String, Seen, Instant)>>>;

async fn claim_won(client: &Client, user: &str) -> ClaimAnswer {
    match client.claim(CAMPAIGN, user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) if a.outcome == Outcome::Won => a,
        other => panic!("{user} did not win before the kill: {other:?}"),
    }
}

/// Claims from both instances until `stop`: half from new buyers, half from buyers who already
/// won (who must be told they hold their limit).
fn load(
    clients: &[Client],
    stop: Arc<AtomicBool>,
    answers: Answers,
) -> Vec<tokio::task::JoinHandle<()>> {
    let n = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for client in clients {
        for _ in 0..4 {
            let (client, stop, answers, n) =
                (client.clone(), stop.clone(), answers.clone(), n.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let i = n.fetch_add(1, Ordering::Relaxed);
                    let user = if i % 2 == 0 {
                        format!("old{}", (i / 2) % BEFORE as u64)
                    } else {
                        format!("new{i}")
                    };
                    let answer = match client.claim(CAMPAIGN, &user, 1, None).await {
                        Ok(ClaimReply::Processed(a)) => Seen::Answer(a),
                        Ok(ClaimReply::Refused(status, body)) => {
                            let msg = body["error"]["message"].as_str().unwrap_or_default();
                            assert_eq!(status.as_u16(), 503, "{user}: {body}");
                            if msg.contains("nothing was changed") {
                                Seen::Unchanged
                            } else {
                                assert!(msg.contains("may or may not"), "{user}: {body}");
                                Seen::Unknown
                            }
                        }
                        Err(e) => panic!("{user}: no answer: {e}"),
                    };
                    let refused = !matches!(answer, Seen::Answer(_));
                    answers.lock().push((user, answer, Instant::now()));
                    if refused {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }));
        }
    }
    tasks
}

/// One run: `k` wins after the snapshot, all drained to PostgreSQL, then the restore.
async fn restore_snapshot_taken_k_claims_earlier(k: usize) {
    let mut redis = RedisServer::start(&["--appendonly", "no"]);
    let db = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let a = Seckill::serve(&urls, &db, &["--no-worker"]);
    let b = Seckill::serve(&urls, &db, &["--no-worker"]);
    let _worker = Seckill::worker(&urls, &db, &["--pipeline-batch", "16"]);
    let clients = [a.client(), b.client()];
    clients[0]
        .create_campaign(&json!({"id": CAMPAIGN, "stock": 1000, "per_user_limit": 1}))
        .await
        .unwrap();
    let mut won: Vec<(String, ClaimAnswer)> = Vec::new();
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    for i in 0..BEFORE {
        if i == BEFORE - k {
            settle_url(&clients[0]).await;
            let saved = redis_raw(redis.port, "SAVE").unwrap();
            assert!(saved.starts_with("+OK"), "SAVE: {saved}");
            std::fs::copy(redis.dir().join("dump.rdb"), snapshot.path()).unwrap();
        }
        let user = format!("old{i}");
        won.push((user.clone(), claim_won(&clients[i % 2], &user).await));
    }
    settle_url(&clients[0]).await;
    assert_eq!(
        clients[0].all_orders(CAMPAIGN).await.unwrap().len(),
        BEFORE,
        "every win before the kill is in PostgreSQL"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let answers: Answers = Arc::default();
    tokio::task::block_in_place(|| {
        redis.kill_9();
        std::fs::copy(snapshot.path(), redis.dir().join("dump.rdb")).unwrap();
        redis.start_again();
    });
    let up = Instant::now();
    let tasks = load(&clients, stop.clone(), answers.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    settle_url(&clients[0]).await;

    let answers = answers.lock().clone();
    let after: Vec<(String, ClaimAnswer)> = answers
        .iter()
        .filter_map(|(u, a, _)| match a {
            Seen::Answer(a) if a.outcome == Outcome::Won => Some((u.clone(), a.clone())),
            _ => None,
        })
        .collect();
    let refused = answers
        .iter()
        .filter(|(_, a, _)| matches!(a, Seen::Unchanged))
        .count();
    let unknown: HashSet<&str> = answers
        .iter()
        .filter(|(_, a, _)| matches!(a, Seen::Unknown))
        .map(|(u, _, _)| u.as_str())
        .collect();
    let first_win = answers
        .iter()
        .filter(|(_, a, _)| matches!(a, Seen::Answer(a) if a.outcome == Outcome::Won))
        .map(|(_, _, t)| *t - up)
        .min();
    let old_won = after.iter().filter(|(u, _)| u.starts_with("old")).count();
    won.extend(after.iter().cloned());

    let orders = clients[0].all_orders(CAMPAIGN).await.unwrap();
    let missing = super::not_their_order(&won, &orders);
    let ids: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    eprintln!(
        "k = {k}: after the restore {} claims answered, {} won ({old_won} by buyers who had \
         won before), {refused} refused as unchanged, {} of unknown outcome, first win {first_win:?} after Redis \
         answered; {} orders in PostgreSQL; won answers not found as that buyer's order: {}",
        answers.len() - refused,
        after.len(),
        unknown.len(),
        orders.len(),
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "k = {k}: won answers whose order is not that buyer's: {missing:?}"
    );
    assert_eq!(
        ids.len(),
        won.len(),
        "k = {k}: an order id was answered twice"
    );
    assert_eq!(old_won, 0, "k = {k}: a buyer at the limit won again");
    assert!(!after.is_empty(), "k = {k}: nothing won after the restore");
    let view = clients[0].campaign(CAMPAIGN).await.unwrap();
    invariants::check(&view, &orders, &won, false);
    for o in orders.iter().filter(|o| !ids.contains(o.order_id.as_str())) {
        assert!(
            unknown.contains(o.user_id.as_str()),
            "k = {k}: order {} of {} exists, but its buyer was never told it won",
            o.order_id,
            o.user_id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restored_from_an_older_snapshot_never_reissues_an_order_id() {
    // 5 < the pipeline batch of 16 < 40.
    for k in [5, 40] {
        restore_snapshot_taken_k_claims_earlier(k).await;
    }
}

/// The number in a `took_ms=…` field of the last log line containing `what`.
fn took_ms(log: &str, what: &str) -> Option<u64> {
    let line = log.lines().rev().find(|l| l.contains(what))?;
    let at = line.find("took_ms=")? + "took_ms=".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// 1,000 live campaigns, each one order behind after the restore: every one is rebuilt before
/// a claim is served from it. Prints how long the check took with every campaign behind, and
/// with every campaign level (a fresh instance's start).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_campaigns_behind_are_all_rebuilt_before_serving() {
    use futures::StreamExt;
    const CAMPAIGNS: usize = 1000;
    let mut redis = RedisServer::start(&["--appendonly", "no"]);
    let db = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let a = Seckill::serve(&urls, &db, &[]);
    let client = a.client();
    let ids: Vec<String> = (0..CAMPAIGNS).map(|i| format!("c{i}")).collect();
    let each = |user: &'static str| {
        let client = client.clone();
        futures::stream::iter(ids.clone())
            .map(move |id| {
                let client = client.clone();
                async move {
                    if user == "a" {
                        let spec = json!({"id": id, "stock": 10, "per_user_limit": 1});
                        client.create_campaign(&spec).await.unwrap();
                    }
                    match client.claim(&id, user, 1, None).await.unwrap() {
                        ClaimReply::Processed(a) if a.outcome == Outcome::Won => (id, a),
                        other => panic!("{id} {user}: {other:?}"),
                    }
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<_>>()
    };
    each("a").await;
    settle_url(&client).await;
    assert!(redis_raw(redis.port, "SAVE").unwrap().starts_with("+OK"));
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    std::fs::copy(redis.dir().join("dump.rdb"), snapshot.path()).unwrap();
    let second = each("b").await;
    settle_url(&client).await;

    tokio::task::block_in_place(|| {
        redis.kill_9();
        std::fs::copy(snapshot.path(), redis.dir().join("dump.rdb")).unwrap();
        redis.start_again();
    });
    // The next claim on every campaign is numbered after the ledger's orders.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut third = Vec::new();
    for id in &ids {
        loop {
            match client.claim(id, "c", 1, None).await.unwrap() {
                ClaimReply::Processed(a) => {
                    third.push((id.clone(), a));
                    break;
                }
                ClaimReply::Refused(status, _) if status.as_u16() == 503 => {
                    assert!(Instant::now() < deadline, "claims still refused after 60 s");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                ClaimReply::Refused(status, body) => panic!("{id}: {status} {body}"),
            }
        }
    }
    for (id, b) in &second {
        assert_eq!(b.order_id, Some(format!("{id}-2")), "{id}");
    }
    for (id, a) in &third {
        assert_eq!(a.outcome, Outcome::Won, "{id}");
        assert_eq!(a.order_id, Some(format!("{id}-3")), "{id}");
    }
    let rebuilt = took_ms(&a.log_text(), "campaigns rebuilt, serving claims");
    assert!(rebuilt.is_some(), "no rebuild logged: {}", a.log_text());
    // A second instance starts on the level gate: the check alone.
    let b = Seckill::serve(&urls, &db, &["--no-worker"]);
    let level = took_ms(&b.log_text(), "Redis checked against the ledger");
    eprintln!(
        "{CAMPAIGNS} campaigns: check + rebuild of all of them took {rebuilt:?} ms; the check of \
         a level gate took {level:?} ms"
    );
    settle_url(&client).await;
    for id in ids.iter().take(20) {
        let orders = client.all_orders(id).await.unwrap();
        assert_eq!(orders.len(), 3, "{id}");
    }
}
