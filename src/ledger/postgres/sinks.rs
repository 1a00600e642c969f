//! The scale-out ledger's sinks (migration 0011), shared by every instance: the lease in the
//! row decides which one delivers a sink, its fence which one may write its progress. Lease
//! times are PostgreSQL's clock, one clock for every instance.

use std::time::Duration;

use async_trait::async_trait;

use super::PgLedger;
use crate::ledger::sinks::{
    sql, ttl_micros, NewSink, Parked, Progress, Retried, SinkRow, SinkStore,
};

/// [`sql::LEASE`] on PostgreSQL's clock: `$3` is the lease's length.
const LEASE: &str = "UPDATE sinks SET \
     fence = CASE WHEN lease_owner = $2 THEN fence ELSE fence + 1 END, \
     lease_owner = $2, \
     lease_until = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint + $3 \
     WHERE id = $1 AND enabled = 1 \
       AND (lease_owner IS NULL OR lease_owner = $2 \
            OR lease_until < (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint) \
     RETURNING fence, cursor";

#[async_trait]
impl SinkStore for PgLedger {
    async fn sinks(&self) -> anyhow::Result<Vec<SinkRow>> {
        let sql = format!("{} ORDER BY s.created_at, s.id", sql::LIST);
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?)
    }

    async fn sink(&self, id: &str) -> anyhow::Result<Option<SinkRow>> {
        let sql = format!("{} WHERE s.id = $1", sql::LIST);
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
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
        sqlx::query(sql::DELETE_PARKED)
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
        _now: i64,
        ttl: Duration,
    ) -> anyhow::Result<Option<(i64, u64)>> {
        let row: Option<(i64, i64)> = sqlx::query_as(LEASE)
            .bind(id)
            .bind(owner)
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
        for e in &p.parked {
            sqlx::query(sql::PARK)
                .bind(id)
                .bind(e.pos)
                .bind(&e.event_id)
                .bind(&e.lane)
                .bind(&e.body)
                .bind(&e.state)
                .bind(e.attempts)
                .bind(e.first_attempt_at)
                .bind(e.next_attempt_at)
                .bind(&e.last_error)
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

    async fn parked_lanes(&self, id: &str) -> anyhow::Result<Vec<(String, bool)>> {
        let rows: Vec<(String, i32)> = sqlx::query_as(sql::LANES)
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(l, d)| (l, d == 1)).collect())
    }

    async fn due(&self, id: &str, now: i64, limit: u32) -> anyhow::Result<Vec<Parked>> {
        Ok(sqlx::query_as(sql::DUE)
            .bind(id)
            .bind(now)
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn retried(&self, id: &str, fence: i64, r: &Retried, now: i64) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        // Locks the sink's row until the end: a takeover waits for this write, or wins first.
        let held: Option<(i64,)> =
            sqlx::query_as("SELECT fence FROM sinks WHERE id = $1 AND fence = $2 FOR UPDATE")
                .bind(id)
                .bind(fence)
                .fetch_optional(&mut *tx)
                .await?;
        if held.is_none() {
            return Ok(false);
        }
        match r {
            Retried::Taken { pos, lane, at } => {
                sqlx::query(sql::TAKEN)
                    .bind(id)
                    .bind(pos)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(sql::NEXT_DUE)
                    .bind(id)
                    .bind(lane)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(sql::TOOK)
                    .bind(id)
                    .bind(at)
                    .execute(&mut *tx)
                    .await?;
            }
            Retried::Failed {
                pos,
                attempts,
                next_attempt_at,
                error,
            } => {
                sqlx::query(sql::REFUSED)
                    .bind(id)
                    .bind(pos)
                    .bind(attempts)
                    .bind(next_attempt_at)
                    .bind(error)
                    .execute(&mut *tx)
                    .await?;
            }
            Retried::Dead { lane, error } => {
                sqlx::query(sql::DEAD)
                    .bind(id)
                    .bind(lane)
                    .bind(error)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn dead_letters(&self, id: &str, limit: u32) -> anyhow::Result<Vec<Parked>> {
        Ok(sqlx::query_as(sql::DEAD_LIST)
            .bind(id)
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn replay(&self, id: &str, now: i64) -> anyhow::Result<u64> {
        let done = sqlx::query(sql::REPLAY)
            .bind(id)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
