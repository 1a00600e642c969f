//! The embedded ledger's sinks (migration 0010): reads on the reader pool, writes through the
//! one writer connection, like every other write of this ledger. A transaction here is
//! cancel-safe ([`Tx`]): a delivery task aborted mid-write (its sink disabled, the server
//! stopping) leaves no transaction open on the writer for the next group commit to trip on.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::SqliteConnection;
use tokio::sync::MutexGuard;

use super::writer::Writer;
use super::SqliteLedger;
use crate::ledger::sinks::{
    sql, sqlite_params as q, ttl_micros, NewSink, Parked, Progress, Retried, SinkRow, SinkStore,
};

/// A write transaction on the writer that is rolled back if dropped before its end: the
/// connection is discarded (closing it rolls back) and the next writer reopens one.
struct Tx<'a> {
    w: MutexGuard<'a, Writer>,
    open: bool,
}

impl<'a> Tx<'a> {
    async fn begin(ledger: &'a SqliteLedger) -> anyhow::Result<Tx<'a>> {
        // Open from before BEGIN is sent: dropped while BEGIN runs, the connection goes too.
        let mut tx = Tx {
            w: ledger.writer.lock().await,
            open: true,
        };
        match tx.w.begin().await {
            Ok(_) => Ok(tx),
            Err(e) => {
                tx.open = false; // the writer rolled back and checked the connection itself
                Err(e.into())
            }
        }
    }

    async fn conn(&mut self) -> anyhow::Result<&mut SqliteConnection> {
        self.w.conn().await
    }

    async fn commit(mut self) -> anyhow::Result<()> {
        let done = self.w.commit().await;
        self.open = false;
        Ok(done?)
    }

    async fn roll_back(mut self) {
        self.w.roll_back().await;
        self.open = false;
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open {
            self.w.discard();
        }
    }
}

/// Runs `$body` (which returns `anyhow::Result<bool>`) in a [`Tx`]: committed when it answers
/// `true`, rolled back when `false` or an error.
macro_rules! in_tx {
    ($ledger:expr, |$conn:ident| $body:block) => {{
        let mut tx = Tx::begin($ledger).await?;
        let done: anyhow::Result<bool> = async {
            let $conn = tx.conn().await?;
            $body
        }
        .await;
        match done {
            Ok(true) => {
                tx.commit().await?;
                Ok(true)
            }
            Ok(false) => {
                tx.roll_back().await;
                Ok(false)
            }
            Err(e) => {
                tx.roll_back().await;
                Err(e)
            }
        }
    }};
}

#[async_trait]
impl SinkStore for SqliteLedger {
    async fn sinks(&self) -> anyhow::Result<Vec<SinkRow>> {
        let sql = q(&format!("{} ORDER BY s.created_at, s.id", sql::LIST));
        Ok(sqlx::query_as(sql).fetch_all(&self.readers).await?)
    }

    async fn sink(&self, id: &str) -> anyhow::Result<Option<SinkRow>> {
        let sql = q(&format!("{} WHERE s.id = $1", sql::LIST));
        let rows: Vec<SinkRow> = sqlx::query_as(sql)
            .bind(id)
            .fetch_all(&self.readers)
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn put_sink(&self, new: &NewSink, cursor: u64, now: i64) -> anyhow::Result<bool> {
        let mut w = self.writer.lock().await;
        let done = sqlx::query(q(sql::INSERT))
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
        in_tx!(self, |conn| {
            let gone = sqlx::query(q(sql::DELETE))
                .bind(id)
                .execute(&mut *conn)
                .await?;
            sqlx::query(q(sql::DELETE_PARKED))
                .bind(id)
                .execute(&mut *conn)
                .await?;
            Ok(gone.rows_affected() == 1)
        })
    }

    async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> anyhow::Result<bool> {
        let mut w = self.writer.lock().await;
        let done = sqlx::query(q(sql::ENABLE))
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
        let rows: Vec<(i64, i64)> = sqlx::query_as(q(sql::LEASE))
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
        sqlx::query(q(sql::RELEASE))
            .bind(id)
            .bind(owner)
            .execute(w.conn().await?)
            .await?;
        Ok(())
    }

    async fn advance(&self, id: &str, fence: i64, p: &Progress) -> anyhow::Result<bool> {
        in_tx!(self, |conn| {
            let moved = sqlx::query(q(sql::ADVANCE))
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
                return Ok(false);
            }
            for e in &p.parked {
                sqlx::query(q(sql::PARK))
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
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(true)
        })
    }

    async fn failed(&self, id: &str, fence: i64, error: &str, now: i64) -> anyhow::Result<()> {
        let mut w = self.writer.lock().await;
        sqlx::query(q(sql::FAILED))
            .bind(id)
            .bind(fence)
            .bind(error)
            .bind(now)
            .execute(w.conn().await?)
            .await?;
        Ok(())
    }

    async fn parked_lanes(&self, id: &str) -> anyhow::Result<Vec<(String, bool)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(q(sql::LANES))
            .bind(id)
            .fetch_all(&self.readers)
            .await?;
        Ok(rows.into_iter().map(|(l, d)| (l, d == 1)).collect())
    }

    async fn due(&self, id: &str, now: i64, limit: u32) -> anyhow::Result<Vec<Parked>> {
        Ok(sqlx::query_as(q(sql::DUE))
            .bind(id)
            .bind(now)
            .bind(limit as i64)
            .fetch_all(&self.readers)
            .await?)
    }

    async fn retried(&self, id: &str, fence: i64, r: &Retried, now: i64) -> anyhow::Result<bool> {
        in_tx!(self, |conn| {
            let (held,): (i64,) = sqlx::query_as(q(sql::FENCED))
                .bind(id)
                .bind(fence)
                .fetch_one(&mut *conn)
                .await?;
            if held == 0 {
                return Ok(false);
            }
            match r {
                Retried::Taken { pos, lane, at } => {
                    sqlx::query(q(sql::TAKEN))
                        .bind(id)
                        .bind(pos)
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query(q(sql::NEXT_DUE))
                        .bind(id)
                        .bind(lane)
                        .bind(now)
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query(q(sql::TOOK))
                        .bind(id)
                        .bind(at)
                        .execute(&mut *conn)
                        .await?;
                }
                Retried::Failed {
                    pos,
                    attempts,
                    next_attempt_at,
                    error,
                } => {
                    sqlx::query(q(sql::REFUSED))
                        .bind(id)
                        .bind(pos)
                        .bind(attempts)
                        .bind(next_attempt_at)
                        .bind(error)
                        .execute(&mut *conn)
                        .await?;
                }
                Retried::Dead { lane, error } => {
                    sqlx::query(q(sql::DEAD))
                        .bind(id)
                        .bind(lane)
                        .bind(error)
                        .execute(&mut *conn)
                        .await?;
                }
            }
            Ok(true)
        })
    }

    async fn dead_letters(&self, id: &str, limit: u32) -> anyhow::Result<Vec<Parked>> {
        Ok(sqlx::query_as(q(sql::DEAD_LIST))
            .bind(id)
            .bind(limit as i64)
            .fetch_all(&self.readers)
            .await?)
    }

    async fn replay(&self, id: &str, now: i64) -> anyhow::Result<u64> {
        let mut w = self.writer.lock().await;
        let done = sqlx::query(q(sql::REPLAY))
            .bind(id)
            .bind(now)
            .execute(w.conn().await?)
            .await?;
        Ok(done.rows_affected())
    }
}
