//! Redis settings the guarantees depend on: an evicting `maxmemory-policy` refuses to start
//! (`serve` and `worker`) unless `--allow-redis-eviction`; the same policy set at runtime makes
//! claims answer 503 "nothing was changed" within a couple of seconds, until it is restored;
//! AOF off is warned about once; `/healthz` and `/metrics` show the settings.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::procs::Seckill;
use super::redis_outage::{check_orders, load, Log, Seen};
use crate::helpers::TOKEN;
use crate::servers::{pg, redis_raw, RedisServer};

fn run_to_exit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .expect("the seckill binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_evicting_redis_is_refused_at_start() {
    let redis = RedisServer::start(&["--maxmemory-policy", "allkeys-lru"]);
    let db = pg().fresh_db().await;
    let url = redis.url();
    let serve = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        TOKEN,
        "--redis",
        &url,
        "--postgres",
        &db,
    ];
    let worker = ["worker", "--redis", &url, "--postgres", &db];
    for args in [&serve[..], &worker[..]] {
        let out = tokio::task::block_in_place(|| run_to_exit(args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} started: {stderr}", args[0]);
        assert!(
            stderr.contains("maxmemory-policy allkeys-lru")
                && stderr.contains("--allow-redis-eviction"),
            "{} names the policy and the override: {stderr}",
            args[0]
        );
    }
    // With the override, named for its risk, it starts (and says so).
    let allowed = Seckill::serve(std::slice::from_ref(&url), &db, &["--allow-redis-eviction"]);
    assert!(allowed.log_text().contains("answered wins can be lost"));
}

async fn claims_refused_since(log: &Log, since: Instant) -> bool {
    log.lock()
        .iter()
        .any(|c| c.start > since && matches!(c.seen, Seen::Unchanged))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eviction_switched_on_at_runtime_refuses_claims_until_restored() {
    // No AOF: warned about once.
    let redis = RedisServer::start(&[]);
    let db = pg().fresh_db().await;
    let serve = Seckill::serve(&[redis.url()], &db, &[]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "evict", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let health: serde_json::Value = client
        .http()
        .get(client.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["redis_settings"]["maxmemory_policy"], "noeviction");
    assert_eq!(health["redis_settings"]["appendonly"], false);
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let tasks = load(
        std::slice::from_ref(&client),
        "evict",
        8,
        stop.clone(),
        log.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    let set = Instant::now();
    let reply = redis_raw(redis.port, "CONFIG SET maxmemory-policy allkeys-lru").unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    while !claims_refused_since(&log, set).await {
        assert!(
            set.elapsed() < Duration::from_secs(5),
            "claims still served 5 s after Redis started evicting"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused_after = set.elapsed();
    let health = client
        .http()
        .get(client.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 503);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["redis_settings"]["maxmemory_policy"], "allkeys-lru");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let restored = Instant::now();
    redis_raw(redis.port, "CONFIG SET maxmemory-policy noeviction").unwrap();
    let won_again = loop {
        let won = log.lock().iter().any(|c| {
            c.start > restored && matches!(&c.seen, Seen::Answer(a) if a.order_id.is_some())
        });
        if won {
            break restored.elapsed();
        }
        assert!(
            restored.elapsed() < Duration::from_secs(5),
            "claims stay refused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!("claims refused {refused_after:?} after the policy changed, won again {won_again:?} after it was restored");
    let log_text = serve.log_text();
    assert_eq!(log_text.matches("AOF is off").count(), 1, "{log_text}");
    let text = client
        .http()
        .get(client.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("seckill_redis_settings{maxmemory_policy=\"noeviction\",appendonly=\"no\""),
        "{text}"
    );
    check_orders(&client, "evict", &log).await;
}
