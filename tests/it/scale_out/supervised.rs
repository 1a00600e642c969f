//! A background task dying under load (the test hook `SECKILL_TEST_PANIC` of
//! `seckill::supervise` kills the pipeline between its PostgreSQL commit and its Redis
//! acknowledgement): `/healthz` turns 503, claims are refused with "nothing was changed" once it
//! has been down past the grace, the task is restarted and replays its entries without
//! doubling any; a task that keeps dying makes the process exit with status 70.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::procs::Seckill;
use super::redis_outage::{check_orders, load, Log, Seen};
use crate::servers::{pg, RedisServer};

async fn health(client: &seckill::bench::client::Client) -> u16 {
    match client.http().get(client.url("/healthz")).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_pipeline_is_restarted_and_claims_are_refused_meanwhile() {
    let redis = RedisServer::start_aof();
    let db = pg().fresh_db().await;
    // Three deaths: restarts after 0.5 s, 1 s and 2 s; the last gap exceeds the 1 s grace.
    let serve = Seckill::serve_env(
        &[redis.url()],
        &db,
        &[],
        &[("SECKILL_TEST_PANIC", "pipeline:3")],
    );
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "sup", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let tasks = load(
        std::slice::from_ref(&client),
        "sup",
        8,
        stop.clone(),
        log.clone(),
    );

    let started = Instant::now();
    let mut unhealthy = false;
    while started.elapsed() < Duration::from_secs(20) {
        unhealthy |= health(&client).await == 503;
        let restarts = serve
            .log_text()
            .matches("background task restarted")
            .count();
        if unhealthy && restarts == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(unhealthy, "healthz never reported the dead pipeline");
    let recovered = Instant::now();
    while health(&client).await != 200 {
        assert!(
            recovered.elapsed() < Duration::from_secs(10),
            "healthz stays 503 after the restart: {}",
            serve.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let seen = log.lock().clone();
    let refused = seen
        .iter()
        .filter(|c| matches!(c.seen, Seen::Unchanged))
        .count();
    let after = seen
        .iter()
        .filter(|c| c.end > recovered && matches!(&c.seen, Seen::Answer(a) if a.order_id.is_some()))
        .count();
    eprintln!(
        "claims {}, refused while the pipeline was down {refused}, won after it recovered {after}",
        seen.len()
    );
    assert!(
        refused > 0,
        "no claim was refused while the pipeline was down > 1 s"
    );
    assert!(after > 0, "claims win again after the restart");
    // The pipeline died three times after committing and before acknowledging: every order
    // is in PostgreSQL once.
    check_orders(&client, "sup", &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_that_keeps_dying_makes_the_process_exit_for_its_supervisor() {
    let redis = RedisServer::start(&[]);
    let db = pg().fresh_db().await;
    let mut serve = Seckill::serve_env(
        &[redis.url()],
        &db,
        &[],
        &[("SECKILL_TEST_PANIC", "pipeline:1000")],
    );
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "loop", "stock": 1_000_000}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let tasks = load(
        std::slice::from_ref(&client),
        "loop",
        2,
        stop.clone(),
        log.clone(),
    );
    let status = tokio::task::block_in_place(|| serve.wait_exit(Duration::from_secs(30)));
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let status = status.expect("the process exits while its pipeline crash-loops");
    assert_eq!(status.code(), Some(70), "{}", serve.log_text());
    assert!(serve.log_text().contains("keeps dying"));
    // A new instance (its pipeline healthy) drains what the dead one answered.
    let again = Seckill::serve(&[redis.url()], &db, &["--reclaim-after-ms", "500"]);
    check_orders(&again.client(), "loop", &log).await;
}
