//! The pipeline's one-step function, driven directly: read, insert, acknowledge, and a
//! redelivered entry inserted once.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;

use seckill::bench::client::{ClaimReply, Client};
use seckill::config::ServeConfig;
use seckill::engine::scale_out::{RedisConn, RedisTarget, Scripts};
use seckill::ledger::PgLedger;
use seckill::pipeline::{Consumer, PipelineOptions, Step};

use crate::helpers::TOKEN;
use crate::servers::{pg, RedisServer};

/// A scale-out server without its own pipeline, on a fresh Redis and database: the stream
/// waits for the consumer a test drives.
struct NoWorker {
    redis: RedisServer,
    db: String,
    server: seckill::app::App,
    client: Client,
    _dir: tempfile::TempDir,
}

impl NoWorker {
    async fn gate(&self) -> RedisConn {
        let target = RedisTarget {
            urls: vec![self.redis.url()],
            cluster: false,
            sentinel_master: None,
        };
        RedisConn::connect(&target).await.unwrap()
    }

    /// A consumer of the streams driven by the test, and its ledger.
    async fn consumer(&self) -> (Consumer, Arc<PgLedger>) {
        let ledger = Arc::new(PgLedger::open(&self.db, 2).await.unwrap());
        let consumer = Consumer::new(
            self.gate().await,
            ledger.clone(),
            Arc::new(Scripts::default()),
            PipelineOptions::new(),
        );
        (consumer, ledger)
    }
}

async fn no_worker() -> NoWorker {
    let redis = RedisServer::start(&[]);
    let db = pg().fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::ephemeral(dir.path().into(), TOKEN);
    cfg.scale.redis = vec![redis.url()];
    cfg.scale.postgres = Some(db.clone());
    cfg.scale.no_worker = true;
    let server = seckill::app::App::build(cfg).await.unwrap();
    let client = Client::new(&server.url(), TOKEN);
    NoWorker {
        redis,
        db,
        server,
        client,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_step_moves_the_stream_into_the_ledger() {
    let t = no_worker().await;
    let (redis, client) = (&t.redis, &t.client);
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

    let (mut consumer, _) = t.consumer().await;
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
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
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
    t.server.stop().await.unwrap();
}

/// Concurrent claims reach the stream as one entry per script call; one step writes every
/// order of those entries, and an order PostgreSQL refuses is poisoned alone: the rest of its
/// entry persists, its unit goes back, and the entry is acknowledged once, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_entry_persists_whole_and_its_poison_order_alone() {
    let t = no_worker().await;
    let (redis, client) = (&t.redis, &t.client);
    client
        .create_campaign(&json!({"id": "packed", "stock": 1000}))
        .await
        .unwrap();
    super::poison::refuse_mallory(&t.db).await;
    let users: Vec<String> = (0..300)
        .map(|i| match i {
            150 => "mallory".to_owned(),
            _ => format!("u{i}"),
        })
        .collect();
    let won = futures::stream::iter(&users)
        .map(|u| client.claim("packed", u, 1, None))
        .buffer_unordered(300)
        .filter(|r| std::future::ready(matches!(r, Ok(ClaimReply::Processed(_)))))
        .count()
        .await;
    assert_eq!(won, 300);
    let mut raw = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let len = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            let n: u64 = redis::cmd("XLEN")
                .arg("{c:packed}:orders")
                .query_async(&mut raw)
                .await
                .unwrap();
            n
        }
    };
    let entries = len(&mut raw).await;
    assert!(
        entries < 150,
        "300 concurrent claims came as {entries} stream entries"
    );

    let mut gate = t.gate().await;
    let campaigns = ["packed".to_owned()];
    let lag = seckill::engine::scale_out::stream_lag(&mut gate, &campaigns)
        .await
        .unwrap();
    assert_eq!(lag, 300, "the lag counts orders, not entries");
    let (mut consumer, ledger) = t.consumer().await;
    let mut total = Step::default();
    loop {
        let s = consumer.step().await.unwrap();
        if s.read == 0 {
            break;
        }
        total.read += s.read;
        total.persisted += s.persisted;
        total.poisoned += s.poisoned;
    }
    assert_eq!(
        total,
        Step {
            read: 300,
            persisted: 299,
            poisoned: 1
        }
    );
    assert_eq!(
        len(&mut raw).await,
        0,
        "every entry acknowledged and removed"
    );
    let lag = seckill::engine::scale_out::stream_lag(&mut gate, &campaigns)
        .await
        .unwrap();
    assert_eq!(lag, 0);
    let packed: i64 = redis::cmd("GET")
        .arg("{c:packed}:packed")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(packed, 0, "every batch entry's count taken off once");
    let orders = client.all_orders("packed").await.unwrap();
    assert_eq!(orders.len(), 299);
    assert!(orders.iter().all(|o| o.user_id != "mallory"));
    let failed = ledger.failed_orders("packed").await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].1.contains("no_mallory"), "{}", failed[0].1);
    let view = client.campaign("packed").await.unwrap();
    assert_eq!(view.remaining, 701, "mallory's unit went back, once");
    t.server.stop().await.unwrap();
}
