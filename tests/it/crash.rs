//! Crash and shutdown tests against the real `seckill serve` process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{ClaimAnswer, Outcome};

use crate::invariants;
use crate::process::Proc;

type Answered = Arc<Mutex<Vec<(String, String, Option<String>, ClaimAnswer)>>>;

/// Claims on both campaigns from 64 workers until `stop`; records every processed answer as
/// (campaign, user, key, answer).
fn spawn_load(
    client: Client,
    stop: Arc<AtomicBool>,
    answered: Answered,
) -> Vec<tokio::task::JoinHandle<()>> {
    let n = Arc::new(AtomicU64::new(0));
    (0..64)
        .map(|w| {
            let (client, stop, answered, n) =
                (client.clone(), stop.clone(), answered.clone(), n.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let i = n.fetch_add(1, Ordering::Relaxed);
                    let campaign = if i % 2 == 0 {
                        "crash-stock"
                    } else {
                        "crash-codes"
                    };
                    let user = format!("user-{}", (i * 7919) % 3000);
                    let qty = 1 + (i % 2);
                    let key = (w % 4 == 0).then(|| format!("key-{i}"));
                    match client.claim(campaign, &user, qty, key.as_deref()).await {
                        Ok(ClaimReply::Processed(a)) => {
                            answered.lock().push((campaign.into(), user, key, a))
                        }
                        Ok(ClaimReply::Refused(..)) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
            })
        })
        .collect()
}

async fn setup(client: &Client) {
    client
        .create_campaign(&json!({"id": "crash-stock", "stock": 20_000, "per_user_limit": 3}))
        .await
        .unwrap();
    let codes: Vec<String> = (0..20_000).map(|i| format!("CODE-{i:05}")).collect();
    client
        .create_campaign(&json!({"id": "crash-codes", "codes": codes, "per_user_limit": 3}))
        .await
        .unwrap();
}

/// After a restart: every `won` is an order, invariants hold, keys replay, selling continues.
async fn verify_after_restart(client: &Client, answered: &Answered) {
    let answered = answered.lock().clone();
    let mut won: HashMap<&str, Vec<(String, ClaimAnswer)>> = HashMap::new();
    for (campaign, user, _, a) in &answered {
        if a.outcome == Outcome::Won {
            won.entry(campaign.as_str())
                .or_default()
                .push((user.clone(), a.clone()));
        }
    }
    assert!(
        won.values().map(Vec::len).sum::<usize>() > 50,
        "the load won something before the stop"
    );
    for campaign in ["crash-stock", "crash-codes"] {
        let view = client.campaign(campaign).await.unwrap();
        let orders = client.all_orders(campaign).await.unwrap();
        invariants::check(
            &view,
            &orders,
            won.get(campaign).map_or(&[][..], |v| v),
            false,
        );
    }
    for (campaign, user, key, a) in answered.iter().filter(|(_, _, k, _)| k.is_some()).take(200) {
        let replay = client
            .claim(campaign, user, 1, key.as_deref())
            .await
            .unwrap();
        match replay {
            ClaimReply::Processed(r) => {
                assert_eq!(&r, a, "key {key:?} replays its answer after restart")
            }
            other => panic!("replay refused: {other:?}"),
        }
    }
    let fresh = client
        .claim("crash-stock", "after-restart", 1, None)
        .await
        .unwrap();
    assert!(
        matches!(fresh, ClaimReply::Processed(ref a) if a.outcome == Outcome::Won),
        "{fresh:?}"
    );
}

/// A running load and the answers it collected.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Answered,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: Client) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered: Answered = Arc::default();
        let tasks = spawn_load(client, stop.clone(), answered.clone());
        Load {
            stop,
            answered,
            tasks,
        }
    }

    async fn stop(self) -> Answered {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        self.answered
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_load_loses_no_acknowledged_order() {
    let dir = tempfile::tempdir().unwrap();
    let first = Proc::start(dir.path());
    setup(&first.client()).await;
    let load = Load::start(first.client());
    tokio::time::sleep(Duration::from_millis(700)).await;
    first.signal(libc::SIGKILL);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answered = load.stop().await;
    drop(first);
    let second = Proc::start(dir.path());
    verify_after_restart(&second.client(), &answered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_mid_load_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Proc::start(dir.path());
    setup(&first.client()).await;
    let load = Load::start(first.client());
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.signal(libc::SIGTERM);
    let (exit, first) = tokio::task::spawn_blocking(move || (first.child.wait().unwrap(), first))
        .await
        .unwrap();
    let answered = load.stop().await;
    assert!(exit.success(), "SIGTERM exits 0, got {exit}");
    assert!(
        first
            .log
            .lock()
            .iter()
            .any(|l| l.contains("shut down cleanly")),
        "the log says it shut down cleanly"
    );
    let second = Proc::start(dir.path());
    verify_after_restart(&second.client(), &answered).await;
}
