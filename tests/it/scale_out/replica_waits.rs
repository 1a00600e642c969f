//! `--redis-wait-replicas` with the replica gone (Sentinel, one primary, one replica).
//!
//! Before, every claim batch ran in Redis and only then learned from `WAIT` that no replica
//! had it: each claim answered 503 "outcome unknown" while the stock drained (90 → 50 for 40
//! claims), and a confirm answered 200 without waiting at all, so a failover could lose it
//! after the payment was captured. Now a batch checks the replicas in the same atomic step
//! and changes nothing without them, and a confirm (or the cancel of a pending order, also
//! decided in Redis) is answered 200 only once a replica has it.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::config::ServeConfig;
use seckill::domain::Outcome;

use crate::helpers::{settle_url, TOKEN};
use crate::servers::{pg, redis_raw, SentinelSetup};

async fn confirm(c: &Client, id: &str) -> (u16, serde_json::Value) {
    let (s, body) = c
        .admin(Method::POST, &format!("/v1/orders/{id}/confirm"), None)
        .await
        .unwrap();
    (s.as_u16(), body)
}

fn replicas_of(port: u16) -> String {
    redis_raw(port, "INFO replication").unwrap_or_default()
}

/// Waits (on a busy machine, for a while) until the primary lists `n` replicas as online.
pub(super) async fn replicas_online(port: u16, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while replicas_of(port).matches("state=online").count() < n {
        assert!(Instant::now() < deadline, "{n} replicas never came online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the primary lists no replica any more.
pub(super) async fn replica_gone(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !replicas_of(port).contains("connected_slaves:0") {
        assert!(
            Instant::now() < deadline,
            "the primary still lists its replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A server behind `redis`'s Sentinel waiting for one replica (`--redis-wait-replicas 1`).
pub(super) async fn serve_waiting_for_one(
    redis: &SentinelSetup,
    data: &std::path::Path,
) -> (seckill::app::App, Client) {
    let mut cfg = ServeConfig::ephemeral(data.into(), TOKEN);
    cfg.scale.redis = vec![redis.sentinel_url()];
    cfg.scale.redis_sentinel = Some(SentinelSetup::MASTER.into());
    cfg.scale.postgres = Some(pg().fresh_db().await);
    cfg.scale.pipeline.redis_wait_replicas = Some(1);
    let server = seckill::app::App::build(cfg)
        .await
        .expect("serve via Sentinel");
    let c = Client::new(&server.url(), TOKEN);
    (server, c)
}

/// The order id of `user`'s won claim, retried with one Idempotency-Key until processed.
async fn won_keyed(c: &Client, campaign: &str, user: &str, primary: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c
            .claim(campaign, user, 1, Some(&format!("{user}-1")))
            .await
            .unwrap()
        {
            ClaimReply::Processed(a) if a.outcome == Outcome::Won => return a.order_id.unwrap(),
            other => {
                assert!(
                    Instant::now() < deadline,
                    "{user} never won: {other:?} {}",
                    replicas_of(primary)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_replica_nothing_is_sold_or_confirmed() {
    let mut redis = SentinelSetup::start();
    replicas_online(redis.primary.port, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve_waiting_for_one(&redis, dir.path()).await;
    c.create_campaign(&json!({"id": "w", "stock": 90, "hold_seconds": 600}))
        .await
        .unwrap();
    let held = match c.claim("w", "first", 1, None).await.unwrap() {
        ClaimReply::Processed(a) if a.outcome == Outcome::Won => a.order_id.unwrap(),
        other => panic!("{other:?} {}", replicas_of(redis.primary.port)),
    };
    let doomed = match c.claim("w", "second", 1, None).await.unwrap() {
        ClaimReply::Processed(a) if a.outcome == Outcome::Won => a.order_id.unwrap(),
        other => panic!("{other:?}"),
    };
    settle_url(&c).await;
    replicas_online(redis.primary.port, 1).await;

    tokio::task::block_in_place(|| redis.replica.kill_9());
    replica_gone(redis.primary.port).await;
    for i in 0..40 {
        match c.claim("w", &format!("u{i}"), 1, None).await.unwrap() {
            ClaimReply::Refused(s, body) => {
                assert_eq!(s.as_u16(), 503, "{body}");
                let msg = body["error"]["message"].as_str().unwrap_or_default();
                assert!(msg.contains("nothing was changed"), "u{i}: {body}");
            }
            other => panic!("u{i} without a replica: {other:?}"),
        }
    }
    assert_eq!(
        c.campaign("w").await.unwrap().remaining,
        88,
        "refused claims take no stock"
    );
    // The cancel of a pending order is decided in Redis too: not "saved in the ledger".
    let (s, body) = c
        .admin(Method::POST, &format!("/v1/orders/{doomed}/cancel"), None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("retry the cancel")),
        "{body}"
    );
    let (s, body) = confirm(&c, &held).await;
    assert_eq!(
        s, 503,
        "a confirm no replica has is not answered 200: {body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("retry the confirm")),
        "{body}"
    );

    tokio::task::block_in_place(|| redis.replica.start_again());
    let deadline = Instant::now() + Duration::from_secs(30);
    let won = loop {
        // Keyed: a first try whose WAIT timed out while the replica resynced is learned by
        // the retry.
        match c.claim("w", "after", 1, Some("after-1")).await.unwrap() {
            ClaimReply::Processed(a) => break a,
            other => {
                assert!(Instant::now() < deadline, "never served again: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(won.outcome, Outcome::Won);
    let (s, body) = confirm(&c, &held).await;
    assert_eq!(
        (s, body["state"].as_str()),
        (200, Some("confirmed")),
        "{body}"
    );
    let (s, body) = c
        .admin(Method::POST, &format!("/v1/orders/{doomed}/cancel"), None)
        .await
        .unwrap();
    assert_eq!(
        (s.as_u16(), body["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    settle_url(&c).await;
    assert_eq!(c.campaign("w").await.unwrap().remaining, 88);
    server.stop().await.unwrap();
}

/// Hole: `WAIT 1` counted any replica, so with the promotable replica gone a replica Sentinel
/// never promotes (`replica-priority 0`) acknowledged every win, which a failover then lost.
/// Now only replicas Sentinel could promote count: nothing is sold or confirmed with it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_sentinel_never_promotes_does_not_count() {
    let mut redis = SentinelSetup::start_with(&[0]);
    replicas_online(redis.primary.port, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve_waiting_for_one(&redis, dir.path()).await;
    c.create_campaign(&json!({"id": "p0", "stock": 90, "hold_seconds": 600}))
        .await
        .unwrap();
    // Keyed: a first try whose wait fails while Sentinel is still discovering the replicas
    // (one it does not know counts as its favourite) is learned by the retry.
    let held = won_keyed(&c, "p0", "first", redis.primary.port).await;
    settle_url(&c).await;

    tokio::task::block_in_place(|| redis.replica.kill_9());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !replicas_of(redis.primary.port).contains("connected_slaves:1") {
        assert!(Instant::now() < deadline, "the primary still lists both");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..40 {
        match c.claim("p0", &format!("u{i}"), 1, None).await.unwrap() {
            ClaimReply::Refused(s, body) => {
                assert_eq!(s.as_u16(), 503, "{body}");
                let msg = body["error"]["message"].as_str().unwrap_or_default();
                assert!(msg.contains("nothing was changed"), "u{i}: {body}");
            }
            other => panic!("u{i} acknowledged by an unpromotable replica: {other:?}"),
        }
    }
    assert_eq!(c.campaign("p0").await.unwrap().remaining, 89);
    let (s, body) = confirm(&c, &held).await;
    assert_eq!(s, 503, "a confirm only an unpromotable replica has: {body}");

    tokio::task::block_in_place(|| redis.replica.start_again());
    let deadline = Instant::now() + Duration::from_secs(60);
    let won = loop {
        match c.claim("p0", "after", 1, Some("after-1")).await.unwrap() {
            ClaimReply::Processed(a) => break a,
            other => {
                assert!(Instant::now() < deadline, "never served again: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(won.outcome, Outcome::Won);
    let (s, body) = confirm(&c, &held).await;
    assert_eq!(
        (s, body["state"].as_str()),
        (200, Some("confirmed")),
        "{body}"
    );
    server.stop().await.unwrap();
}

/// Hole: Sentinel promotes the replica with the lowest `replica-priority` first and only then
/// the one with the highest offset, so `WAIT 1` met by a priority-100 replica while the
/// priority-2 one lags answered `won` for writes the promoted replica may never see. Now a win
/// counts only once replicas Sentinel would pick first have it: with the priority-2 replica
/// stalled (SIGSTOP, still connected to the primary), no claim is answered `won`; once it runs
/// again, selling resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_replica_sentinel_would_promote_first_is_waited_for() {
    let redis = SentinelSetup::start_with(&[2]);
    replicas_online(redis.primary.port, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve_waiting_for_one(&redis, dir.path()).await;
    c.create_campaign(&json!({"id": "pr", "stock": 1000}))
        .await
        .unwrap();
    // The sentinel learns of the second replica a few seconds after it connects.
    won_keyed(&c, "pr", "warm", redis.primary.port).await;
    let favourite = &redis.others[0];
    favourite.signal(libc::SIGSTOP);
    let storm = (0..40).map(|i| {
        let c = c.clone();
        async move { (i, c.claim("pr", &format!("u{i}"), 1, None).await.unwrap()) }
    });
    let answers = futures::future::join_all(storm).await;
    favourite.signal(libc::SIGCONT);
    for (i, a) in &answers {
        match a {
            ClaimReply::Refused(s, body) => assert_eq!(s.as_u16(), 503, "u{i}: {body}"),
            other => panic!(
                "u{i} answered while the replica Sentinel would promote had nothing: {other:?}"
            ),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let won = loop {
        match c.claim("pr", "after", 1, Some("after-1")).await.unwrap() {
            ClaimReply::Processed(a) => break a,
            other => {
                assert!(Instant::now() < deadline, "never served again: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(won.outcome, Outcome::Won);
    server.stop().await.unwrap();
}
