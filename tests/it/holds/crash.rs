//! kill -9 of the real `seckill serve` while pending orders are being won, confirmed and
//! expired; after the restart every answer still holds, no order resolved twice, and orders
//! whose deadline passed while the server was down are expired before the first claim.
//! Real processes run on the real clock, so these use `hold_seconds` of 1–2 s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::domain::Outcome;

use super::payers::{load, resolved_as_answered, Seen};
use super::race::resolutions;
use crate::process::Proc;

const CODES: usize = 4000;
const USERS: u64 = 2500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_while_confirming_and_expiring_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let first = Proc::start(dir.path());
    let client = first.client();
    let codes: Vec<String> = (0..CODES).map(|i| format!("Z-{i:05}")).collect();
    client
        .create_campaign(
            &json!({"id": "k", "codes": codes, "per_user_limit": 1, "hold_seconds": 1}),
        )
        .await
        .unwrap();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(std::slice::from_ref(&client), USERS, &stop, &seen);
    // Long enough for the first deadlines to pass: expiries and confirms are under way.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    first.signal(libc::SIGKILL);
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    drop(first);

    let second = Proc::start(dir.path());
    let client = second.client();
    let view = super::nothing_pending(&client, "k").await;
    let seen = std::mem::take(&mut *seen.lock());
    assert!(!seen.won.is_empty() && !seen.confirmed.is_empty());
    let orders = client.all_orders("k").await.unwrap();
    let confirmed = resolved_as_answered(&orders, &seen);
    assert_eq!(view.remaining as usize, CODES - confirmed, "stock exact");
    for (order, n) in resolutions(dir.path(), "k").await {
        assert_eq!(n, 1, "{order} resolved {n} times");
    }
    eprintln!(
        "kill -9: {} won, {} confirmed ({} answered), {} refused",
        seen.won.len(),
        confirmed,
        seen.confirmed.len(),
        seen.refused.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlines_passed_during_downtime_expire_before_the_first_claim() {
    let dir = tempfile::tempdir().unwrap();
    let first = Proc::start(dir.path());
    let client = first.client();
    client
        .create_campaign(&json!({"id": "d", "stock": 10, "hold_seconds": 1}))
        .await
        .unwrap();
    for i in 0..10 {
        let a = match client.claim("d", &format!("u{i}"), 1, None).await.unwrap() {
            ClaimReply::Processed(a) => a,
            other => panic!("{other:?}"),
        };
        assert_eq!(a.outcome, Outcome::Won);
    }
    first.signal(libc::SIGKILL);
    drop(first);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let second = Proc::start(dir.path());
    let client = second.client();
    // The very first request: a claim, and it wins a returned unit.
    let a = match client.claim("d", "late", 1, None).await.unwrap() {
        ClaimReply::Processed(a) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(a.outcome, Outcome::Won, "{a:?}");
    assert!(second
        .log
        .lock()
        .iter()
        .any(|l| l.contains("expired at start")));
}
