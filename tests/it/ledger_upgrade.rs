//! A data directory written before the lean orders table (migration 0006) opens with every
//! order intact: the real server makes orders of every kind, the test puts the file back into
//! the 0005 shape (the old table with its four B-trees, the migration unrecorded), and the
//! restarted server migrates it and serves the same orders, the same stock and the next
//! order numbers.

use std::collections::HashMap;
use std::str::FromStr;

use reqwest::Method;
use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::{Order, OrderState, Outcome};

use crate::process::Proc;

/// Rebuilds `orders` as migration 0005 left it and forgets that 0006 ran.
/// Undoes migrations 0010 (the event sinks), 0009 (the event feed) and 0008 (the ledger's
/// rules).
const BEFORE_0008: &str = "
DROP TRIGGER IF EXISTS feed_campaign_created;
DROP TRIGGER IF EXISTS feed_campaign_restocked;
DROP TRIGGER IF EXISTS feed_campaign_status;
DROP TABLE room_members;
DROP TABLE room_key;
ALTER TABLE campaigns DROP COLUMN waiting_room;
DROP TRIGGER IF EXISTS sinks_cursor_forward;
DROP TABLE sink_parked;
DROP TABLE sinks;
DROP TRIGGER IF EXISTS feed_order_moved;
DROP TRIGGER IF EXISTS feed_campaign_created;
DROP TRIGGER IF EXISTS feed_campaign_restocked;
DROP TRIGGER IF EXISTS feed_campaign_status;
DROP TABLE feed;
DROP TABLE feed_pruned;
DELETE FROM sqlite_sequence WHERE name = 'feed';
DROP TRIGGER IF EXISTS orders_state_once;
DROP TRIGGER IF EXISTS orders_live_release;
DROP TRIGGER IF EXISTS orders_live_delete;
DROP TABLE holdings;
DROP TABLE live_codes;
ALTER TABLE campaigns DROP COLUMN live_units;
";

const BACK_TO_0005: &str = "
CREATE TABLE orders_v5 (
    order_id     TEXT PRIMARY KEY,
    campaign_id  TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    user_id      TEXT NOT NULL,
    qty          INTEGER NOT NULL CHECK (qty >= 1),
    codes        TEXT,
    state        TEXT NOT NULL
                 CHECK (state IN ('active', 'pending', 'confirmed', 'expired', 'cancelled')),
    created_at   INTEGER NOT NULL,
    cancelled_at INTEGER,
    pay_by       INTEGER,
    resolved_at  INTEGER
);
INSERT INTO orders_v5 (order_id, campaign_id, seq, user_id, qty, codes, state, created_at,
                       cancelled_at, pay_by, resolved_at)
    SELECT order_id, campaign_id, seq, user_id, qty, codes, state, created_at, cancelled_at,
           pay_by, resolved_at FROM orders;
DROP TABLE orders;
ALTER TABLE orders_v5 RENAME TO orders;
CREATE UNIQUE INDEX orders_by_campaign ON orders (campaign_id, seq);
CREATE INDEX orders_by_user ON orders (campaign_id, user_id, seq);
CREATE INDEX orders_pending ON orders (campaign_id, seq) WHERE state = 'pending';
DELETE FROM _sqlx_migrations WHERE version >= 6;
";

async fn claim(c: &Client, campaign: &str, user: &str) -> seckill::domain::ClaimAnswer {
    match c.claim(campaign, user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) => a,
        other => panic!("{other:?}"),
    }
}

async fn all(c: &Client) -> HashMap<String, Order> {
    let mut out = HashMap::new();
    for campaign in ["s", "p"] {
        for o in c.all_orders(campaign).await.unwrap() {
            out.insert(o.order_id.clone(), o);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ledger_of_the_previous_schema_migrates_with_every_order() {
    let dir = tempfile::tempdir().unwrap();
    let first = Proc::start(dir.path());
    let c = first.client();
    c.create_campaign(&json!({"id": "s", "codes": ["A", "B", "C", "D", "E"], "per_user_limit": 1}))
        .await
        .unwrap();
    c.create_campaign(&json!({"id": "p", "stock": 5, "hold_seconds": 3600}))
        .await
        .unwrap();
    for i in 0..4 {
        assert_eq!(claim(&c, "s", &format!("u{i}")).await.outcome, Outcome::Won);
        assert_eq!(claim(&c, "p", &format!("u{i}")).await.outcome, Outcome::Won);
    }
    let (s, _) = c
        .admin(Method::POST, "/v1/orders/s-2/cancel", None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 200);
    let (s, _) = c
        .admin(Method::POST, "/v1/orders/p-1/confirm", None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 200);
    let before = all(&c).await;
    let views = (
        c.campaign("s").await.unwrap(),
        c.campaign("p").await.unwrap(),
    );
    first.signal(libc::SIGKILL);
    drop(first);

    let db = dir.path().join("seckill.db");
    let mut conn = SqliteConnectOptions::from_str(&format!("sqlite://{}", db.display()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    sqlx::raw_sql(BEFORE_0008).execute(&mut conn).await.unwrap();
    sqlx::raw_sql(BACK_TO_0005)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let second = Proc::start(dir.path());
    let c = second.client();
    assert_eq!(all(&c).await, before, "every order survives the migration");
    for (id, o) in &before {
        assert_eq!(c.order(id).await.unwrap().as_ref(), Some(o), "GET {id}");
    }
    let after = (
        c.campaign("s").await.unwrap(),
        c.campaign("p").await.unwrap(),
    );
    assert_eq!(after.0.remaining, views.0.remaining);
    assert_eq!(after.1.holds, views.1.holds);
    // Orders go on: the next numbers, the cancelled code handed out again, a pending order
    // confirmed, a holder still at the limit.
    let next = claim(&c, "s", "new").await;
    assert_eq!(next.order_id.as_deref(), Some("s-5"));
    assert_eq!(claim(&c, "s", "u0").await.outcome, Outcome::AlreadyClaimed);
    assert_eq!(claim(&c, "p", "new").await.order_id.as_deref(), Some("p-5"));
    let (s, body) = c
        .admin(Method::POST, "/v1/orders/p-2/confirm", None)
        .await
        .unwrap();
    assert_eq!(
        (s.as_u16(), body["state"].as_str()),
        (200, Some("confirmed"))
    );
    assert_eq!(
        c.order("p-2").await.unwrap().unwrap().state,
        OrderState::Confirmed
    );
    assert!(c.order("s-02").await.unwrap().is_none());
    assert!(c.order("s-99").await.unwrap().is_none());

    // And the file is in the new shape: one clustered table, no index but the pending one.
    let ro = format!("sqlite://{}?mode=ro", db.display());
    let pool = sqlx::SqlitePool::connect(&ro).await.unwrap();
    let shapes: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'orders' AND sql IS NOT NULL \
         AND type IN ('table', 'index')",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"orders_pending"), "{names:?}");
    assert!(shapes.iter().any(|(n, sql)| n == "orders"
        && sql.contains("WITHOUT ROWID")
        && sql.contains("state = 'active' OR state = 'pending'")));
}

/// SHA-384 of migration 0006 as first committed (f23cc9e) and as edited later (93a2cd4).
const FIRST_0006: &str = "5d7e28c6a1fa9e5aec3e43952cda98e537f44a7fc4f640e93bdf6e0eadf851005f82bf9762f16e4d1147d0e4a8538173";
const EDITED_0006: &str = "72aef6742d1f8e137425a90cbe7a3c7db637e81b2777ce80927485e45e2deaad73689a8fc2b0ba67bcfd8c13e42a1189";

/// Migration 0006 was edited after it was committed, so ledgers in the field recorded one of
/// two checksums for it. Each must start, with its orders, and end in the same schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_that_ran_either_bytes_of_migration_0006_starts() {
    for recorded in [FIRST_0006, EDITED_0006] {
        let dir = tempfile::tempdir().unwrap();
        let first = Proc::start(dir.path());
        let c = first.client();
        c.create_campaign(&json!({"id": "s", "stock": 3}))
            .await
            .unwrap();
        assert_eq!(claim(&c, "s", "u1").await.outcome, Outcome::Won);
        first.signal(libc::SIGKILL);
        drop(first);

        let db = dir.path().join("seckill.db");
        let mut conn = SqliteConnectOptions::from_str(&format!("sqlite://{}", db.display()))
            .unwrap()
            .connect()
            .await
            .unwrap();
        // As the build that ran 0006 left the ledger: 0006 recorded with its checksum of
        // then, nothing after it.
        sqlx::query("UPDATE _sqlx_migrations SET checksum = ?1 WHERE version = 6")
            .bind(hex::decode(recorded).unwrap())
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version > 6")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::raw_sql(BEFORE_0008).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();

        let second = Proc::start(dir.path());
        let c = second.client();
        assert_eq!(
            c.order("s-1").await.unwrap().map(|o| o.user_id),
            Some("u1".to_owned()),
            "recorded {recorded}"
        );
        assert_eq!(claim(&c, "s", "u2").await.order_id.as_deref(), Some("s-2"));
    }
}
