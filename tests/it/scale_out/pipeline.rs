//! The pipeline's one-step function, driven directly: read, insert, acknowledge, and a
//! redelivered entry inserted once.

use std::sync::Arc;

use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::config::ServeConfig;
use seckill::engine::redis::{RedisConn, RedisTarget, Scripts};
use seckill::ledger::PgLedger;
use seckill::pipeline::{Consumer, PipelineOptions, Step};

use crate::helpers::TOKEN;
use crate::servers::{pg, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_step_moves_the_stream_into_the_ledger() {
    let redis = RedisServer::start(&[]);
    let db = pg().fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::ephemeral(dir.path().into(), TOKEN);
    cfg.scale.redis = vec![redis.url()];
    cfg.scale.postgres = Some(db.clone());
    cfg.scale.no_worker = true;
    let server = seckill::cli::start(cfg).await.unwrap();
    let client = Client::new(&server.url(), TOKEN);
    client
        .create_campaign(&json!({"id": "stepped", "stock": 100}))
        .await
        .unwrap();
    for i in 0..10 {
        let reply = client
            .claim("stepped", &format!("u{i}"), 1, None)
            .await
            .unwrap();
        assert!(matches!(reply, ClaimReply::Processed(_)));
    }

    let target = RedisTarget {
        urls: vec![redis.url()],
        cluster: false,
        sentinel_master: None,
    };
    let ledger = Arc::new(PgLedger::open(&db, 2).await.unwrap());
    let conn = RedisConn::connect(&target).await.unwrap();
    let mut consumer = Consumer::new(
        conn,
        ledger,
        Arc::new(Scripts::default()),
        PipelineOptions::new(),
    );
    let first = consumer.step().await.unwrap();
    assert_eq!(
        first,
        Step {
            read: 10,
            persisted: 10,
            poisoned: 0
        }
    );
    assert_eq!(
        consumer.step().await.unwrap().read,
        0,
        "everything was acknowledged"
    );
    assert_eq!(client.all_orders("stepped").await.unwrap().len(), 10);

    // The same order delivered again (a consumer died after the commit, before the ack).
    let mut raw = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let order = client.order("stepped-3").await.unwrap().unwrap();
    let _: String = redis::cmd("XADD")
        .arg("{c:stepped}:orders")
        .arg("*")
        .arg("order_id")
        .arg(&order.order_id)
        .arg("user")
        .arg(&order.user_id)
        .arg("qty")
        .arg(order.qty)
        .arg("at")
        .arg(order.created_at.timestamp_micros())
        .query_async(&mut raw)
        .await
        .unwrap();
    let again = consumer.step().await.unwrap();
    assert_eq!(
        again,
        Step {
            read: 1,
            persisted: 1,
            poisoned: 0
        }
    );
    assert_eq!(
        client.all_orders("stepped").await.unwrap().len(),
        10,
        "inserted once"
    );
    server.stop().await.unwrap();
}
