//! SIGKILL of the process consuming the order stream, mid-drain, then a restart.

use std::time::Duration;

use seckill::client::Client;
use seckill::load;
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
    let report = load::storm(&client, "backlog", load::distinct_users(6000), 128).await;
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
