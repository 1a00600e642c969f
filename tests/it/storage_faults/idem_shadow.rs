//! One Idempotency-Key, one order, across an unknown commit, a prune and a kill -9.
//!
//! The key's first claim is refused (`paused`) and that answer is kept for the short
//! retention. The in-process re-read after an unknown commit forgets the aged rejection, so the
//! key's next claim wins; that `won` must replace the rejection in the ledger (it was written
//! with `DO NOTHING` against the old row, which the next prune deleted, and after a restart
//! the same key won a second order).

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{ClaimAnswer, Outcome};

use crate::process::Proc;

fn serve(data: &str, faults: &str) -> Proc {
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        crate::helpers::TOKEN,
        "--data",
        data,
        "--idempotency-rejected-secs",
        "2",
    ];
    Proc::spawn(&args, &[("SECKILL_FAULTS", faults)])
}

async fn claim(c: &Client, key: &str) -> ClaimAnswer {
    match c.claim("c", "u1", 1, Some(key)).await.unwrap() {
        ClaimReply::Processed(a) => a,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_won_answer_replaces_a_forgotten_rejection_of_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    // Batches: 1 create, 2 pause, 3 the rejection, 4 the resume (committed, reported unknown).
    let server = serve(data, "commit_unknown_after=4");
    let c = server.client();
    c.create_campaign(&json!({"id": "c", "stock": 10, "per_user_limit": 2}))
        .await
        .unwrap();
    let (s, _) = c
        .admin(Method::POST, "/v1/campaigns/c/pause", None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 200);
    assert_eq!(claim(&c, "K").await.outcome, Outcome::Paused);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (s, _) = c
        .admin(Method::POST, "/v1/campaigns/c/resume", None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 503, "the resume's commit is reported unknown");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let won = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no win after the re-read"
        );
        match c.claim("c", "u1", 1, Some("K")).await.unwrap() {
            ClaimReply::Processed(a) if a.outcome == Outcome::Won => break a,
            ClaimReply::Processed(a) => panic!("{a:?}"),
            ClaimReply::Refused(..) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    // Prunes of rejections run every second; the rejection's row is older than 2 s.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(claim(&c, "K").await, won, "replayed before the restart");
    server.signal(libc::SIGKILL);
    drop(server);

    let again = serve(data, "");
    let c = again.client();
    assert_eq!(
        claim(&c, "K").await,
        won,
        "replayed after kill -9 and restart"
    );
    let orders = c.all_orders("c").await.unwrap();
    assert_eq!(orders.len(), 1, "one key, one order: {orders:?}");
}

/// The ledgers refuse an answer that would shadow a kept `won` of the same key (the engine
/// writes an answer only for a key it does not remember, so such a write is a contradiction);
/// a rejection is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledgers_never_let_an_answer_shadow_a_won() {
    use seckill::ledger::{IdemRecord, Ledger, LedgerWrite, PgLedger, SqliteLedger, WriteFault};
    let rec = |outcome: Outcome, order: Option<&str>| {
        let mut answer = ClaimAnswer::bare(outcome);
        answer.order_id = order.map(str::to_owned);
        LedgerWrite::Idem(IdemRecord {
            campaign_id: "c".into(),
            user_id: "u1".into(),
            key: "K".into(),
            answer,
            created_at: seckill::domain::now(),
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteLedger::open(dir.path(), false).await.unwrap();
    let pg = PgLedger::open(&crate::servers::pg().fresh_db().await, 2)
        .await
        .unwrap();
    let ledgers: [(&str, &dyn Ledger); 2] = [("sqlite", &sqlite), ("postgres", &pg)];
    for (name, ledger) in ledgers {
        ledger.apply(&[&rec(Outcome::Paused, None)]).await.unwrap();
        ledger.apply(&[&rec(Outcome::SoldOut, None)]).await.unwrap();
        ledger
            .apply(&[&rec(Outcome::Won, Some("c-1"))])
            .await
            .unwrap_or_else(|e| panic!("{name}: a won replaces a rejection: {e:#}"));
        for shadow in [rec(Outcome::Won, Some("c-2")), rec(Outcome::SoldOut, None)] {
            let e = ledger.apply(&[&shadow]).await.unwrap_err();
            assert!(format!("{e:#}").contains("shadow a won"), "{name}: {e:#}");
            if name == "sqlite" {
                assert!(
                    matches!(Some(&e), Some(WriteFault::Diverged(_))),
                    "{name}: a contradiction makes the engine re-read: {e:#}"
                );
            }
        }
    }
}
