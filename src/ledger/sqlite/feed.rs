//! The embedded ledger's event feed (migration 0009): positions are the `feed` table's
//! AUTOINCREMENT keys, handed out by the one writer in commit order, so reading needs no
//! numbering step; retention deletes a prefix of positions through the writer.

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use crate::domain::Event;
use crate::ledger::feed::{render, FeedHead, FeedRead, FeedRow, FEED_COLUMNS};
use crate::ledger::rows::micros;

use super::writer::Writer;

pub(super) async fn head(readers: &SqlitePool) -> anyhow::Result<FeedHead> {
    let (newest, through): (i64, i64) = sqlx::query_as(
        "SELECT COALESCE((SELECT MAX(pos) FROM feed), 0), (SELECT through FROM feed_pruned)",
    )
    .fetch_one(readers)
    .await?;
    Ok(FeedHead {
        numbered: newest.max(through) as u64,
        pruned_through: through as u64,
    })
}

pub(super) async fn read(readers: &SqlitePool, r: &FeedRead<'_>) -> anyhow::Result<Vec<Event>> {
    let filters = r.conditions('?', "f.");
    let sql = format!(
        "SELECT {FEED_COLUMNS}, f.pos AS id FROM feed f \
         LEFT JOIN orders o ON o.campaign_id = f.campaign_id AND o.seq = f.seq \
         WHERE f.pos > ?1 AND f.pos <= ?2{filters} ORDER BY f.pos LIMIT ?3"
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
    let rows = q.fetch_all(readers).await?;
    rows.into_iter().map(render).collect()
}

/// Deletes up to `batch` events at the start of the feed that the ledger wrote before
/// `before`, in one transaction of the writer; the last position removed so far.
pub(super) async fn prune(
    writer: &mut Writer,
    before: DateTime<Utc>,
    batch: u32,
) -> anyhow::Result<u64> {
    let conn = writer.begin().await?;
    let pruned = async {
        let (through,): (i64,) = sqlx::query_as("SELECT through FROM feed_pruned")
            .fetch_one(&mut *conn)
            .await?;
        // Only the next `batch` positions are looked at: each prune reads what it removes.
        let window = through + batch as i64;
        let (upto,): (i64,) = sqlx::query_as(
            "SELECT COALESCE( \
                 (SELECT MIN(pos) - 1 FROM feed \
                   WHERE pos > ?1 AND pos <= ?3 AND written_at >= ?2), \
                 MIN(?3, COALESCE((SELECT MAX(pos) FROM feed), ?1)))",
        )
        .bind(through)
        .bind(micros(before))
        .bind(window)
        .fetch_one(&mut *conn)
        .await?;
        if upto > through {
            sqlx::query("DELETE FROM feed WHERE pos > ? AND pos <= ?")
                .bind(through)
                .bind(upto)
                .execute(&mut *conn)
                .await?;
            sqlx::query("UPDATE feed_pruned SET through = ?")
                .bind(upto)
                .execute(&mut *conn)
                .await?;
        }
        anyhow::Ok(upto.max(through) as u64)
    }
    .await;
    match pruned {
        Ok(through) => {
            writer.commit().await?;
            Ok(through)
        }
        Err(e) => {
            writer.roll_back().await;
            Err(e)
        }
    }
}
