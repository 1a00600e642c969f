//! A restart after Redis lost everything serves the live campaigns first (issue 34): the
//! ledger holds closed and ended campaigns with buyers and one live campaign; Redis is flushed
//! while the server is down. On restart the live campaign sells exactly what is left, per-user
//! limits hold, claims on the dormant campaigns answer `closed` / `ended` and their views are
//! right without the campaigns ever being written back into Redis; a keyed claim and a cancel
//! rebuild the one they touch. And a gate from an older snapshot that still says `active` for
//! a campaign the ledger closed never sells from it.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use reqwest::Method;
use serde_json::json;

use seckill::domain::{Outcome, Status};

use crate::helpers::{App, Deploy};

/// Buyers of each dormant campaign.
const BUYERS: usize = 12;

async fn redis_conn(app: &App) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(app.redis[0].as_str()).unwrap();
    client
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap()
}

/// `BUYERS` buyers b0… win one unit each of `id`.
async fn sell(app: &App, id: &str) {
    for i in 0..BUYERS {
        assert_eq!(
            app.claim(id, &format!("b{i}"), 1).await.outcome,
            Outcome::Won
        );
    }
}

async fn close(app: &App, id: &str) {
    let (s, v) = app
        .admin(Method::POST, &format!("/v1/campaigns/{id}/close"), None)
        .await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flushed_redis_serves_live_campaigns_and_answers_dormant_ones() {
    let mut app = App::spawn(Deploy::ScaleOut).await;
    let ends = chrono::Utc::now() + chrono::Duration::seconds(3);
    app.create(
        json!({"id": "ended", "stock": 50, "per_user_limit": 1, "ends_at": ends.to_rfc3339()}),
    )
    .await;
    sell(&app, "ended").await;
    for id in ["shut", "unread"] {
        app.create(json!({"id": id, "stock": 50, "per_user_limit": 1}))
            .await;
        sell(&app, id).await;
    }
    let cancelled = app.claim("shut", "gone", 1).await.order_id.unwrap();
    app.settle().await;
    let (s, v) = app
        .admin(
            Method::POST,
            &format!("/v1/orders/{cancelled}/cancel"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    close(&app, "shut").await;
    close(&app, "unread").await;
    app.create(json!({"id": "live", "stock": 10, "per_user_limit": 2}))
        .await;
    assert_eq!(app.claim("live", "two", 2).await.outcome, Outcome::Won);
    assert_eq!(app.claim("live", "one", 1).await.outcome, Outcome::Won);
    app.settle().await;
    // Past its end by more than the 5 s margin, so dormant by the ledger and Redis's clock.
    let dormant_at = ends + chrono::Duration::seconds(6);
    tokio::time::sleep(
        (dormant_at - chrono::Utc::now())
            .to_std()
            .unwrap_or_default(),
    )
    .await;

    app.stop_keep().await;
    let mut conn = redis_conn(&app).await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    app.start_again().await;

    // The live campaign: exactly 7 units left, limits held across the loss.
    assert_eq!(
        app.claim("live", "two", 1).await.outcome,
        Outcome::AlreadyClaimed
    );
    assert_eq!(
        app.claim("live", "one", 2).await.outcome,
        Outcome::OverLimit
    );
    let again = app.claim("live", "one", 1).await;
    assert_eq!(again.outcome, Outcome::Won);
    assert_eq!(again.order_id.as_deref(), Some("live-3"), "numbering kept");
    for i in 0..6 {
        let a = app.claim("live", &format!("n{i}"), 1).await;
        assert_eq!(a.outcome, Outcome::Won, "n{i}: {a:?}");
    }
    let last = app.claim("live", "n6", 1).await;
    assert_eq!((last.outcome, last.remaining), (Outcome::SoldOut, Some(0)));

    // Dormant campaigns: answered from their definition, buyers or not.
    for user in ["b0", "newcomer"] {
        assert_eq!(app.claim("shut", user, 1).await.outcome, Outcome::Closed);
        assert_eq!(app.claim("ended", user, 1).await.outcome, Outcome::Ended);
    }
    let shut = app.client.campaign("shut").await.unwrap();
    assert_eq!(
        (shut.status, shut.total, shut.remaining),
        (Status::Closed, 50, 50 - BUYERS as u64),
        "the cancelled order's unit is back"
    );
    let ended = app.client.campaign("ended").await.unwrap();
    assert_eq!(
        (
            ended.status,
            ended.remaining,
            ended.ends_at.map(|t| t.timestamp())
        ),
        (Status::Active, 50 - BUYERS as u64, Some(ends.timestamp()))
    );
    assert_eq!(
        app.client.all_orders("shut").await.unwrap().len(),
        BUYERS + 1
    );

    // Answered from the ledger: no dormant campaign was written back into Redis, not even
    // after the catch-up task ran.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in ["shut", "ended", "unread"] {
        let there: bool = conn.exists(format!("{{c:{id}}}:meta")).await.unwrap();
        assert!(!there, "dormant campaign {id} was rebuilt into Redis");
    }
    // A keyed claim answered `closed` or `ended` needs no keeping (no change can alter it):
    // answered from the ledger too, the same on a replay, nothing rebuilt.
    for _ in 0..2 {
        let keyed = app.claim_with_key("ended", "b1", 1, Some("k-1")).await;
        assert_eq!(keyed.outcome, Outcome::Ended);
    }
    let there: bool = conn.exists("{c:ended}:meta").await.unwrap();
    assert!(!there, "a keyed ended claim rebuilt the campaign");
    // A cancel needs the buyers: rebuilt whole, then the unit goes back.
    let (s, v) = app
        .admin(Method::POST, "/v1/orders/unread-1/cancel", None)
        .await;
    assert_eq!((s, v["state"].as_str()), (200, Some("cancelled")), "{v}");
    let holders: u64 = conn.hlen("{c:unread}:users").await.unwrap();
    assert_eq!(
        holders,
        BUYERS as u64 - 1,
        "every other buyer in Redis once rebuilt"
    );
    let unread = app.client.campaign("unread").await.unwrap();
    assert_eq!(unread.remaining, 50 - BUYERS as u64 + 1);
    assert_eq!(app.claim("unread", "b1", 1).await.outcome, Outcome::Closed);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_gate_never_sells_from_a_campaign_the_ledger_closed() {
    let mut app = App::spawn(Deploy::ScaleOut).await;
    for id in ["level", "behind"] {
        app.create(json!({"id": id, "stock": 10, "per_user_limit": 1}))
            .await;
        assert_eq!(app.claim(id, "a", 1).await.outcome, Outcome::Won);
        assert_eq!(app.claim(id, "b", 1).await.outcome, Outcome::Won);
        close(&app, id).await;
    }
    app.settle().await;
    app.stop_keep().await;
    // As an older snapshot holds them: taken before the close ("level": same numbering), and
    // before b's claim too ("behind").
    let mut conn = redis_conn(&app).await;
    let _: () = conn
        .hset("{c:level}:meta", "status", "active")
        .await
        .unwrap();
    let _: () = redis::pipe()
        .hset("{c:behind}:meta", "status", "active")
        .hset("{c:behind}:meta", "remaining", 9)
        .hdel("{c:behind}:users", "b")
        .set("{c:behind}:seq", 1)
        .query_async(&mut conn)
        .await
        .unwrap();
    app.start_again().await;

    for id in ["level", "behind"] {
        for user in ["b", "c"] {
            let a = app.claim(id, user, 1).await;
            assert_eq!(a.outcome, Outcome::Closed, "{id} {user}: {a:?}");
        }
        let v = app.client.campaign(id).await.unwrap();
        assert_eq!((v.status, v.remaining), (Status::Closed, 8), "{id}");
    }
    app.stop().await;
}

/// Redis restored from a snapshot while the instance serves (taken before a close and a
/// pause): the freshness check gives both gates the ledger's status before it lets claims
/// through, so neither sells in the moment before the catch-up task would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restored_while_serving_never_sells_from_a_campaign_the_ledger_stopped() {
    use seckill::bench::client::ClaimReply;

    use super::procs::Seckill;
    use crate::helpers::settle_url;
    use crate::servers::{pg, redis_raw, RedisServer};

    let mut redis = RedisServer::start(&["--appendonly", "no"]);
    let db = pg().fresh_db().await;
    let a = Seckill::serve(&[redis.url()], &db, &[]);
    let client = a.client();
    for id in ["cl", "pa"] {
        let spec = json!({"id": id, "stock": 10, "per_user_limit": 1});
        client.create_campaign(&spec).await.unwrap();
        match client.claim(id, "a", 1, None).await.unwrap() {
            ClaimReply::Processed(won) => assert_eq!(won.outcome, Outcome::Won),
            other => panic!("{other:?}"),
        }
    }
    settle_url(&client).await;
    assert!(redis_raw(redis.port, "SAVE").unwrap().starts_with("+OK"));
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    std::fs::copy(redis.dir().join("dump.rdb"), snapshot.path()).unwrap();
    for (id, to) in [("cl", "close"), ("pa", "pause")] {
        let path = format!("/v1/campaigns/{id}/{to}");
        let (s, v) = client.admin(Method::POST, &path, None).await.unwrap();
        assert_eq!(s.as_u16(), 200, "{v}");
    }
    tokio::task::block_in_place(|| {
        redis.kill_9();
        std::fs::copy(snapshot.path(), redis.dir().join("dump.rdb")).unwrap();
        redis.start_again();
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    for (id, want) in [("cl", Outcome::Closed), ("pa", Outcome::Paused)] {
        loop {
            match client.claim(id, "x", 1, None).await.unwrap() {
                ClaimReply::Processed(got) => {
                    assert_eq!(got.outcome, want, "{id}: {got:?}");
                    break;
                }
                ClaimReply::Refused(status, _) if status.as_u16() == 503 => {
                    assert!(Instant::now() < deadline, "claims still refused after 30 s");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                ClaimReply::Refused(status, body) => panic!("{id}: {status} {body}"),
            }
        }
    }
}
