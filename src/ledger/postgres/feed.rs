//! The scale-out ledger's event feed (migration 0010): events are written without a position
//! and numbered afterwards, committed ones only, one numbering at a time
//! (`seckill_feed_number`), so positions become visible in order and a follower never steps
//! over an event a slower transaction commits later.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::Event;
use crate::ledger::feed::{render, FeedHead, FeedRead, FeedRow, FEED_COLUMNS};
use crate::ledger::rows::micros;

/// Events numbered per call: a burst is numbered over a few calls, each short.
const NUMBER_BATCH: i32 = 20_000;

pub(super) async fn number(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query("SELECT seckill_feed_number($1)")
        .bind(NUMBER_BATCH)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn head(pool: &PgPool) -> anyhow::Result<FeedHead> {
    let (numbered, pruned): (i64, i64) =
        sqlx::query_as("SELECT numbered, pruned_through FROM feed_head")
            .fetch_one(pool)
            .await?;
    Ok(FeedHead {
        numbered: numbered as u64,
        pruned_through: pruned as u64,
    })
}

pub(super) async fn read(pool: &PgPool, r: &FeedRead<'_>) -> anyhow::Result<Vec<Event>> {
    let filters = r.conditions('$', "");
    let sql = format!(
        "SELECT {FEED_COLUMNS}, f.id FROM \
         (SELECT pos, id, type, at, campaign_id, seq, body::TEXT AS body FROM feed \
           WHERE pos > $1 AND pos <= $2{filters} ORDER BY pos LIMIT $3) f \
         LEFT JOIN orders o ON o.campaign_id = f.campaign_id AND o.seq = f.seq \
         ORDER BY f.pos"
    );
    // Made of constants and placeholders only ([`FeedRead::conditions`]): every value is bound.
    let mut q = sqlx::query_as::<_, FeedRow>(sqlx::AssertSqlSafe(sql))
        .bind(r.after as i64)
        .bind(r.upto as i64)
        .bind(r.limit as i64);
    if let Some(c) = r.campaign {
        q = q.bind(c);
    }
    if let Some(k) = r.kind {
        q = q.bind(k.as_str());
    }
    let rows = q.fetch_all(pool).await?;
    rows.into_iter().map(render).collect()
}

pub(super) async fn prune(pool: &PgPool, before: DateTime<Utc>, batch: u32) -> anyhow::Result<u64> {
    let (through,): (i64,) = sqlx::query_as("SELECT seckill_feed_prune($1, $2)")
        .bind(micros(before))
        .bind(batch as i32)
        .fetch_one(pool)
        .await?;
    Ok(through as u64)
}
