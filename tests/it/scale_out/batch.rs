//! Claims batched into Redis: the batch script decides exactly as the one-claim script, and
//! thousands of concurrent claims through a server reach Redis in far fewer script calls with
//! every invariant intact.

use std::sync::Arc;

use futures::StreamExt;
use rand::{rngs::StdRng, Rng, SeedableRng};
use redis::AsyncCommands;
use serde_json::json;

use seckill::bench::client::ClaimReply;
use seckill::domain::{ClaimAnswer, Kind, Status};
use seckill::engine::scale_out::{BatchClaim, Keys, RedisConn, RedisTarget, Scripts};
use seckill::engine::state::{CampaignDef, CampaignState};
use seckill::engine::IdemLimits;
use seckill::pipeline::Entry;

use super::{check_exact, won_of};
use crate::helpers::{App, Deploy};
use crate::servers::RedisServer;

fn state(id: &str, hold_seconds: Option<u32>) -> CampaignState {
    let def = CampaignDef {
        id: id.into(),
        kind: Kind::Codes,
        per_user_limit: 3,
        starts_at: None,
        ends_at: None,
        hold_seconds,
        waiting_room: None,
    };
    let codes = (0..60).map(|i| format!("CODE-{i:03}")).collect();
    CampaignState::new(def, 60, codes, Status::Active)
}

/// An answer with the campaign id taken out of its order id, to compare two campaigns.
fn neutral(a: &ClaimAnswer, id: &str) -> ClaimAnswer {
    let mut a = a.clone();
    a.order_id = a.order_id.map(|o| o.replacen(id, "X", 1));
    // Deadlines come from each call's own TIME: compare that there is one.
    a.pay_by = a.pay_by.map(|_| chrono::DateTime::UNIX_EPOCH);
    a
}

fn describe(c: &seckill::engine::scale_out::Claimed, id: &str) -> String {
    match c {
        seckill::engine::scale_out::Claimed::Answer(a) => format!("{:?}", neutral(a, id)),
        seckill::engine::scale_out::Claimed::Missing => "missing".into(),
        seckill::engine::scale_out::Claimed::Fenced => "fenced".into(),
        seckill::engine::scale_out::Claimed::NoReplicas => "replicas".into(),
        seckill::engine::scale_out::Claimed::Unchecked => "unchecked".into(),
    }
}

/// 2,000 random claims (repeat users, qty 1–3, shared Idempotency-Keys, a pause and a resume
/// half-way) decided one by one by `claim.lua` on one campaign and in random batches of 1–64 by
/// `claims.lua` on its twin: the same answers in the same order, the same codes, the same
/// stream of orders and the same campaign state afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_decides_exactly_as_claims_one_by_one() {
    decide_alike(None).await;
}

/// The same with holds: the same pending orders (held entries, deadlines, `pending`) too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_holds_a_batch_decides_exactly_as_claims_one_by_one() {
    decide_alike(Some(600)).await;
}

async fn decide_alike(hold: Option<u32>) {
    let redis = RedisServer::start(&[]);
    let target = RedisTarget {
        urls: vec![redis.url()],
        cluster: false,
        sentinel_master: None,
    };
    let mut conn = RedisConn::connect(&target).await.unwrap();
    let scripts = Arc::new(Scripts::default());
    scripts.load(&mut conn).await.unwrap();
    let limits = IdemLimits {
        rejected_ttl: chrono::Duration::seconds(600),
        per_user: 3,
        per_campaign: 40,
    };
    for id in ["one", "many"] {
        assert!(scripts
            .install(&mut conn, &state(id, hold), 0, &[])
            .await
            .unwrap());
    }
    // The holders version starts from the install time: compare how far each moved.
    let mut hver0 = Vec::new();
    for id in ["one", "many"] {
        let v: i64 = conn.hget(Keys::new(id).meta(), "hver").await.unwrap();
        hver0.push(v);
    }
    let mut rng = StdRng::seed_from_u64(10);
    let claims: Vec<(String, u64, Option<String>)> = (0..2000)
        .map(|_| {
            let user = format!("u{}", rng.gen_range(0..80));
            let key = rng
                .gen_bool(0.3)
                .then(|| format!("k{}", rng.gen_range(0..4)));
            (user, rng.gen_range(1..=3), key)
        })
        .collect();
    let mut one = Vec::new();
    let mut many = Vec::new();
    let mut i = 0;
    while i < claims.len() {
        if i == 700 || i == 900 {
            let status = if i == 700 { "paused" } else { "active" };
            for id in ["one", "many"] {
                scripts.status(&mut conn, id, status, false).await.unwrap();
            }
        }
        let n = rng.gen_range(1..=64).min(claims.len() - i).min(if i < 700 {
            700 - i
        } else if i < 900 {
            900 - i
        } else {
            usize::MAX
        });
        let part = &claims[i..i + n];
        for (user, qty, key) in part {
            let c = scripts
                .claim(
                    &mut conn,
                    "one",
                    user,
                    *qty,
                    key.as_deref(),
                    (86400, &limits),
                )
                .await
                .unwrap();
            one.push(describe(&c, "one"));
        }
        let batch: Vec<BatchClaim> = part
            .iter()
            .map(|(user, qty, key)| BatchClaim {
                user,
                qty: *qty,
                key: key.as_deref(),
            })
            .collect();
        let answers = scripts
            .claim_batch(&mut conn, "many", &batch, (86400, &limits), "0")
            .await
            .unwrap();
        many.extend(answers.iter().map(|c| describe(c, "many")));
        i += n;
    }
    for (k, (a, b)) in one.iter().zip(&many).enumerate() {
        assert_eq!(a, b, "claim {k} ({:?}) was decided differently", claims[k]);
    }
    assert_eq!(one.len(), many.len());
    assert!(one.iter().any(|a| a.contains("Won")) && one.iter().any(|a| a.contains("SoldOut")));
    assert!(one.iter().any(|a| a.contains("Paused")));

    // The same gate state and the same orders in the stream, in the same order.
    let (a, b) = (Keys::new("one"), Keys::new("many"));
    let x: i64 = conn.hget(a.meta(), "hver").await.unwrap();
    let y: i64 = conn.hget(b.meta(), "hver").await.unwrap();
    assert_eq!(x - hver0[0], y - hver0[1], "holders version bumps");
    for field in ["remaining", "total", "status", "hold", "pending"] {
        let x: Option<String> = conn.hget(a.meta(), field).await.unwrap();
        let y: Option<String> = conn.hget(b.meta(), field).await.unwrap();
        assert_eq!(x, y, "meta field {field}");
    }
    let x: std::collections::BTreeMap<String, String> = conn.hgetall(a.users()).await.unwrap();
    let y: std::collections::BTreeMap<String, String> = conn.hgetall(b.users()).await.unwrap();
    assert_eq!(x, y, "holdings");
    // Pending orders: the same users, quantities and codes (their times are each call's own).
    let held = |m: std::collections::BTreeMap<String, String>, id: &str| {
        m.into_iter()
            .map(|(k, v)| {
                let lines: Vec<&str> = v.split('\n').collect();
                let kept = [&lines[..2], &lines[4..]].concat().join("\n");
                (k.replacen(id, "X", 1), kept)
            })
            .collect::<Vec<_>>()
    };
    let x: std::collections::BTreeMap<String, String> = conn.hgetall(a.held()).await.unwrap();
    let y: std::collections::BTreeMap<String, String> = conn.hgetall(b.held()).await.unwrap();
    assert_eq!(x.is_empty(), hold.is_none());
    assert_eq!(held(x, "one"), held(y, "many"), "pending orders");
    let x: u64 = conn.zcard(a.deadlines()).await.unwrap();
    let y: u64 = conn.zcard(b.deadlines()).await.unwrap();
    assert_eq!(x, y, "deadlines");
    let x: Option<String> = conn.get(a.seq()).await.unwrap();
    let y: Option<String> = conn.get(b.seq()).await.unwrap();
    assert_eq!(x, y, "order numbers");
    // One entry per order from claim.lua, one per call from claims.lua: the same orders once
    // the pipeline has expanded them.
    let orders = |s: redis::streams::StreamRangeReply, id: &str| -> Vec<Vec<String>> {
        s.ids
            .into_iter()
            .flat_map(|e| Entry::new(id.to_owned(), e.id, e.map).expand())
            .map(|e| {
                let o = e.order().unwrap();
                let pending = o.pay_by.is_some().to_string();
                let codes = o.codes.unwrap_or_default().join(",");
                let id = o.order_id.replacen(id, "X", 1);
                vec![id, o.user_id, o.qty.to_string(), codes, pending]
            })
            .collect()
    };
    let x: redis::streams::StreamRangeReply = conn.xrange_all(a.orders()).await.unwrap();
    let y: redis::streams::StreamRangeReply = conn.xrange_all(b.orders()).await.unwrap();
    let (entries_one, entries_many) = (x.ids.len(), y.ids.len());
    let (x, y) = (orders(x, "one"), orders(y, "many"));
    assert!(!x.is_empty());
    assert_eq!(x, y, "the orders in the streams differ");
    assert_eq!(
        entries_one,
        x.len(),
        "claim.lua appends one entry per order"
    );
    assert!(
        entries_many < entries_one,
        "claims.lua appends one entry per call: {entries_many} entries for {} orders",
        y.len()
    );
    if hold.is_some() {
        let s: redis::streams::StreamRangeReply = conn.xrange_all(a.orders()).await.unwrap();
        assert!(s.ids.iter().all(|e| e.get::<String>("pay_by").is_some()));
        let won = one.iter().filter(|a| a.contains("Won")).count();
        assert!(one.iter().filter(|a| a.contains("Some(Pending)")).count() == won);
    }
}

/// Evalsha calls (claim scripts included) Redis has run so far.
async fn evalsha_calls(url: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut c = client
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map(|n| n.parse().unwrap())
        .unwrap_or(0)
}

/// 4,000 claims, 400 in flight at once (3,000 users, a quarter of them clicking twice) on 1,000
/// units with limit 1: exactly 1,000 win, every order reaches the ledger once, no user wins
/// twice, and Redis ran far fewer script calls than there were claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_share_script_calls_and_keep_every_invariant() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "storm", "stock": 1000, "per_user_limit": 1}))
        .await;
    let before = evalsha_calls(&app.redis[0]).await;
    let users: Vec<String> = (0..4000).map(|i| format!("u{}", i % 3000)).collect();
    let client = app.client.clone();
    let answers: Vec<(String, ClaimAnswer)> = futures::stream::iter(users)
        .map(|user| {
            let client = client.clone();
            async move {
                match client.claim("storm", &user, 1, None).await.unwrap() {
                    ClaimReply::Processed(a) => (user, a),
                    ClaimReply::Refused(s, body) => panic!("claim refused with {s}: {body}"),
                }
            }
        })
        .buffer_unordered(400)
        .collect()
        .await;
    let calls = evalsha_calls(&app.redis[0]).await - before;
    let won = won_of(&answers);
    assert_eq!(won.len(), 1000, "every unit sold, none twice");
    app.settle().await;
    check_exact(&app.client, "storm", &won, true).await;
    eprintln!("4000 claims in {calls} script calls");
    assert!(
        calls < 4000 / 4,
        "4000 concurrent claims took {calls} script calls: they were not batched"
    );
}
