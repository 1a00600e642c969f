//! Commits whose outcome the engine cannot know: SQLite reports an I/O error after the batch
//! reached the file, or the writer panics mid-batch. Nothing may be answered `won` for such a
//! batch; the engine re-reads its state from the ledger in process and sells again.

use std::time::Duration;

use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::domain::Outcome;

use super::{verify, won, Load};
use crate::process::Proc;

async fn unknown_commit_recovers_in_process(fault: &str, log_says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        crate::helpers::TOKEN,
        "--data",
        data,
    ];
    let server = Proc::spawn(&args, &[("SECKILL_FAULTS", fault)]);
    let client = server.client();
    client
        .create_campaign(&json!({"id": "amb", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let load = Load::start(&client, "amb", 8);
    let recovered = || {
        server
            .log
            .lock()
            .iter()
            .any(|l| l.contains("engine state re-read from the ledger"))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !recovered() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no in-process recovery"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        server.log.lock().iter().any(|l| l.contains(log_says)),
        "the log names the fault ({log_says})"
    );
    let before = load.seen.count(won);
    load.until(Duration::from_secs(10), "wins after the recovery", |s| {
        s.count(won) > before + 100
    })
    .await;
    let seen = load.stop().await;
    let unknown = seen.count(ClaimReply::outcome_unknown);
    assert!(
        unknown > 0,
        "the failed batch's claims were told the outcome is unknown"
    );

    // A retry with the same key learns what really happened.
    let keyed: Vec<(String, String)> = seen
        .replies
        .lock()
        .iter()
        .filter(|(_, k, r)| k.is_some() && r.outcome_unknown())
        .map(|(u, k, _)| (u.clone(), k.clone().unwrap()))
        .collect();
    for (user, key) in &keyed {
        match client.claim("amb", user, 1, Some(key)).await.unwrap() {
            ClaimReply::Processed(a) if a.outcome == Outcome::Won => {
                let id = a.order_id.unwrap();
                let order = client
                    .order(&id)
                    .await
                    .unwrap()
                    .expect("the replayed win exists");
                assert_eq!(&order.user_id, user);
            }
            other => panic!("a retry after an unknown outcome must be processed: {other:?}"),
        }
    }
    let orders = verify(&client, "amb", &seen).await;
    eprintln!(
        "{fault}: {} won, {unknown} outcome-unknown 503s ({} keyed retries), {orders} orders",
        seen.count(won),
        keyed.len()
    );
    drop(server);
    let again = Proc::spawn(&args, &[]);
    let after = verify(&again.client(), "amb", &seen).await;
    assert!(
        after >= orders,
        "keyed retries may add orders, never remove them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_io_error_after_commit_is_never_acknowledged_and_the_engine_re_reads_the_ledger() {
    unknown_commit_recovers_in_process("commit_unknown_after=30", "unknown outcome").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_ledger_writer_loses_nothing_and_the_engine_recovers() {
    unknown_commit_recovers_in_process("writer_panic_after=30", "the ledger writer panicked").await;
}
