//! The scale-out gate's holds at the Redis level: the Lua scripts against a real
//! redis-server, with real 1-second holds judged by Redis's `TIME`. Confirms from several
//! connections fired around `pay_by`, cancels and two expiry sweepers race on every order:
//! each order is taken out exactly once (one transition entry in the stream, one record),
//! every answer agrees with the order's final state, and units, codes and allowances add up.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::seq::SliceRandom;
use redis::AsyncCommands;

use seckill::domain::{Kind, OrderState, Outcome, Status};
use seckill::engine::scale_out::{
    order_of_record, BatchClaim, Claimed, Keys, RedisConn, RedisTarget, Scripts,
};
use seckill::engine::state::{CampaignDef, CampaignState, Decision};
use seckill::engine::IdemLimits;

use crate::servers::RedisServer;

fn def(id: &str, hold: u32) -> CampaignDef {
    CampaignDef {
        id: id.into(),
        kind: Kind::Codes,
        per_user_limit: 2,
        starts_at: None,
        ends_at: None,
        hold_seconds: Some(hold),
        waiting_room: None,
    }
}

fn codes(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("C-{i:04}")).collect()
}

fn limits() -> IdemLimits {
    IdemLimits {
        rejected_ttl: chrono::Duration::seconds(600),
        per_user: 3,
        per_campaign: 40,
    }
}

async fn redis() -> (RedisServer, RedisConn, Arc<Scripts>) {
    let server = RedisServer::start(&[]);
    let target = RedisTarget {
        urls: vec![server.url()],
        cluster: false,
        sentinel_master: None,
    };
    let mut conn = RedisConn::connect(&target).await.unwrap();
    let scripts = Arc::new(Scripts::default());
    scripts.load(&mut conn).await.unwrap();
    (server, conn, scripts)
}

async fn meta(conn: &mut RedisConn, id: &str, field: &str) -> i64 {
    let v: Option<i64> = conn.hget(Keys::new(id).meta(), field).await.unwrap();
    v.unwrap_or(0)
}

/// The transition entries of a campaign's stream: order id → kinds, in stream order.
async fn transitions(conn: &mut RedisConn, id: &str) -> HashMap<String, Vec<String>> {
    let s: redis::streams::StreamRangeReply =
        conn.xrange_all(Keys::new(id).orders()).await.unwrap();
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for e in s.ids {
        if let Some(kind) = e.get::<String>("kind") {
            let order: String = e.get("order_id").unwrap();
            for f in ["user", "qty", "at", "pay_by", "resolved_at"] {
                assert!(e.get::<String>(f).is_some(), "{f} missing in {e:?}");
            }
            out.entry(order).or_default().push(kind);
        }
    }
    out
}

/// One confirm answer: tag, and the order of its record.
type Answer = (String, seckill::domain::Order);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirms_cancels_and_two_sweepers_racing_pay_by_resolve_each_order_once() {
    let (server, mut conn, scripts) = redis().await;
    let (id, n) = ("race", 300usize);
    let state = CampaignState::new(def(id, 1), n as u64, codes(n), Status::Active);
    assert!(scripts.install(&mut conn, &state, 0, &[]).await.unwrap());
    // 300 users win one code each, in batches, as the batcher sends them.
    let users: Vec<String> = (0..n).map(|i| format!("u{i}")).collect();
    let mut won: Vec<(String, String, DateTime<Utc>, Vec<String>)> = Vec::new();
    for part in users.chunks(50) {
        let batch: Vec<BatchClaim> = part
            .iter()
            .map(|u| BatchClaim {
                user: u,
                qty: 1,
                key: None,
            })
            .collect();
        let answers = scripts
            .claim_batch(&mut conn, id, &batch, (86400, &limits()), "0")
            .await
            .unwrap();
        for (u, c) in part.iter().zip(answers) {
            let Claimed::Answer(a) = c else {
                panic!("not an answer")
            };
            assert_eq!(
                (a.outcome, a.state),
                (Outcome::Won, Some(OrderState::Pending))
            );
            won.push((
                a.order_id.unwrap(),
                u.clone(),
                a.pay_by.unwrap(),
                a.codes.unwrap(),
            ));
        }
    }
    assert_eq!(meta(&mut conn, id, "pending").await, n as i64);
    assert_eq!(meta(&mut conn, id, "remaining").await, 0);

    // Fire around the earliest deadline: four confirmers (each its own connection, every
    // order in its own shuffled order), a canceller of every tenth order, two sweepers.
    let first = won.iter().map(|w| w.2).min().unwrap();
    let wait = (first - Utc::now() - chrono::Duration::milliseconds(150))
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
    let target = RedisTarget {
        urls: vec![server.url()],
        cluster: false,
        sentinel_master: None,
    };
    let ids: Vec<String> = won.iter().map(|w| w.0.clone()).collect();
    let mut tasks = Vec::new();
    for seed in 0..5u64 {
        let (scripts, target, mut ids) = (scripts.clone(), target.clone(), ids.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = RedisConn::connect(&target).await.unwrap();
            use rand::SeedableRng;
            ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
            let cancel = seed == 4;
            let mut out: Vec<Answer> = Vec::new();
            for (k, o) in ids.iter().enumerate() {
                if cancel && !o.ends_with('0') {
                    continue;
                }
                let (tag, value) = scripts.resolve_hold(&mut c, !cancel, id, o).await.unwrap();
                out.push((tag, order_of_record(o, &value).expect("a record")));
                // About 300 ms from first to last: the deadlines pass in the middle.
                let _ = k;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            out
        }));
    }
    let mut sweepers = Vec::new();
    for _ in 0..2 {
        let (scripts, target) = (scripts.clone(), target.clone());
        sweepers.push(tokio::spawn(async move {
            let mut c = RedisConn::connect(&target).await.unwrap();
            let mut expired = 0;
            for _ in 0..80 {
                let e = scripts.expire_due(&mut c, id, 7).await.unwrap();
                expired += e.expired.unwrap();
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            expired
        }));
    }
    let mut answers: Vec<Answer> = Vec::new();
    for t in tasks {
        answers.extend(t.await.unwrap());
    }
    let swept: u64 = futures::future::join_all(sweepers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();

    // Each order resolved exactly once: one transition entry, one record, and every answer
    // about it agrees with that record.
    let kinds = transitions(&mut conn, id).await;
    let records: HashMap<String, String> = conn.hgetall(Keys::new(id).resolved()).await.unwrap();
    let mut state_of: HashMap<String, OrderState> = HashMap::new();
    for (order, user, pay_by, codes) in &won {
        let k = kinds
            .get(order)
            .unwrap_or_else(|| panic!("{order} never resolved"));
        assert_eq!(k.len(), 1, "{order} resolved more than once: {k:?}");
        let o = order_of_record(order, &records[order]).unwrap();
        assert_eq!(o.state.as_str(), k[0]);
        assert_eq!(
            (&o.user_id, o.pay_by, o.codes.as_ref()),
            (user, Some(*pay_by), Some(codes))
        );
        match o.state {
            OrderState::Confirmed => assert!(o.resolved_at.unwrap() < *pay_by),
            OrderState::Expired => assert!(o.resolved_at.unwrap() >= *pay_by),
            OrderState::Cancelled => assert!(o.cancelled_at.is_some()),
            s => panic!("{order} ended {s:?}"),
        }
        state_of.insert(order.clone(), o.state);
    }
    let (mut now, mut overdue, mut refused) = (0, 0, 0);
    for (tag, o) in &answers {
        let final_state = state_of[&o.order_id];
        assert_eq!(
            o.state, final_state,
            "an answer disagrees with the order: {tag}"
        );
        match tag.as_str() {
            "confirmed" | "cancelled" => now += 1,
            "overdue" => overdue += 1,
            "resolved" => refused += 1,
            t => panic!("tag {t}"),
        }
    }
    let count = |s: OrderState| state_of.values().filter(|x| **x == s).count();
    let (confirmed, expired, cancelled) = (
        count(OrderState::Confirmed),
        count(OrderState::Expired),
        count(OrderState::Cancelled),
    );
    assert_eq!(confirmed + expired + cancelled, n);
    assert!(
        confirmed > 0 && expired > 0,
        "the race was not around pay_by"
    );
    assert_eq!(
        swept as usize + overdue,
        expired,
        "every expiry counted once"
    );
    assert!(refused > 0 && now > 0);

    // Nothing pending is left, and units, codes and allowances add up exactly.
    let k = Keys::new(id);
    assert_eq!(meta(&mut conn, id, "pending").await, 0);
    let held: u64 = conn.hlen(k.held()).await.unwrap();
    let deadlines: u64 = conn.zcard(k.deadlines()).await.unwrap();
    assert_eq!((held, deadlines), (0, 0));
    assert_eq!(
        meta(&mut conn, id, "remaining").await as usize,
        expired + cancelled
    );
    let pool: Vec<String> = conn.lrange(k.codes(), 0, -1).await.unwrap();
    let back: HashSet<String> = won
        .iter()
        .filter(|w| state_of[&w.0] != OrderState::Confirmed)
        .flat_map(|w| w.3.clone())
        .collect();
    assert_eq!(pool.len(), back.len(), "no code returned twice");
    assert_eq!(pool.into_iter().collect::<HashSet<_>>(), back);
    let holders: BTreeMap<String, u64> = conn.hgetall(k.users()).await.unwrap();
    let expect: BTreeMap<String, u64> = won
        .iter()
        .filter(|w| state_of[&w.0] == OrderState::Confirmed)
        .map(|w| (w.1.clone(), 1))
        .collect();
    assert_eq!(
        holders, expect,
        "allowances back exactly for unconfirmed orders"
    );
    let released: HashSet<String> = conn.smembers(k.released()).await.unwrap();
    assert_eq!(released.len(), expired + cancelled);
}

/// A campaign rebuilt with pending orders (as from the ledger) keeps them: `pending`, the held
/// entries (with `at` = pay_by − hold) and the deadlines; one is confirmed, the others expire at
/// their deadline and everything they held goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_campaign_keeps_its_pending_orders_and_expires_them_on_time() {
    let (_server, mut conn, scripts) = redis().await;
    let id = "inst";
    let mut state = CampaignState::new(def(id, 1), 5, codes(5), Status::Active);
    let now = Utc::now();
    let mut orders = Vec::new();
    for u in ["a", "b", "c"] {
        let Decision::Won(r) = state.decide(u, 1, now) else {
            panic!("won")
        };
        orders.push(r);
    }
    assert!(scripts.install(&mut conn, &state, 3, &[]).await.unwrap());
    assert_eq!(meta(&mut conn, id, "pending").await, 3);
    assert_eq!(meta(&mut conn, id, "remaining").await, 2);
    assert_eq!(meta(&mut conn, id, "hold").await, 1);
    let (tag, record) = scripts
        .resolve_hold(&mut conn, true, id, &orders[0].order_id)
        .await
        .unwrap();
    assert_eq!(tag, "confirmed");
    let o = order_of_record(&orders[0].order_id, &record).unwrap();
    assert_eq!(o.created_at.timestamp_micros(), now.timestamp_micros());
    assert_eq!(o.codes.as_ref(), Some(&orders[0].codes));
    let e = scripts.expire_due(&mut conn, id, 100).await.unwrap();
    assert_eq!(e.expired, Some(0), "nothing due before pay_by");
    assert_eq!(
        e.next.map(|t| t.timestamp_millis()),
        orders[1].pay_by.map(|t| t.timestamp_millis())
    );
    tokio::time::sleep((e.next.unwrap() - Utc::now()).to_std().unwrap_or_default()).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let e = scripts.expire_due(&mut conn, id, 100).await.unwrap();
    assert_eq!((e.expired, e.next), (Some(2), None));
    assert!(e.late_max_us > 0 && e.late_sum_us >= e.late_max_us);
    assert_eq!(meta(&mut conn, id, "pending").await, 0);
    assert_eq!(meta(&mut conn, id, "remaining").await, 4);
    let pool: Vec<String> = conn.lrange(Keys::new(id).codes(), 0, -1).await.unwrap();
    assert_eq!(pool.len(), 4);
    // A confirm after the expiry is refused with the expired record; a cancel answers it too.
    let (tag, record) = scripts
        .resolve_hold(&mut conn, true, id, &orders[1].order_id)
        .await
        .unwrap();
    assert_eq!(tag, "resolved");
    assert_eq!(
        order_of_record(&orders[1].order_id, &record).unwrap().state,
        OrderState::Expired
    );
    // Not a pending order here (never issued): 'none' with the hold seconds.
    let (tag, hold) = scripts
        .resolve_hold(&mut conn, false, id, "inst-99")
        .await
        .unwrap();
    assert_eq!((tag.as_str(), hold.as_str()), ("none", "1"));
    assert_eq!(transitions(&mut conn, id).await.len(), 3);
}

/// A pending order the pipeline compensates (a poison entry, `release.lua`) leaves the held
/// orders and the deadlines with its release: its deadline passing later gives nothing back a
/// second time, and a confirm finds nothing pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_pending_order_is_never_expired_or_confirmed_after() {
    let (_server, mut conn, scripts) = redis().await;
    let id = "rel";
    let state = CampaignState::new(def(id, 1), 2, codes(2), Status::Active);
    assert!(scripts.install(&mut conn, &state, 0, &[]).await.unwrap());
    let Claimed::Answer(a) = scripts
        .claim(&mut conn, id, "u1", 1, None, (86400, &limits()))
        .await
        .unwrap()
    else {
        panic!("an answer")
    };
    let order = a.order_id.unwrap();
    let codes = a.codes.unwrap();
    let released = scripts
        .release(&mut conn, id, &order, "u1", 1, &codes)
        .await
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(meta(&mut conn, id, "pending").await, 0);
    assert_eq!(meta(&mut conn, id, "remaining").await, 2);
    let held: u64 = conn.hlen(Keys::new(id).held()).await.unwrap();
    assert_eq!(held, 0);
    let (tag, _) = scripts
        .resolve_hold(&mut conn, true, id, &order)
        .await
        .unwrap();
    assert_eq!(tag, "none");
    tokio::time::sleep(
        (a.pay_by.unwrap() - Utc::now())
            .to_std()
            .unwrap_or_default(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let e = scripts.expire_due(&mut conn, id, 100).await.unwrap();
    assert_eq!(e.expired, Some(0));
    assert_eq!(meta(&mut conn, id, "remaining").await, 2, "given back once");
    let pool: Vec<String> = conn.lrange(Keys::new(id).codes(), 0, -1).await.unwrap();
    assert_eq!(pool.len(), 2);
}
