//! Webhook delivery in scale-out (docs/EVENTS.md "Who delivers"): two instances started with
//! the same `--webhook`, one delivering under the endpoint's lease. The deliverer is killed -9
//! mid-storm; the other takes the lease over when it lapses and every event of the feed still
//! reaches the receiver at least once, the same id always with the same body, each order's
//! events in order.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use super::procs::Seckill;
use crate::events::receiver::{check_against_feed, Receiver};
use crate::events::webhooks::{feed_of, ids, SECRET};
use crate::helpers::settle_url;
use crate::servers::{pg, RedisServer};

/// The endpoint as `client`'s instance lists it.
async fn endpoint(client: &seckill::bench::client::Client) -> Value {
    let (s, list) = client
        .admin(Method::GET, "/v1/webhooks", None)
        .await
        .unwrap();
    assert_eq!(s, 200, "{list}");
    list["endpoints"][0].clone()
}

/// The pid in a lease owner's name (`<pid>-<random>`).
fn holder_pid(e: &Value) -> Option<i32> {
    e["delivered_by"].as_str()?.split('-').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_deliverer_mid_storm_loses_no_event() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let receiver = Receiver::start(SECRET, 204);
    let flags = ["--webhook", &receiver.url(), "--webhook-secret", SECRET];
    let mut instances = [
        Seckill::serve(&urls, &postgres, &flags),
        Seckill::serve(&urls, &postgres, &flags),
    ];
    let clients: Vec<_> = instances.iter().map(|i| i.client()).collect();
    let storm_clients = clients.clone();
    let storm = tokio::spawn(async move {
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < Duration::from_secs(12) {
            let c = format!("k{n}");
            let (a, b) = (&storm_clients[n % 2], &storm_clients[(n + 1) % 2]);
            n += 1;
            if a.create_campaign(
                &json!({"id": c, "stock": 30, "per_user_limit": 1, "hold_seconds": 600}),
            )
            .await
            .is_err()
            {
                continue; // the instance was killed; the other goes on
            }
            let claims = (0..40).map(|i| {
                let (client, c) = (if i % 2 == 0 { a } else { b }, c.clone());
                async move { client.claim(&c, &format!("u{i}"), 1, None).await }
            });
            for won in futures::future::join_all(claims)
                .await
                .into_iter()
                .flatten()
            {
                if let seckill::bench::client::ClaimReply::Processed(w) = won {
                    if let Some(id) = w.order_id.filter(|_| n % 3 == 0) {
                        let _ = a
                            .admin(Method::POST, &format!("/v1/orders/{id}/confirm"), None)
                            .await;
                    }
                }
            }
        }
    });
    // Wait until one instance delivers and has delivered something, then kill it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let e = endpoint(&clients[0]).await;
        let pid = holder_pid(&e).filter(|_| e["delivered"].as_u64() > Some(0));
        if let Some(i) = pid.and_then(|p| instances.iter().position(|s| s.pid() == p)) {
            break i;
        }
        assert!(Instant::now() < deadline, "nobody delivers: {e}");
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    instances[victim].sigkill();
    let survivor = 1 - victim;
    storm.await.unwrap();
    settle_url(&clients[survivor]).await;
    let feed = feed_of(&clients[survivor]).await;
    assert!(
        feed.len() > 500,
        "a storm's worth of events: {}",
        feed.len()
    );
    let got = receiver
        .wait_for_all(&ids(&feed), Duration::from_secs(90))
        .await;
    check_against_feed(&got, &feed);
    let e = endpoint(&clients[survivor]).await;
    assert_eq!(
        holder_pid(&e),
        Some(instances[survivor].pid()),
        "the survivor took over: {e}"
    );
}
