//! SQLite ledger of the embedded deployment: one file, WAL mode, one writer connection.
//!
//! All writes come from the group-commit task through a single connection, so SQLite never
//! sees two writers and never answers SQLITE_BUSY; reads use a small pool of their own, which
//! WAL lets run beside the writer. Orders are inserted with multi-row statements to keep a
//! batch of a thousand claims down to a handful of statements.
//!
//! The data directory is locked for the process's lifetime (`dir_lock`), and the writer
//! connection acknowledges nothing SQLite did not confirm (`sqlite/writer`). Orders are
//! inserted without `ON CONFLICT`: a freshly decided order whose id the ledger already holds
//! is a fault that stops the batch, never a silent no-op.

/// `SELECT` of an order row's columns `FROM orders`, followed by the literals given: one
/// `&'static str` put together with `concat!`, no SQL formatted at run time.
macro_rules! select_order {
    ($($tail:literal),* $(,)?) => {
        concat!(
            "SELECT order_id, campaign_id, user_id, qty, codes, state, created_at, cancelled_at, \
             pay_by, resolved_at FROM orders",
            $($tail),*
        )
    };
}

mod feed;
pub(crate) mod holds;
pub(crate) mod live;
pub(crate) mod locks;
pub(crate) mod recovery;
pub(crate) mod room;
mod shaped;
mod sinks;
pub(crate) mod writer;
pub(crate) mod writes;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Row, SqliteConnection, SqlitePool};
use tokio::sync::Mutex;

use crate::domain::{CampaignLimits, Order};
use crate::faults::{self, BatchFault};
use crate::ledger::dir_lock::DirLock;
use crate::ledger::rows::{micros, OrderRow};
use crate::ledger::WriteFault;
use crate::ledger::{Ledger, LedgerWrite, Recovery};
use writer::{statement_fault, Writer};

pub struct SqliteLedger {
    writer: Mutex<Writer>,
    readers: SqlitePool,
    lock: std::sync::Mutex<Option<DirLock>>,
}

impl SqliteLedger {
    /// [`Ledger::recover`] of one campaign, from one snapshot on a reader connection (the
    /// writer keeps committing meanwhile); prunes nothing.
    pub async fn recover_campaign(
        &self,
        id: &str,
        idem_since: DateTime<Utc>,
        into: &mut dyn Recovery,
    ) -> anyhow::Result<()> {
        let mut tx = self.readers.begin().await?;
        recovery::recover(&mut tx, idem_since, Some(id), into).await?;
        tx.commit().await?;
        Ok(())
    }

    /// What the ledger remembers of an admin Idempotency-Key.
    pub async fn admin_key(
        &self,
        key: &crate::domain::AdminKey,
    ) -> anyhow::Result<crate::ledger::admin_keys::Remembered> {
        crate::ledger::admin_keys::lookup_sqlite(&self.readers, key).await
    }

    /// Deletes admin Idempotency-Keys older than `before`; returns how many.
    pub async fn prune_admin_keys(&self, before: DateTime<Utc>) -> anyhow::Result<u64> {
        let mut writer = self.writer.lock().await;
        crate::ledger::admin_keys::prune_sqlite(writer.conn().await?, before).await
    }

    /// Opens (creating if needed) `<dir>/seckill.db` and runs the embedded migrations.
    /// `synchronous_full` makes every commit survive power loss, not only a process crash.
    /// Fails at once if another process holds the directory.
    pub async fn open(dir: &Path, synchronous_full: bool) -> anyhow::Result<Self> {
        let lock = DirLock::acquire(dir)?;
        let path = dir.join("seckill.db");
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if synchronous_full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(false);
        let mut writer = SqliteConnection::connect_with(&opts)
            .await
            .with_context(|| format!("cannot open ledger {}", path.display()))?;
        crate::ledger::migrations::run_sqlite(&mut writer).await?;
        for file in [
            "seckill.db",
            "seckill.db-wal",
            "seckill.db-shm",
            "seckill.lock",
        ] {
            crate::ledger::dir_lock::private(&dir.join(file), 0o600)?;
        }
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.clone().read_only(true))
            .await?;
        Ok(Self {
            writer: Mutex::new(Writer::new(writer, opts)),
            readers,
            lock: std::sync::Mutex::new(Some(lock)),
        })
    }

    /// Lock service: grants `name` to `token` for `ttl_ms` if its lease ended, durably;
    /// `Ok(fence)` or `Err(expires_ms)` of the holder (see `sqlite/locks`).
    pub async fn lock_acquire(
        &self,
        name: &str,
        token: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> anyhow::Result<Result<u64, u64>> {
        let mut writer = self.writer.lock().await;
        locks::acquire(writer.conn().await?, name, token, owner, ttl_ms, now_ms).await
    }

    /// Lock service: extends `token`'s lease; its fence, `None` if it does not hold it.
    pub async fn lock_extend(
        &self,
        name: &str,
        token: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> anyhow::Result<Option<u64>> {
        let mut writer = self.writer.lock().await;
        locks::extend(writer.conn().await?, name, token, ttl_ms, now_ms).await
    }

    /// Lock service: releases `token`'s lease; false if it does not hold it.
    pub async fn lock_release(&self, name: &str, token: &str, now_ms: u64) -> anyhow::Result<bool> {
        let mut writer = self.writer.lock().await;
        locks::release(writer.conn().await?, name, token, now_ms).await
    }

    /// Closes the writer for good and releases the data directory (graceful shutdown, after
    /// the final flush). Later writes fail as not committed.
    pub async fn close(&self) {
        self.writer.lock().await.close();
        self.lock.lock().expect("lock mutex").take();
    }

    /// Closes the writer connection so the next use opens a fresh one (in-process recovery
    /// after a commit whose outcome is unknown).
    pub async fn reopen_writer(&self) {
        self.writer.lock().await.discard();
    }
}

#[async_trait]
impl Ledger for SqliteLedger {
    /// Errors are [`WriteFault`]s: the group commit tells "nothing written" from "unknown".
    async fn apply(&self, writes: &[&LedgerWrite]) -> Result<(), WriteFault> {
        let fault = faults::next_batch();
        match fault {
            BatchFault::Panic => panic!("injected ledger writer panic (SECKILL_FAULTS)"),
            BatchFault::DiskFull => {
                return Err(WriteFault::NotCommitted(
                    "database or disk is full (injected by SECKILL_FAULTS)".into(),
                ))
            }
            BatchFault::None | BatchFault::UnknownAfterCommit | BatchFault::UnknownRolledBack => {}
        }
        let mut writer = self.writer.lock().await;
        let conn = writer.begin().await?;
        if let Err(e) = writes::write_batch(conn, writes).await {
            let fault = statement_fault(&e);
            writer.roll_back().await;
            return Err(fault);
        }
        if fault == BatchFault::UnknownRolledBack {
            writer.roll_back().await;
            writer.discard();
            return Err(WriteFault::Unknown(
                "disk I/O error at COMMIT, rolled back (injected by SECKILL_FAULTS)".into(),
            ));
        }
        writer.commit().await?;
        if fault == BatchFault::UnknownAfterCommit {
            writer.discard();
            return Err(WriteFault::Unknown(
                "disk I/O error after COMMIT (injected by SECKILL_FAULTS)".into(),
            ));
        }
        Ok(())
    }

    async fn order(&self, order_id: &str) -> anyhow::Result<Option<Order>> {
        let (campaign_id, seq) = order_key(order_id);
        let row: Option<OrderRow> =
            sqlx::query_as(select_order!(" WHERE campaign_id = ? AND seq = ?"))
                .bind(campaign_id)
                .bind(seq)
                .fetch_optional(&self.readers)
                .await?;
        row.map(Order::try_from).transpose()
    }

    async fn orders(
        &self,
        campaign_id: &str,
        user_id: Option<&str>,
        after: u64,
        limit: u32,
    ) -> anyhow::Result<Vec<Order>> {
        let rows: Vec<OrderRow> = sqlx::query_as(select_order!(
            " WHERE campaign_id = ? AND seq > ? AND (? IS NULL OR user_id = ?) \
             ORDER BY seq LIMIT ?"
        ))
        .bind(campaign_id)
        .bind(after as i64)
        .bind(user_id)
        .bind(user_id)
        .bind(limit as i64)
        .fetch_all(&self.readers)
        .await?;
        rows.into_iter().map(Order::try_from).collect()
    }

    async fn recover(
        &self,
        idem_since: DateTime<Utc>,
        into: &mut dyn Recovery,
    ) -> anyhow::Result<()> {
        let mut writer = self.writer.lock().await;
        recovery::recover(writer.conn().await?, idem_since, None, into).await
    }

    async fn feed_head(&self) -> anyhow::Result<crate::ledger::feed::FeedHead> {
        feed::head(&self.readers).await
    }

    async fn feed(
        &self,
        read: &crate::ledger::feed::FeedRead<'_>,
    ) -> anyhow::Result<Vec<crate::domain::Event>> {
        feed::read(&self.readers, read).await
    }

    async fn prune_feed(&self, before: DateTime<Utc>, batch: u32) -> anyhow::Result<u64> {
        let mut writer = self.writer.lock().await;
        feed::prune(&mut writer, before, batch).await
    }

    async fn prune_idempotency(&self, before: DateTime<Utc>) -> anyhow::Result<u64> {
        let mut writer = self.writer.lock().await;
        let conn = writer.conn().await?;
        let done = sqlx::query("DELETE FROM idempotency WHERE created_at < ?")
            .bind(micros(before))
            .execute(&mut *conn)
            .await?;
        Ok(done.rows_affected())
    }

    async fn probe(&self) -> anyhow::Result<()> {
        let mut writer = self.writer.lock().await;
        let conn = writer.begin().await?;
        let wrote = async {
            sqlx::query(
                "INSERT INTO events (campaign_id, kind, detail, at) VALUES ('', 'probe', '', 0)",
            )
            .execute(&mut *conn)
            .await?;
            sqlx::query("DELETE FROM events WHERE kind = 'probe'")
                .execute(&mut *conn)
                .await
        }
        .await;
        if let Err(e) = wrote {
            writer.roll_back().await;
            return Err(e.into());
        }
        writer.commit().await?;
        Ok(())
    }

    async fn ping(&self) -> anyhow::Result<()> {
        sqlx::query("SELECT 1").execute(&self.readers).await?;
        Ok(())
    }

    async fn campaign_limits(&self) -> anyhow::Result<Vec<(String, CampaignLimits)>> {
        let rows =
            sqlx::query("SELECT campaign_id, limits FROM campaign_limits ORDER BY campaign_id")
                .fetch_all(&self.readers)
                .await?;
        rows.into_iter()
            .map(|r| {
                let json: String = r.get(1);
                let limits = serde_json::from_str(&json)
                    .with_context(|| format!("bad stored limits {json:?}"))?;
                Ok((r.get(0), limits))
            })
            .collect()
    }
}

/// The primary key of the orders table for `order_id`: `<campaign_id>-<seq>` is the only
/// spelling an order id has (`domain::parse_order_id`, kept true by the table's CHECK), so a
/// lookup by id is a lookup by key. An id no order can have gives a key no row has.
pub(super) fn order_key(order_id: &str) -> (&str, i64) {
    crate::domain::parse_order_id(order_id)
        .map(|(campaign, seq)| (campaign, seq as i64))
        .unwrap_or(("", 0))
}

impl SqliteLedger {
    /// Deletes the answers of claims that changed nothing (every outcome but `won`) older
    /// than `before`; they have a shorter retention (see `engine::idempotency`).
    pub async fn prune_rejected_idempotency(&self, before: DateTime<Utc>) -> anyhow::Result<u64> {
        let mut writer = self.writer.lock().await;
        let conn = writer.conn().await?;
        let done = sqlx::query(
            "DELETE FROM idempotency WHERE created_at < ? \
             AND json_extract(answer, '$.outcome') <> 'won'",
        )
        .bind(micros(before))
        .execute(&mut *conn)
        .await?;
        Ok(done.rows_affected())
    }
}
