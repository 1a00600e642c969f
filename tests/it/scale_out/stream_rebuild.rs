//! Redis goes back in time while its stream still holds orders the ledger does not have.
//!
//! Campaign Q, stock 5, limit 1. u1–u3 win; a worker reads Q-1..Q-3 and is killed -9 while
//! its insert waits on a lock of the orders table (a consumer dead mid-batch); Redis saves a
//! snapshot; u4 and u5 win and reach PostgreSQL through another worker; Redis is killed and
//! restarted from the snapshot (numbering 3, the ledger's 5). A rebuild from PostgreSQL alone
//! made u1–u3 free and 3 units remaining: they won again, and once the reclaimer inserted
//! Q-1..Q-3 PostgreSQL held 8 live orders for a total of 5. The campaign must stay fenced until
//! its stream is drained into the ledger, and then be rebuilt with all five.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Connection;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{OrderState, Outcome};

use super::procs::{wait_for, Seckill};
use crate::servers::{pg, redis_raw, RedisServer};

async fn won(c: &Client, user: &str) {
    match c.claim("Q", user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) if a.outcome == Outcome::Won => {}
        other => panic!("{user}: {other:?}"),
    }
}

/// Claims until a processed answer (503s while the campaign is fenced are retried).
async fn settled_claim(c: &Client, user: &str) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.claim("Q", user, 1, None).await.unwrap() {
            ClaimReply::Processed(a) => return a.outcome,
            ClaimReply::Refused(s, body) => {
                assert_eq!(s.as_u16(), 503, "{user}: {body}");
                assert!(Instant::now() < deadline, "{user}: still refused: {body}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Redis without persistence (restarted only from the snapshots the tests copy), a fresh
/// database, one instance without a pipeline of its own, and campaign Q created as `campaign`.
async fn start(campaign: serde_json::Value) -> (RedisServer, String, Seckill, Client) {
    let redis = RedisServer::start(&["--appendonly", "no"]);
    let db = pg().fresh_db().await;
    let serve = Seckill::serve(&[redis.url()], &db, &["--no-worker"]);
    let c = serve.client();
    c.create_campaign(&campaign).await.unwrap();
    (redis, db, serve, c)
}

/// Saves Redis's data now and returns a copy of the snapshot.
fn save(redis: &RedisServer) -> tempfile::NamedTempFile {
    let saved = redis_raw(redis.port, "SAVE").unwrap();
    assert!(saved.starts_with("+OK"), "SAVE: {saved}");
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    std::fs::copy(redis.dir().join("dump.rdb"), snapshot.path()).unwrap();
    snapshot
}

/// Kills Redis -9 and starts it again from `snapshot`.
fn restore(redis: &mut RedisServer, snapshot: &tempfile::NamedTempFile) {
    tokio::task::block_in_place(|| {
        redis.kill_9();
        std::fs::copy(snapshot.path(), redis.dir().join("dump.rdb")).unwrap();
        redis.start_again();
    });
}

/// Waits until `worker` has read `n` of Q's orders without acknowledging them (its insert is
/// held), then a moment more so that it is inside that insert.
async fn held_by(worker: &Seckill, port: u16, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while pending(port) < n {
        assert!(
            Instant::now() < deadline,
            "the worker never read the orders: {:?} {}",
            redis_raw(port, "XPENDING {c:Q}:orders seckill"),
            worker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// What an instance logs once it checked a (re)connected Redis against the ledger.
const CHECKED: &str = "Redis checked against the ledger";

/// Orders the consumer group has delivered and not acknowledged.
fn pending(port: u16) -> u64 {
    let reply = redis_raw(port, "XPENDING {c:Q}:orders seckill").unwrap_or_default();
    // `*4\r\n:N\r\n…`: the first integer is the count.
    reply
        .lines()
        .nth(1)
        .and_then(|l| l.trim().strip_prefix(':'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gate_restored_with_orders_in_its_stream_never_sells_them_again() {
    let (mut redis, db, _serve, c) =
        start(json!({"id": "Q", "stock": 5, "per_user_limit": 1})).await;
    let urls = vec![redis.url()];

    let mut blocker = sqlx::PgConnection::connect(&db).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        .execute(&mut blocker)
        .await
        .unwrap();
    for u in ["u1", "u2", "u3"] {
        won(&c, u).await;
    }
    let mut first = Seckill::worker(&urls, &db, &["--consumer", "first"]);
    held_by(&first, redis.port, 3).await;
    first.sigkill();
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    let snapshot = save(&redis);

    // Another worker that does not reclaim yet: u4 and u5 reach PostgreSQL, Q-1..Q-3 do not.
    let mut second = Seckill::worker(
        &urls,
        &db,
        &["--consumer", "second", "--reclaim-after-ms", "600000"],
    );
    for u in ["u4", "u5"] {
        won(&c, u).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.all_orders("Q").await.unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "u4 and u5 never reached PostgreSQL"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    second.sigkill();
    assert_eq!(c.all_orders("Q").await.unwrap().len(), 2);

    restore(&mut redis, &snapshot);
    let _third = Seckill::worker(
        &urls,
        &db,
        &["--consumer", "third", "--reclaim-after-ms", "500"],
    );
    for u in ["u1", "u2", "u3", "u6", "u7"] {
        let outcome = settled_claim(&c, u).await;
        assert!(
            matches!(outcome, Outcome::AlreadyClaimed | Outcome::SoldOut),
            "{u} after the restore: {outcome:?}"
        );
    }
    crate::helpers::settle_url(&c).await;
    let orders = c.all_orders("Q").await.unwrap();
    let mut users: Vec<&str> = orders.iter().map(|o| o.user_id.as_str()).collect();
    users.sort_unstable();
    assert_eq!(users, ["u1", "u2", "u3", "u4", "u5"], "{orders:?}");
    assert_eq!(c.campaign("Q").await.unwrap().remaining, 0);
}

/// Holds, a frozen consumer, Redis back to a snapshot: u1 wins Q-1 and reaches PostgreSQL;
/// Redis saves a snapshot (numbering 1); u2 and u3 win, which a worker reads while
/// its insert waits on the campaign's row lock; Redis is killed and restarted from the
/// snapshot, the instance checks it against the ledger (both at 1), and only then the worker's
/// insert goes through. The ledger now holds two pending orders under numbers the
/// restored gate never issued. Left so, no sweeper ever expired them (they are not in the
/// gate's deadlines) and the gate counted their units free: the campaign must be fenced and
/// rebuilt from the ledger with them, so they expire at their deadline like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orders_a_restored_gate_never_issued_are_taken_into_it() {
    let (mut redis, db, serve, c) = start(json!(
        {"id": "Q", "stock": 5, "per_user_limit": 1, "hold_seconds": 2}
    ))
    .await;
    let urls = vec![redis.url()];
    won(&c, "u1").await;
    let mut first = Seckill::worker(&urls, &db, &["--consumer", "first"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.all_orders("Q").await.unwrap().is_empty()
        || redis_raw(redis.port, "XLEN {c:Q}:orders").unwrap_or_default() != ":0\r\n"
    {
        assert!(Instant::now() < deadline, "Q-1 never reached PostgreSQL");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.sigkill();
    let snapshot = save(&redis);

    let mut blocker = sqlx::PgConnection::connect(&db).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT 1 FROM campaigns WHERE id = 'Q' FOR UPDATE")
        .execute(&mut blocker)
        .await
        .unwrap();
    for u in ["u2", "u3"] {
        won(&c, u).await;
    }
    let stale = Seckill::worker(
        &urls,
        &db,
        &["--consumer", "stale", "--reclaim-after-ms", "600000"],
    );
    held_by(&stale, redis.port, 2).await;
    let checks = || serve.log_text().matches(CHECKED).count();
    let before = checks();
    restore(&mut redis, &snapshot);
    wait_for(
        "the instance's check of the restored Redis",
        Duration::from_secs(20),
        || checks() > before,
    )
    .await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();

    // Every order expires at its deadline, in the ledger as in the gate, and every unit is
    // free again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let orders = c.all_orders("Q").await.unwrap();
        let states: Vec<(&str, OrderState)> = orders
            .iter()
            .map(|o| (o.order_id.as_str(), o.state))
            .collect();
        let remaining = c
            .campaign_within("Q", Duration::from_secs(10))
            .await
            .map(|v| v.remaining);
        let expired = orders.len() == 3 && states.iter().all(|(_, s)| *s == OrderState::Expired);
        if expired && matches!(remaining, Ok(5)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "orders {states:?}, remaining {remaining:?}; the worker: {}",
            stale.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
