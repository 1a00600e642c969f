//! SQLite ledger of the embedded deployment: one file, WAL mode, one writer connection.
//!
//! All writes come from the group-commit task through a single connection, so SQLite never
//! sees two writers and never answers SQLITE_BUSY; reads use a small pool of their own, which
//! WAL lets run beside the writer. Orders are inserted with multi-row statements to keep a
//! batch of a thousand claims down to a handful of statements.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, QueryBuilder, Row, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::Mutex;

use super::rows::{self, micros, OrderRow};
use super::{IdemRecord, Ledger, LedgerWrite, Recovery};
use crate::domain::{CampaignLimits, Order};

/// Rows per multi-row INSERT: 8 columns × 1000 stays below SQLite's 32,766 bound parameters.
const ROWS_PER_INSERT: usize = 1000;

pub struct SqliteLedger {
    writer: Mutex<SqliteConnection>,
    readers: SqlitePool,
}

impl SqliteLedger {
    /// Opens (creating if needed) `<dir>/seckill.db` and runs the embedded migrations.
    /// `synchronous_full` makes every commit survive power loss, not only a process crash.
    pub async fn open(dir: &Path, synchronous_full: bool) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create data directory {}", dir.display()))?;
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
        sqlx::migrate!("./migrations/sqlite")
            .run(&mut writer)
            .await
            .context("ledger migration failed")?;
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.read_only(true))
            .await?;
        Ok(Self {
            writer: Mutex::new(writer),
            readers,
        })
    }
}

async fn insert_orders(conn: &mut SqliteConnection, orders: &[&Order]) -> anyhow::Result<()> {
    for chunk in orders.chunks(ROWS_PER_INSERT) {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, codes, state, created_at) ",
        );
        qb.push_values(chunk, |mut b, o| {
            b.push_bind(&o.order_id)
                .push_bind(&o.campaign_id)
                .push_bind(o.seq() as i64)
                .push_bind(&o.user_id)
                .push_bind(o.qty as i64)
                .push_bind(rows::codes_json(&o.codes))
                .push_bind(o.state.as_str())
                .push_bind(micros(o.created_at));
        });
        qb.push(" ON CONFLICT (order_id) DO NOTHING");
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

async fn insert_idem(conn: &mut SqliteConnection, recs: &[&IdemRecord]) -> anyhow::Result<()> {
    for chunk in recs.chunks(ROWS_PER_INSERT) {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT INTO idempotency (campaign_id, user_id, key, answer, created_at) ",
        );
        qb.push_values(chunk, |mut b, r| {
            b.push_bind(&r.campaign_id)
                .push_bind(&r.user_id)
                .push_bind(&r.key)
                .push_bind(rows::answer_json(&r.answer))
                .push_bind(micros(r.created_at));
        });
        qb.push(" ON CONFLICT DO NOTHING");
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

async fn insert_codes(
    conn: &mut SqliteConnection,
    campaign_id: &str,
    first_pos: i64,
    codes: &[String],
) -> anyhow::Result<()> {
    for (n, chunk) in codes.chunks(ROWS_PER_INSERT * 2).enumerate() {
        let base = first_pos + (n * ROWS_PER_INSERT * 2) as i64;
        let mut qb =
            QueryBuilder::<Sqlite>::new("INSERT INTO campaign_codes (campaign_id, code, pos) ");
        qb.push_values(chunk.iter().enumerate(), |mut b, (i, code)| {
            b.push_bind(campaign_id)
                .push_bind(code)
                .push_bind(base + i as i64);
        });
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

async fn event(
    conn: &mut SqliteConnection,
    campaign_id: &str,
    kind: &str,
    detail: String,
    at: DateTime<Utc>,
) -> anyhow::Result<()> {
    sqlx::query("INSERT INTO events (campaign_id, kind, detail, at) VALUES (?, ?, ?, ?)")
        .bind(campaign_id)
        .bind(kind)
        .bind(detail)
        .bind(micros(at))
        .execute(conn)
        .await?;
    Ok(())
}

async fn apply_one(conn: &mut SqliteConnection, write: &LedgerWrite) -> anyhow::Result<()> {
    match write {
        LedgerWrite::Order(_) | LedgerWrite::Idem(_) => unreachable!("batched by the caller"),
        LedgerWrite::CreateCampaign {
            def,
            total,
            codes,
            status,
            at,
        } => {
            sqlx::query(
                "INSERT INTO campaigns (id, kind, total, per_user_limit, status, starts_at, ends_at, created_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&def.id)
            .bind(def.kind.as_str())
            .bind(*total as i64)
            .bind(def.per_user_limit as i64)
            .bind(status.as_str())
            .bind(def.starts_at.map(micros))
            .bind(def.ends_at.map(micros))
            .bind(micros(*at))
            .execute(&mut *conn)
            .await?;
            insert_codes(conn, &def.id, 0, codes).await?;
            event(conn, &def.id, "create", format!("total={total}"), *at).await
        }
        LedgerWrite::Restock {
            campaign_id,
            units,
            codes,
            at,
        } => {
            let before: i64 = sqlx::query_scalar("SELECT total FROM campaigns WHERE id = ?")
                .bind(campaign_id)
                .fetch_one(&mut *conn)
                .await?;
            sqlx::query("UPDATE campaigns SET total = total + ? WHERE id = ?")
                .bind(*units as i64)
                .bind(campaign_id)
                .execute(&mut *conn)
                .await?;
            insert_codes(conn, campaign_id, before, codes).await?;
            event(conn, campaign_id, "restock", format!("units={units}"), *at).await
        }
        LedgerWrite::Status {
            campaign_id,
            status,
            at,
        } => {
            sqlx::query("UPDATE campaigns SET status = ? WHERE id = ?")
                .bind(status.as_str())
                .bind(campaign_id)
                .execute(&mut *conn)
                .await?;
            event(conn, campaign_id, "status", status.as_str().to_owned(), *at).await
        }
        LedgerWrite::Cancel { order_id, at } => {
            let done = sqlx::query(
                "UPDATE orders SET state = 'cancelled', cancelled_at = ? WHERE order_id = ? AND state = 'active' \
                 RETURNING campaign_id",
            )
            .bind(micros(*at))
            .bind(order_id)
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(row) = done {
                let campaign_id: String = row.get(0);
                event(conn, &campaign_id, "cancel", order_id.clone(), *at).await?;
            }
            Ok(())
        }
        LedgerWrite::Limits {
            campaign_id,
            limits,
            at,
        } => {
            let json = serde_json::to_string(limits)?;
            sqlx::query(
                "INSERT INTO campaign_limits (campaign_id, limits, updated_at) VALUES (?, ?, ?) \
                 ON CONFLICT (campaign_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at",
            )
            .bind(campaign_id)
            .bind(&json)
            .bind(micros(*at))
            .execute(&mut *conn)
            .await?;
            event(conn, campaign_id, "limits", json, *at).await
        }
    }
}

#[async_trait]
impl Ledger for SqliteLedger {
    async fn apply(&self, writes: &[&LedgerWrite]) -> anyhow::Result<()> {
        let mut conn = self.writer.lock().await;
        let mut tx = conn.begin().await?;
        let mut orders = Vec::new();
        let mut idem = Vec::new();
        for w in writes {
            match w {
                LedgerWrite::Order(o) => orders.push(o),
                LedgerWrite::Idem(r) => idem.push(r),
                other => apply_one(&mut tx, other).await?,
            }
        }
        insert_orders(&mut tx, &orders).await?;
        insert_idem(&mut tx, &idem).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn order(&self, order_id: &str) -> anyhow::Result<Option<Order>> {
        let row: Option<OrderRow> = sqlx::query_as(&format!("{SELECT_ORDER} WHERE order_id = ?"))
            .bind(order_id)
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
        let rows: Vec<OrderRow> = sqlx::query_as(&format!(
            "{SELECT_ORDER} WHERE campaign_id = ? AND seq > ? AND (? IS NULL OR user_id = ?) \
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
        let mut conn = self.writer.lock().await;
        super::sqlite_recovery::recover(&mut conn, idem_since, into).await
    }

    async fn prune_idempotency(&self, before: DateTime<Utc>) -> anyhow::Result<u64> {
        let mut conn = self.writer.lock().await;
        let done = sqlx::query("DELETE FROM idempotency WHERE created_at < ?")
            .bind(micros(before))
            .execute(&mut *conn)
            .await?;
        Ok(done.rows_affected())
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

const SELECT_ORDER: &str = "SELECT order_id, campaign_id, user_id, qty, codes, state, created_at, cancelled_at FROM orders";
