//! PostgreSQL hands out sequence values in the order transactions ask for them and commits
//! them in any order, so a follower that trusted `id > cursor` would step over an event whose
//! transaction commits after a higher id became visible. The feed numbers committed events
//! only, one numbering at a time; these tests commit out of order on purpose and follow the
//! feed meanwhile. (Orders of one campaign already commit in turn, as each holds the
//! campaign's row for its live count until it commits; the writers here use one campaign
//! each, as the pipeline's batches of different campaigns do.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use seckill::domain::{EventFilter, EventType};
use seckill::feed::Feed;
use seckill::ledger::{Ledger, PgLedger};
use sqlx::PgPool;

use crate::servers::pg;

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// A campaign of `total` units written as the ledger's own rows (the triggers write its event).
async fn campaign(pool: &PgPool, id: &str, total: i64) {
    sqlx::query(
        "INSERT INTO campaigns (id, kind, total, per_user_limit, status, created_at) \
         VALUES ($1, 'stock', $2, 1, 'active', $3)",
    )
    .bind(id)
    .bind(total)
    .bind(now_micros())
    .execute(pool)
    .await
    .unwrap();
}

/// Inserts order `seq` of campaign `c` in a transaction that stays open `hold` after it.
async fn order(pool: &PgPool, c: &str, seq: i64, hold: Duration) {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, state, created_at) \
         VALUES ($1, $2, $3, $4, 1, 'active', $5)",
    )
    .bind(format!("{c}-{seq}"))
    .bind(c)
    .bind(seq)
    .bind(format!("u{seq}"))
    .bind(now_micros())
    .execute(&mut *tx)
    .await
    .unwrap();
    tokio::time::sleep(hold).await;
    tx.commit().await.unwrap();
}

fn filter(after: u64) -> EventFilter {
    EventFilter {
        after: Some(after),
        limit: 50,
        campaign: None,
        kind: None,
        wait_ms: 200,
    }
}

/// Follows the feed until it has `want` order events, or panics after 60 s; every event's
/// position follows the previous one's.
async fn follow(feed: &Feed, want: usize) -> Vec<String> {
    let mut after = 0u64;
    let mut orders = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while orders.len() < want {
        assert!(tokio::time::Instant::now() < deadline, "stuck at {after}");
        let page = feed.page(&filter(after)).await.unwrap();
        for e in &page.events {
            let pos: u64 = e.cursor.parse().unwrap();
            assert_eq!(pos, after + 1, "the follower stepped over a position");
            after = pos;
            if e.kind == EventType::OrderWon {
                orders.push(e.order.as_ref().unwrap().order_id.clone());
            }
        }
        after = after.max(page.next_cursor.parse().unwrap());
    }
    orders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_that_commits_last_is_read_after_the_ones_before_it() {
    let url = pg().fresh_db().await;
    let ledger = Arc::new(PgLedger::open(&url, 8).await.unwrap());
    let pool = ledger.pool().clone();
    campaign(&pool, "c", 10).await;
    campaign(&pool, "d", 10).await;
    let supervisor = seckill::supervise::Supervisor::new();
    let feed = Feed::new(ledger.clone(), Duration::from_secs(3600));
    feed.spawn_upkeep(&supervisor);
    // c-1 takes the lower id and commits 1.5 s after d-1, which commits at once.
    let slow = tokio::spawn({
        let pool = pool.clone();
        async move { order(&pool, "c", 1, Duration::from_millis(1500)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    order(&pool, "d", 1, Duration::ZERO).await;
    // What a reader of ids sees meanwhile: the higher id, with the lower one still invisible.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ids: Vec<(i64, Option<i64>)> =
        sqlx::query_as("SELECT id, seq FROM feed WHERE seq IS NOT NULL ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(ids.len(), 1, "c-1's event is not visible yet: {ids:?}");
    assert!(ids[0].0 > 3, "d-1's event took the higher id: {ids:?}");
    let first = feed.page(&filter(0)).await.unwrap();
    let kinds: Vec<EventType> = first.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventType::CampaignCreated,
            EventType::CampaignCreated,
            EventType::OrderWon
        ]
    );
    let seen = first.next_cursor.parse::<u64>().unwrap();
    slow.await.unwrap();
    // c-1 comes after the cursor the follower already holds: nothing is skipped.
    let rest = feed.page(&filter(seen)).await.unwrap();
    assert_eq!(rest.events.len(), 1, "{rest:?}");
    assert_eq!(rest.events[0].order.as_ref().unwrap().order_id, "c-1");
    assert_eq!(rest.events[0].cursor, (seen + 1).to_string());
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_never_make_a_follower_skip() {
    const WRITERS: i64 = 16;
    const PER_WRITER: i64 = 60;
    let url = pg().fresh_db().await;
    let ledger = Arc::new(PgLedger::open(&url, 24).await.unwrap());
    let pool = ledger.pool().clone();
    for w in 0..WRITERS {
        campaign(&pool, &format!("s{w}"), PER_WRITER).await;
    }
    let supervisor = seckill::supervise::Supervisor::new();
    // Two upkeeps, as two instances run: one numbering at a time between them.
    let feed = Feed::new(ledger.clone(), Duration::from_secs(3600));
    feed.spawn_upkeep(&supervisor);
    let other = Feed::new(ledger.clone(), Duration::from_secs(3600));
    other.spawn_upkeep(&supervisor);
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for i in 0..PER_WRITER {
                    let hold = Duration::from_millis(rand::thread_rng().gen_range(0..40));
                    order(&pool, &format!("s{w}"), 1 + i, hold).await;
                }
            })
        })
        .collect();
    let (a, b) = tokio::join!(
        follow(&feed, (WRITERS * PER_WRITER) as usize),
        follow(&other, (WRITERS * PER_WRITER) as usize)
    );
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(a, b, "two followers read the same feed in the same order");
    let unique: BTreeSet<&String> = a.iter().collect();
    assert_eq!(unique.len(), a.len(), "an order's win listed twice");
    assert_eq!(a.len() as i64, WRITERS * PER_WRITER);
    let (numbered, unnumbered): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE pos IS NOT NULL), count(*) FILTER (WHERE pos IS NULL) \
         FROM feed",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((numbered, unnumbered), (WRITERS * PER_WRITER + WRITERS, 0));
    // The storm did commit out of id order (else it proved nothing): events whose id is lower
    // than an event numbered before them.
    let (crossed,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM feed a WHERE EXISTS \
           (SELECT 1 FROM feed b WHERE b.id > a.id AND b.pos < a.pos)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(crossed > 0, "no transaction committed out of id order");
    eprintln!("{crossed} events committed after an event with a higher id");
    supervisor.shutdown().await;
}

#[tokio::test]
async fn a_rolled_back_change_leaves_no_event() {
    let url = pg().fresh_db().await;
    let ledger = Arc::new(PgLedger::open(&url, 4).await.unwrap());
    let pool = ledger.pool().clone();
    campaign(&pool, "x", 1).await;
    order(&pool, "x", 1, Duration::ZERO).await;
    // A second unit of a one-unit campaign: the ledger's rule refuses it, and its event with it.
    let refused = sqlx::query(
        "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, state, created_at) \
         VALUES ('x-2', 'x', 2, 'u2', 1, 'active', $1)",
    )
    .bind(now_micros())
    .execute(&pool)
    .await;
    assert!(refused.is_err(), "the ledger took a second unit of one");
    ledger.number_feed().await.unwrap();
    let head = ledger.feed_head().await.unwrap();
    assert_eq!(head.numbered, 2, "campaign.created and one order.won");
}
