//! One client flooding claims with fresh Idempotency-Keys: what the server keeps stays within
//! the documented bound (answers of claims that changed nothing: at most
//! --idempotency-max-per-user per user and --idempotency-max-rejected per campaign), while
//! the answers that matter (won) are kept and replayed.

use std::time::Instant;

use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::bench::fire::{self, Shot};
use seckill::domain::{ClaimAnswer, Outcome};

use super::rss_kib;
use crate::helpers::{App, Deploy, TOKEN};
use crate::process::Proc;

fn keyed(users: impl Iterator<Item = String>, tag: &str) -> Vec<Shot> {
    users
        .enumerate()
        .map(|(i, user)| Shot {
            user,
            qty: 1,
            key: Some(format!("{tag}-{i:08}-0123456789abcdef0123456789abcdef")),
        })
        .collect()
}

async fn claim(client: &Client, campaign: &str, user: &str, key: &str) -> ClaimAnswer {
    match client.claim(campaign, user, 1, Some(key)).await.unwrap() {
        ClaimReply::Processed(a) => a,
        ClaimReply::Refused(s, body) => panic!("refused {s}: {body}"),
    }
}

async fn rows(db: &std::path::Path) -> i64 {
    use sqlx::ConnectOptions;
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true)
        .connect()
        .await
        .expect("ledger opens");
    sqlx::query_scalar("SELECT COUNT(*) FROM idempotency")
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

const FLOOD: usize = 5_000;
const MANY: usize = 10_000;
const MAX_REJECTED: usize = 2_000;

/// Embedded, the real binary: one user sends 5,000 claims with fresh keys, then 10,000 users
/// one each; the ledger keeps the won answer and 2,000 rejections (64 of them the flooder's),
/// RSS stays flat, the won answer still replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_flood_of_fresh_keys_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_owned();
    let max_rejected = MAX_REJECTED.to_string();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        TOKEN,
        "--data",
        &data,
        "--idempotency-max-rejected",
        &max_rejected,
    ];
    let mut proc = Proc::spawn(&args, &[]);
    let client = proc.client();
    client
        .create_campaign(&json!({"id": "flood", "stock": 1}))
        .await
        .unwrap();
    let won = claim(&client, "flood", "flooder", "first").await;
    assert_eq!(won.outcome, Outcome::Won);
    let kept = claim(&client, "flood", "flooder", "second").await;
    assert_eq!(kept.outcome, Outcome::AlreadyClaimed);

    let before = rss_kib(proc.child.id());
    let t = Instant::now();
    let shots = keyed(std::iter::repeat_n("flooder".to_owned(), FLOOD), "flood");
    let report = fire::storm(&client, "flood", shots, 32).await;
    assert_eq!(report.count("already_claimed"), FLOOD as u64);
    let one_user = rss_kib(proc.child.id());
    let shots = keyed((0..MANY).map(|i| format!("crowd-{i}")), "crowd");
    let report = fire::storm(&client, "flood", shots, 32).await;
    assert_eq!(report.count("sold_out"), MANY as u64);
    let after = rss_kib(proc.child.id());
    eprintln!(
        "embedded: {FLOOD} fresh keys of one user then {MANY} users in {:?}; RSS {before} KiB -> {one_user} KiB -> {after} KiB",
        t.elapsed()
    );

    // The won answer and a kept rejection replay; the win is never claimed twice.
    assert_eq!(claim(&client, "flood", "flooder", "first").await, won);
    assert_eq!(claim(&client, "flood", "flooder", "second").await, kept);
    assert!(
        after - before < 64 * 1024,
        "RSS grew by {} KiB",
        after - before
    );

    proc.signal(libc::SIGTERM);
    let status = tokio::task::spawn_blocking(move || proc.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "graceful stop: {status:?}");
    let n = rows(&dir.path().join("seckill.db")).await;
    let bound = 1 + MAX_REJECTED as i64;
    eprintln!("embedded: {n} idempotency rows kept (bound {bound})");
    assert_eq!(
        n, bound,
        "the won answer and exactly the capped rejections are kept"
    );
}

/// Scale-out: the same flood keeps at most 64 answer keys for the user in Redis, and the
/// won answer replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_flood_of_fresh_keys_stays_bounded() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "flood", "stock": 1})).await;
    let won = app
        .claim_with_key("flood", "flooder", 1, Some("first"))
        .await;
    assert_eq!(won.outcome, Outcome::Won);
    let shots = keyed(std::iter::repeat_n("flooder".to_owned(), FLOOD), "flood");
    let report = fire::storm(&app.client, "flood", shots, 32).await;
    assert_eq!(report.count("already_claimed"), FLOOD as u64);
    assert_eq!(
        app.claim_with_key("flood", "flooder", 1, Some("first"))
            .await,
        won
    );

    let redis = redis::Client::open(app.redis[0].as_str()).unwrap();
    let mut conn = redis
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{c:flood}:idem:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let used: u64 = redis::cmd("INFO")
        .arg("memory")
        .query_async::<String>(&mut conn)
        .await
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let per_key: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(keys.iter().find(|k| !k.ends_with(":first")).unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    eprintln!(
        "scale-out: {} answer keys kept after {FLOOD} fresh keys of one user; Redis used_memory {used} B, {per_key} B per rejection key",
        keys.len()
    );
    assert!(
        keys.len() <= 1 + 64,
        "{} idempotency keys kept for one user",
        keys.len()
    );
    assert!(keys.len() > 64, "the answers within the cap are kept");
}
