//! PostgreSQL that answers but refuses writes — turned read-only (as a replica is after a
//! failover), then a statement timeout too short for any insert — during a sale: claims keep
//! being answered, the orders wait in the stream (no poison, no compensation), and once writes
//! are allowed again they drain, none lost, none doubled.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sqlx::Connection;

use seckill::bench::client::Client;

use super::procs::Seckill;
use super::redis_outage::{check_orders, load, Log};
use crate::servers::{PgServer, RedisServer};

/// `ALTER SYSTEM` statements, a reload, and every other session cut so they take effect now.
async fn reconfigure(pg: &PgServer, statements: &[&'static str]) {
    // This session is exempt from what it configures, from its start: a `SET` sent after
    // connecting already ran under a 1 ms statement timeout and, on a loaded machine, hit it.
    let opts = sqlx::postgres::PgConnectOptions::from_str(&pg.url("postgres"))
        .unwrap()
        .options([
            ("statement_timeout", "0"),
            ("default_transaction_read_only", "off"),
        ]);
    let mut conn = sqlx::PgConnection::connect_with(&opts).await.unwrap();
    for &s in statements {
        sqlx::query(s).execute(&mut conn).await.unwrap();
    }
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
}

async fn lag(client: &Client) -> u64 {
    let v: serde_json::Value = client
        .http()
        .get(client.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["pipeline_lag"].as_u64().unwrap_or(0)
}

async fn refusing_phase(client: &Client, serve: &Seckill, what: &str) {
    let before = lag(client).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = lag(client).await;
    eprintln!("{what}: pipeline lag {before} -> {during}");
    assert!(
        during > before + 10,
        "{what}: orders wait in the stream while PostgreSQL refuses writes ({before} -> {during})"
    );
    assert!(
        !serve.log_text().contains("poison order"),
        "{what}: a refused write was taken for a poison order: {}",
        serve.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_refusing_writes_keeps_every_order_in_the_stream() {
    let redis = RedisServer::start_aof();
    // A cluster of its own: ALTER SYSTEM changes the whole cluster.
    let pg = PgServer::start();
    let db = pg.fresh_db().await;
    let serve = Seckill::serve(&[redis.url()], &db, &[]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "ro", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let tasks = load(
        std::slice::from_ref(&client),
        "ro",
        8,
        stop.clone(),
        log.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    reconfigure(
        &pg,
        &["ALTER SYSTEM SET default_transaction_read_only = on"],
    )
    .await;
    refusing_phase(&client, &serve, "read-only").await;
    reconfigure(
        &pg,
        &[
            "ALTER SYSTEM RESET default_transaction_read_only",
            "ALTER SYSTEM SET statement_timeout = 1",
        ],
    )
    .await;
    // 1 ms is too short for a batch insert, not always for the pipeline's small reads.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    reconfigure(&pg, &["ALTER SYSTEM RESET statement_timeout"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        !serve.log_text().contains("poison order"),
        "a refused write was taken for a poison order"
    );
    check_orders(&client, "ro", &log).await;
}
