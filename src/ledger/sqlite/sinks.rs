//! The embedded ledger's sinks (migration 0010): reads on the reader pool, writes through the
//! one writer connection, like every other write of this ledger.

use std::time::Duration;

use async_trait::async_trait;

use super::SqliteLedger;
use crate::ledger::sinks::{
    sql, sqlite_params as q, ttl_micros, DeadLetter, NewSink, Progress, SinkRow, SinkStore,
};

#[async_trait]
impl SinkStore for SqliteLedger {
    async fn sinks(&self) -> anyhow::Result<Vec<SinkRow>> {
        let sql = q(&format!("{} ORDER BY s.created_at, s.id", sql::LIST));
        Ok(sqlx::query_as(&sql).fetch_all(&self.readers).await?)
    }

    async fn sink(&self, id: &str) -> anyhow::Result<Option<SinkRow>> {
        let sql = q(&format!("{} WHERE s.id = $1", sql::LIST));
        let rows: Vec<SinkRow> = sqlx::query_as(&sql)
            .bind(id)
            .fetch_all(&self.readers)
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn put_sink(&self, new: &NewSink, cursor: u64, now: i64) -> anyhow::Result<bool> {
        let mut w = self.writer.lock().await;
        let done = sqlx::query(&q(sql::INSERT))
            .bind(&new.id)
            .bind(new.kind.as_str())
            .bind(&new.target)
            .bind(&new.subject)
            .bind(&new.secret)
            .bind(new.origin)
            .bind(&new.description)
            .bind(cursor as i64)
            .bind(now)
            .execute(w.conn().await?)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_sink(&self, id: &str) -> anyhow::Result<bool> {
        let mut w = self.writer.lock().await;
        w.begin().await?;
        let done = async {
            let conn = w.conn().await?;
            let gone = sqlx::query(&q(sql::DELETE))
                .bind(id)
                .execute(&mut *conn)
                .await?;
            sqlx::query(&q(sql::DELETE_DEAD))
                .bind(id)
                .execute(&mut *conn)
                .await?;
            anyhow::Ok(gone.rows_affected() == 1)
        }
        .await;
        match done {
            Ok(gone) => {
                w.commit().await?;
                Ok(gone)
            }
            Err(e) => {
                w.roll_back().await;
                Err(e)
            }
        }
    }

    async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> anyhow::Result<bool> {
        let mut w = self.writer.lock().await;
        let done = sqlx::query(&q(sql::ENABLE))
            .bind(id)
            .bind(enabled as i64)
            .bind(reason)
            .execute(w.conn().await?)
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
        let mut w = self.writer.lock().await;
        // fetch_all, not fetch_optional: the statement's own error must not be dropped.
        let rows: Vec<(i64, i64)> = sqlx::query_as(&q(sql::LEASE))
            .bind(id)
            .bind(owner)
            .bind(now)
            .bind(ttl_micros(ttl))
            .fetch_all(w.conn().await?)
            .await?;
        Ok(rows.first().map(|&(fence, cursor)| (fence, cursor as u64)))
    }

    async fn release(&self, id: &str, owner: &str) -> anyhow::Result<()> {
        let mut w = self.writer.lock().await;
        sqlx::query(&q(sql::RELEASE))
            .bind(id)
            .bind(owner)
            .execute(w.conn().await?)
            .await?;
        Ok(())
    }

    async fn advance(&self, id: &str, fence: i64, p: &Progress) -> anyhow::Result<bool> {
        let mut w = self.writer.lock().await;
        w.begin().await?;
        let done = async {
            let conn = w.conn().await?;
            let moved = sqlx::query(&q(sql::ADVANCE))
                .bind(id)
                .bind(fence)
                .bind(p.cursor as i64)
                .bind(p.delivered as i64)
                .bind(p.lost as i64)
                .bind(p.delivered_at)
                .bind((p.delivered > 0) as i64)
                .execute(&mut *conn)
                .await?;
            if moved.rows_affected() == 0 {
                return anyhow::Ok(false);
            }
            for d in &p.dead {
                sqlx::query(&q(sql::DEAD))
                    .bind(id)
                    .bind(d.pos)
                    .bind(&d.event_id)
                    .bind(&d.body)
                    .bind(d.attempts)
                    .bind(&d.last_error)
                    .bind(d.dead_at)
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(true)
        }
        .await;
        match done {
            Ok(true) => {
                w.commit().await?;
                Ok(true)
            }
            Ok(false) => {
                w.roll_back().await;
                Ok(false)
            }
            Err(e) => {
                w.roll_back().await;
                Err(e)
            }
        }
    }

    async fn failed(&self, id: &str, fence: i64, error: &str, now: i64) -> anyhow::Result<()> {
        let mut w = self.writer.lock().await;
        sqlx::query(&q(sql::FAILED))
            .bind(id)
            .bind(fence)
            .bind(error)
            .bind(now)
            .execute(w.conn().await?)
            .await?;
        Ok(())
    }

    async fn dead_letters(
        &self,
        id: &str,
        replay: bool,
        limit: u32,
    ) -> anyhow::Result<Vec<DeadLetter>> {
        Ok(sqlx::query_as(&q(sql::DEAD_LIST))
            .bind(id)
            .bind(replay as i64)
            .bind(limit as i64)
            .fetch_all(&self.readers)
            .await?)
    }

    async fn replay(&self, id: &str) -> anyhow::Result<u64> {
        let mut w = self.writer.lock().await;
        let done = sqlx::query(&q(sql::REPLAY))
            .bind(id)
            .execute(w.conn().await?)
            .await?;
        Ok(done.rows_affected())
    }

    async fn replayed(&self, id: &str, fence: i64, pos: &[i64]) -> anyhow::Result<()> {
        let mut w = self.writer.lock().await;
        let conn = w.conn().await?;
        for p in pos {
            sqlx::query(&q(sql::REPLAYED))
                .bind(id)
                .bind(p)
                .bind(fence)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
}
