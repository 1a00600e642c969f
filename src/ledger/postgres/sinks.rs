//! The scale-out ledger's sinks (migration 0011), shared by every instance: the lease in the
//! row decides which one delivers a sink, its fence which one may move the cursor.

use std::time::Duration;

use async_trait::async_trait;

use super::PgLedger;
use crate::ledger::sinks::{sql, ttl_micros, DeadLetter, NewSink, Progress, SinkRow, SinkStore};

#[async_trait]
impl SinkStore for PgLedger {
    async fn sinks(&self) -> anyhow::Result<Vec<SinkRow>> {
        let sql = format!("{} ORDER BY s.created_at, s.id", sql::LIST);
        Ok(sqlx::query_as(&sql).fetch_all(&self.pool).await?)
    }

    async fn sink(&self, id: &str) -> anyhow::Result<Option<SinkRow>> {
        let sql = format!("{} WHERE s.id = $1", sql::LIST);
        Ok(sqlx::query_as(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn put_sink(&self, new: &NewSink, cursor: u64, now: i64) -> anyhow::Result<bool> {
        let done = sqlx::query(sql::INSERT)
            .bind(&new.id)
            .bind(new.kind.as_str())
            .bind(&new.target)
            .bind(&new.subject)
            .bind(&new.secret)
            .bind(new.origin)
            .bind(&new.description)
            .bind(cursor as i64)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_sink(&self, id: &str) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        let gone = sqlx::query(sql::DELETE).bind(id).execute(&mut *tx).await?;
        sqlx::query(sql::DELETE_DEAD)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone.rows_affected() == 1)
    }

    async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> anyhow::Result<bool> {
        let done = sqlx::query(sql::ENABLE)
            .bind(id)
            .bind(enabled as i64)
            .bind(reason)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn lease(
        &self,
        id: &str,
        owner: &str,
        now: i64,
        ttl: Duration,
    ) -> anyhow::Result<Option<(i64, u64)>> {
        let row: Option<(i64, i64)> = sqlx::query_as(sql::LEASE)
            .bind(id)
            .bind(owner)
            .bind(now)
            .bind(ttl_micros(ttl))
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|(fence, cursor)| (fence, cursor as u64)))
    }

    async fn release(&self, id: &str, owner: &str) -> anyhow::Result<()> {
        sqlx::query(sql::RELEASE)
            .bind(id)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn advance(&self, id: &str, fence: i64, p: &Progress) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        let moved = sqlx::query(sql::ADVANCE)
            .bind(id)
            .bind(fence)
            .bind(p.cursor as i64)
            .bind(p.delivered as i64)
            .bind(p.lost as i64)
            .bind(p.delivered_at)
            .bind((p.delivered > 0) as i64)
            .execute(&mut *tx)
            .await?;
        if moved.rows_affected() == 0 {
            return Ok(false);
        }
        for d in &p.dead {
            sqlx::query(sql::DEAD)
                .bind(id)
                .bind(d.pos)
                .bind(&d.event_id)
                .bind(&d.body)
                .bind(d.attempts)
                .bind(&d.last_error)
                .bind(d.dead_at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn failed(&self, id: &str, fence: i64, error: &str, now: i64) -> anyhow::Result<()> {
        sqlx::query(sql::FAILED)
            .bind(id)
            .bind(fence)
            .bind(error)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn dead_letters(
        &self,
        id: &str,
        replay: bool,
        limit: u32,
    ) -> anyhow::Result<Vec<DeadLetter>> {
        Ok(sqlx::query_as(sql::DEAD_LIST)
            .bind(id)
            .bind(replay as i64)
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn replay(&self, id: &str) -> anyhow::Result<u64> {
        let done = sqlx::query(sql::REPLAY)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn replayed(&self, id: &str, fence: i64, pos: &[i64]) -> anyhow::Result<()> {
        for p in pos {
            sqlx::query(sql::REPLAYED)
                .bind(id)
                .bind(p)
                .bind(fence)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}
