//! The gate loses state while connected (its order numbering rewound behind the ledger, as a
//! Redis that silently lost acknowledged writes would be): the pipeline finds orders whose ids
//! the ledger holds for other buyers, fences the campaign (claims answer 503 "nothing was
//! changed"), records every buyer told `won` for a reissued id in `failed_orders`, rebuilds the
//! gate from the ledger and resumes; afterwards no id is reissued again.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::domain::Outcome;
use seckill::ledger::PgLedger;

use super::procs::Seckill;
use crate::helpers::settle_url;
use crate::invariants;
use crate::servers::{pg, redis_raw, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reissued_order_id_fences_the_campaign_records_its_buyers_and_rebuilds() {
    let redis = RedisServer::start_aof();
    let db = pg().fresh_db().await;
    let a = Seckill::serve(&[redis.url()], &db, &[]);
    let client = a.client();
    client
        .create_campaign(&json!({"id": "re", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let mut won = Vec::new();
    for i in 0..60 {
        let user = format!("old{i}");
        match client.claim("re", &user, 1, None).await.unwrap() {
            ClaimReply::Processed(a) if a.outcome == Outcome::Won => won.push((user, a)),
            other => panic!("{other:?}"),
        }
    }
    settle_url(&client).await;
    // Once the pipeline has checked the numbers it wrote against the gate's (right after
    // acknowledging them), the gate forgets the last 30 of them. A rewind before that check
    // is found by it before any number is issued again, which is not what this test is about.
    let deadline = Instant::now() + Duration::from_secs(20);
    while redis_raw(redis.port, "XLEN {c:re}:orders").unwrap_or_default() != ":0\r\n" {
        assert!(Instant::now() < deadline, "the stream was never drained");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The gate forgets the last 30 order numbers.
    let rewound = redis_raw(redis.port, "SET {c:re}:seq 30").unwrap();
    assert!(rewound.starts_with("+OK"), "{rewound}");

    let (mut fenced, mut after) = (0, Vec::new());
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let user = format!("new{i}");
        i += 1;
        match client.claim("re", &user, 1, None).await.unwrap() {
            ClaimReply::Processed(a) if a.outcome == Outcome::Won => after.push((user, a)),
            ClaimReply::Processed(a) => panic!("{user}: {a:?}"),
            ClaimReply::Refused(status, body) => {
                let msg = body["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    status.as_u16() == 503 && msg.contains("nothing was changed"),
                    "{user}: {status} {body}"
                );
                fenced += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    settle_url(&client).await;

    let orders = client.all_orders("re").await.unwrap();
    let by_id: HashMap<&str, &str> = orders
        .iter()
        .map(|o| (o.order_id.as_str(), o.user_id.as_str()))
        .collect();
    let ledger = PgLedger::open(&db, 1).await.unwrap();
    let failed: HashSet<String> = ledger
        .failed_orders("re")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(id, _)| id)
        .collect();
    let reissued: Vec<&str> = after
        .iter()
        .filter(|(u, a)| by_id.get(a.order_id.as_deref().unwrap()) != Some(&u.as_str()))
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    let log = a.log_text();
    let incidents = log.matches("order ids reused").count();
    eprintln!(
        "after the rewind: {} won, {} of them for reissued ids ({:?}), {fenced} claims refused \
         while fenced, {} rows in failed_orders, {incidents} incident log lines",
        after.len(),
        reissued.len(),
        reissued,
        failed.len()
    );
    assert!(!reissued.is_empty(), "the injected fault reissued nothing");
    assert!(
        reissued.len() <= 30,
        "more ids reissued than the gate forgot"
    );
    let reissued_set: HashSet<String> = reissued.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        failed, reissued_set,
        "every buyer told won for a reissued id is recorded, and only they"
    );
    assert!(
        incidents >= 1 && incidents <= reissued.len(),
        "{incidents} incident lines"
    );
    assert!(
        log.contains("fenced campaign rebuilt from the ledger"),
        "{log}"
    );
    let last = after.last().expect("claims win again after the rebuild");
    let seq: u64 = last.1.order_id.as_deref().unwrap()[3..].parse().unwrap();
    assert!(
        seq > 60,
        "claims after the rebuild are numbered after the ledger: {seq}"
    );
    won.extend(
        after
            .iter()
            .filter(|(_, a)| !reissued_set.contains(a.order_id.as_deref().unwrap()))
            .cloned(),
    );
    let view = client.campaign("re").await.unwrap();
    invariants::check(&view, &orders, &won, false);
    assert_eq!(orders.len(), won.len(), "orders nobody was told about");
}
