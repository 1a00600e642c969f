//! `--redis-wait-replicas` covers the waiting room's joins as it covers claims: a place is
//! told only once a replica has it, so a failover cannot take back a place that was told.
//! Without a replica a join answers 503 "outcome unknown" (the place may stay on the
//! primary); joining again once the replica is back answers the place. A status read tells a
//! place only once a replica is known to have it and the pre-queue's freeze it rests on.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use seckill::bench::client::Client;

use super::replica_waits::{replica_gone, replicas_online, serve_waiting_for_one};
use crate::servers::{redis_raw, SentinelSetup};

async fn join(c: &Client, user: &str) -> (u16, Value) {
    join_in(c, "r", user).await
}

async fn join_in(c: &Client, campaign: &str, user: &str) -> (u16, Value) {
    let (s, body) = crate::helpers::queue_join(c, campaign, user).await;
    (s.as_u16(), body)
}

async fn status(c: &Client, campaign: &str, user: &str) -> (u16, Value) {
    let (s, body) = crate::helpers::queue_read(c, campaign, user).await;
    (s.as_u16(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_replica_no_place_is_told() {
    let mut redis = SentinelSetup::start();
    replicas_online(redis.primary.port, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve_waiting_for_one(&redis, dir.path()).await;
    c.create_campaign(&json!({"id": "r", "stock": 10, "waiting_room": {"admit_per_second": 1}}))
        .await
        .unwrap();
    let (s, first) = join(&c, "first").await;
    assert_eq!(
        (s, first["state"].as_str()),
        (200, Some("admitted")),
        "{first}"
    );
    // A second room, its pre-queue drawn once the replica is gone.
    let starts = chrono::Utc::now() + chrono::TimeDelta::seconds(5);
    c.create_campaign(&json!({"id": "p", "stock": 10, "starts_at": starts,
        "waiting_room": {"admit_per_second": 1}}))
        .await
        .unwrap();
    let (s, early) = join_in(&c, "p", "early").await;
    assert_eq!((s, early["state"].as_str()), (200, Some("prequeue")));
    // A third, its pre-queue joined once the replica is gone.
    let in_an_hour = chrono::Utc::now() + chrono::TimeDelta::hours(1);
    c.create_campaign(&json!({"id": "h", "stock": 10, "starts_at": in_an_hour,
        "waiting_room": {"admit_per_second": 1}}))
        .await
        .unwrap();

    tokio::task::block_in_place(|| redis.replica.kill_9());
    replica_gone(redis.primary.port).await;
    // Nor is a pre-queue join no replica has read back as one.
    let (s, body) = join_in(&c, "h", "unsure").await;
    assert_eq!(s, 503, "{body}");
    let (s, read) = status(&c, "h", "unsure").await;
    assert_eq!(s, 503, "a pre-queue join no replica has told: {read}");
    for user in ["second", "third"] {
        let (s, body) = join(&c, user).await;
        assert_eq!(s, 503, "{user} told a place no replica has: {body}");
        assert_eq!(body["error"]["outcome"], "unknown", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("join again")),
            "{body}"
        );
    }
    // A place a replica is known to have is read without waiting; one it may lack is not told.
    let (s, read) = status(&c, "r", "first").await;
    assert_eq!((s, &read["ticket"]), (200, &first["ticket"]), "{read}");
    let (s, read) = status(&c, "r", "second").await;
    assert_eq!(
        s, 503,
        "second's place told before a replica has it: {read}"
    );
    assert!(
        read["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("read it again")),
        "{read}"
    );
    // Nor a pre-queue place drawn by a freeze no replica has.
    while chrono::Utc::now() < starts {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (s, read) = status(&c, "p", "early").await;
    assert_eq!(s, 503, "a place drawn without a replica told: {read}");

    tokio::task::block_in_place(|| redis.replica.start_again());
    let deadline = Instant::now() + Duration::from_secs(30);
    let second = loop {
        match join(&c, "second").await {
            (200, body) => break body,
            other => {
                assert!(Instant::now() < deadline, "never placed again: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // The place of the try answered 503, kept on the primary: the slot right after "first"
    // (one a second), ahead of "third", not a new one behind it.
    let at = |v: &Value| -> chrono::DateTime<chrono::Utc> {
        serde_json::from_value(v["admitted_at"].clone()).unwrap()
    };
    assert_eq!(second["state"], "admitted", "{second}");
    assert_eq!(
        at(&second) - at(&first),
        chrono::TimeDelta::seconds(1),
        "{first} {second}"
    );
    let (s, again) = join(&c, "second").await;
    assert_eq!((s, &again["ticket"]), (200, &second["ticket"]), "{again}");
    let (s, read) = status(&c, "r", "second").await;
    assert_eq!((s, &read["ticket"]), (200, &second["ticket"]), "{read}");
    let (s, read) = status(&c, "p", "early").await;
    assert_eq!(
        (s, read["state"].as_str()),
        (200, Some("admitted")),
        "{read}"
    );
    let (s, read) = status(&c, "h", "unsure").await;
    assert_eq!(
        (s, read["state"].as_str()),
        (200, Some("prequeue")),
        "{read}"
    );
    server.stop().await.unwrap();
}

/// `WAIT` calls the server at `port` has run.
fn waits_run(port: u16) -> u64 {
    let stats = redis_raw(port, "INFO commandstats").unwrap_or_default();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Joins arriving together share their `WAIT`s, and every join answered is on the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_joins_share_their_waits() {
    let redis = SentinelSetup::start();
    replicas_online(redis.primary.port, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve_waiting_for_one(&redis, dir.path()).await;
    c.create_campaign(&json!({"id": "r", "stock": 10, "waiting_room": {"admit_per_second": 50}}))
        .await
        .unwrap();
    const JOINS: u64 = 400;
    let before = waits_run(redis.primary.port);
    // A join answered 503 (a round that failed on a loaded machine) is sent again until placed.
    futures::future::join_all((0..JOINS).map(|i| {
        let c = c.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match join(&c, &format!("u{i}")).await {
                    (200, _) => return,
                    (503, _) if Instant::now() < deadline => {}
                    other => panic!("u{i}: {other:?}"),
                }
            }
        }
    }))
    .await;
    let waits = waits_run(redis.primary.port) - before;
    // Read from the replica itself: every join answered is there.
    let on_replica = redis_raw(redis.replica.port, "ZCARD {c:r}:room:late").unwrap_or_default();
    assert_eq!(on_replica.trim(), format!(":{JOINS}"), "{on_replica:?}");
    assert!(
        waits < JOINS / 2,
        "{JOINS} joins arriving together ran {waits} WAITs"
    );
    server.stop().await.unwrap();
}
