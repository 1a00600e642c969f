//! Cancel in scale-out works on orders in the ledger: it waits (bounded) for the pipeline to
//! bring a just-won order there, and answers 503 (retry) while the order is still in transit.

use reqwest::Method;
use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::domain::Outcome;

use super::procs::Seckill;
use crate::helpers::settle_url;
use crate::servers::{pg, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_waits_for_the_pipeline() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let serve = Seckill::serve(&urls, &postgres, &["--no-worker"]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "transit", "codes": ["T1"]}))
        .await
        .unwrap();
    let ClaimReply::Processed(won) = client.claim("transit", "u1", 1, None).await.unwrap() else {
        panic!("claim refused")
    };
    let order_id = won.order_id.unwrap();
    let cancel = format!("/v1/orders/{order_id}/cancel");

    // No worker: the order stays in the stream, so cancel cannot find it in the ledger.
    let (s, v) = client.admin(Method::POST, &cancel, None).await.unwrap();
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (503, Some("internal")),
        "{v}"
    );
    let (s, _) = client
        .admin(Method::POST, "/v1/orders/transit-2/cancel", None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 404, "an order number never issued is unknown");
    assert_eq!(
        client.campaign("transit").await.unwrap().remaining,
        0,
        "the refused cancel changed nothing"
    );

    // With a worker running, the same cancel succeeds once the order is in the ledger.
    let _worker = Seckill::worker(&urls, &postgres, &[]);
    let (s, v) = client.admin(Method::POST, &cancel, None).await.unwrap();
    assert_eq!(
        (s.as_u16(), v["state"].as_str()),
        (200, Some("cancelled")),
        "{v}"
    );
    settle_url(&client).await;
    let again = client.claim("transit", "u2", 1, None).await.unwrap();
    assert!(
        matches!(&again, ClaimReply::Processed(a) if a.outcome == Outcome::Won && a.codes == Some(vec!["T1".to_string()])),
        "{again:?}"
    );
}
