//! `--redis-wait-replicas` covers the waiting room's joins as it covers claims: a place is
//! told only once a replica has it, so a failover cannot take back a place that was told.
//! Without a replica a join answers 503 "outcome unknown" (the place may stay on the
//! primary); joining again once the replica is back answers the place.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use seckill::bench::client::Client;

use super::replica_waits::{replica_gone, replicas_online, serve_waiting_for_one};
use crate::servers::SentinelSetup;

async fn join(c: &Client, user: &str) -> (u16, Value) {
    let r = c
        .http()
        .post(c.url("/v1/campaigns/r/queue"))
        .json(&json!({"user_id": user}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
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

    tokio::task::block_in_place(|| redis.replica.kill_9());
    replica_gone(redis.primary.port).await;
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
    // Reads do not wait: the place told before the replica went is still told.
    let r = c
        .http()
        .get(c.url("/v1/campaigns/r/queue/first"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

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
    server.stop().await.unwrap();
}
