//! SIGKILL of the process consuming the order stream, mid-drain, then a restart.

use std::time::Duration;

use seckill::bench::client::Client;
use seckill::bench::fire;
use serde_json::json;

use super::procs::Seckill;
use super::{check_exact, won_of};
use crate::helpers::settle_url;
use crate::servers::{pg, RedisServer};

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
    v["pipeline_lag"]
        .as_u64()
        .expect("scale-out reports its lag")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_sigkilled_mid_drain_loses_and_duplicates_nothing() {
    let redis = RedisServer::start_aof();
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let serve = Seckill::serve(&urls, &postgres, &["--no-worker"]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "backlog", "stock": 6000}))
        .await
        .unwrap();
    // No consumer runs yet: every won order waits in the stream.
    let report = fire::storm(&client, "backlog", fire::distinct_users(6000), 128).await;
    assert_eq!(report.count("won"), 6000);
    assert_eq!(
        lag(&client).await,
        6000,
        "nothing is consumed without a worker"
    );

    let small_batches = ["--pipeline-batch", "25", "--consumer", "first"];
    let mut first = Seckill::worker(&urls, &postgres, &small_batches);
    while lag(&client).await == 6000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.sigkill();
    let left = lag(&client).await;
    assert!(
        left > 0,
        "the worker was killed before it drained the stream: {}",
        first.log_text()
    );

    // A worker under another name must take over what `first` held unacknowledged.
    let takeover = ["--consumer", "second", "--reclaim-after-ms", "500"];
    let second = Seckill::worker(&urls, &postgres, &takeover);
    settle_url(&client).await;
    let won = won_of(
        &report
            .answers
            .iter()
            .map(|(s, a)| (s.user.clone(), a.clone()))
            .collect::<Vec<_>>(),
    );
    check_exact(&client, "backlog", &won, false).await;
    drop(second);
}

/// kill -9 of a `seckill serve` (its in-process pipeline dies with it) mid-load; another
/// instance takes over: every answered `won` reaches the ledger exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_sigkilled_mid_load_loses_no_acknowledged_order() {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::outages::{claim_loop, Seen};
    use crate::invariants;

    let redis = RedisServer::start_aof();
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let fast_takeover = ["--reclaim-after-ms", "500", "--pipeline-batch", "50"];
    let mut first = Seckill::serve(&urls, &postgres, &fast_takeover);
    let client = first.client();
    client
        .create_campaign(&json!({"id": "killed", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let load = claim_loop(&client, "killed", stop.clone(), seen.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    first.sigkill();
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    let won = seen.won();
    assert!(won.len() > 50, "the load won something before the kill");

    let second = Seckill::serve(&urls, &postgres, &fast_takeover);
    let client = second.client();
    settle_url(&client).await;
    let view = client.campaign("killed").await.unwrap();
    let orders = client.all_orders("killed").await.unwrap();
    invariants::check(&view, &orders, &won, false);
    let answered: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    let unknown = seen.unknown.lock().clone();
    for o in orders
        .iter()
        .filter(|o| !answered.contains(o.order_id.as_str()))
    {
        assert!(
            unknown.contains(&o.user_id),
            "order {} was never claimed as far as the client knows",
            o.order_id
        );
    }
}
