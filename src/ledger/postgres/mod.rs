//! PostgreSQL ledger of the scale-out deployment: the system of record shared by every instance.
//!
//! Same tables and meaning as the SQLite ledger (separate migrations in `migrations/postgres`,
//! run at start), written through a connection pool because many `seckill serve` and
//! `seckill worker` processes write at once. Queries are built at run time (no compile-time
//! checked macros), so building seckill never needs a live database. The operations only the
//! scale-out deployment needs (row-locked admin changes, reconciliation reads, poison records)
//! live in `postgres/ops.rs`; reading a campaign back for recovery in `postgres/recovery.rs`;
//! applying the order pipeline's batches in `postgres/pipeline.rs`, and the transitions of
//! pending orders (holds) in `postgres/holds.rs`; one batch of [`LedgerWrite`]s in
//! `postgres/writes.rs`, as `sqlite/writes.rs` does for SQLite.

/// The columns of an order row, as one string literal: statements are put together with
/// `concat!`, so each is a `&'static str` and no SQL is formatted at run time.
macro_rules! order_columns {
    () => {
        "order_id, campaign_id, user_id, qty, codes, state, created_at, cancelled_at, pay_by, \
         resolved_at"
    };
}

/// `SELECT` of [`order_columns!`] `FROM orders`, followed by the literals given.
macro_rules! select_order {
    ($($tail:literal),* $(,)?) => {
        concat!("SELECT ", order_columns!(), " FROM orders", $($tail),*)
    };
}

pub(crate) mod entries;
mod event;
mod feed;
pub mod fences;
pub(crate) mod holds;
pub(crate) mod lineage;
pub(crate) mod liveness;
pub(crate) mod ops;
pub(crate) mod pipeline;
pub(crate) mod recovery;
pub(crate) mod room;
mod sinks;
mod writes;

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Row};

use crate::domain::{CampaignLimits, Order};
use crate::ledger::rows::{micros, OrderRow};
use crate::ledger::{Ledger, LedgerWrite, Recovery, StoredCampaign, Wanted, WriteFault};

pub struct PgLedger {
    pub(super) pool: PgPool,
}

/// Refuses `sslrootcert` with an `sslmode` that does not verify: libpq then verifies anyway
/// (as `verify-ca`), the PostgreSQL driver here would not, and an operator who gave a CA
/// means it to be checked.
fn check_tls(url: &str) -> anyhow::Result<()> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    if param("sslrootcert").is_some() {
        let mode = param("sslmode").unwrap_or("prefer");
        anyhow::ensure!(
            mode == "verify-ca" || mode == "verify-full",
            "the --postgres URL gives sslrootcert with sslmode={mode}, which would not check \
             the server's certificate against it: use sslmode=verify-full (or verify-ca)"
        );
    }
    Ok(())
}

impl PgLedger {
    /// Connects to `url` and runs the PostgreSQL migrations.
    pub async fn open(url: &str, max_connections: u32) -> anyhow::Result<Self> {
        check_tls(url)?;
        let opts: PgConnectOptions = url
            .parse()
            .with_context(|| "the --postgres URL is not a valid postgres:// URL".to_string())?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(opts)
            .await
            .context("cannot connect to PostgreSQL")?;
        sqlx::migrate!("./migrations/postgres")
            .run(&pool)
            .await
            .context("PostgreSQL migration failed")?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Ledger for PgLedger {
    async fn apply(&self, writes: &[&LedgerWrite]) -> Result<(), WriteFault> {
        self.apply_batch(writes).await.map_err(|f| f.fault())
    }

    async fn order(&self, order_id: &str) -> anyhow::Result<Option<Order>> {
        let row: Option<OrderRow> = sqlx::query_as(select_order!(" WHERE order_id = $1"))
            .bind(order_id)
            .fetch_optional(&self.pool)
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
            " WHERE campaign_id = $1 AND seq > $2 \
             AND ($3::TEXT IS NULL OR user_id = $3) ORDER BY seq LIMIT $4"
        ))
        .bind(campaign_id)
        .bind(after as i64)
        .bind(user_id)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Order::try_from).collect()
    }

    async fn recover(
        &self,
        idem_since: DateTime<Utc>,
        into: &mut dyn Recovery,
    ) -> anyhow::Result<()> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM campaigns ORDER BY created_at")
            .fetch_all(&self.pool)
            .await?;
        // Campaign by campaign, each from one snapshot (the gate rebuilds one at a time; this
        // whole-ledger read serves tools and tests, not the claim path).
        for id in ids {
            let Some((c, _)) = self.stored_snapshot(&id).await? else {
                continue;
            };
            let live = c.active.iter().map(|(_, qty, _)| qty).sum::<u64>()
                + c.pending.iter().map(|p| p.qty).sum::<u64>();
            let wanted = into.campaign(StoredCampaign {
                def: c.def,
                total: c.total,
                status: c.status,
                max_seq: c.max_seq,
                live_units: live,
                pending: !c.pending.is_empty(),
                answers: true,
            })?;
            if wanted == Wanted::DefinitionOnly {
                continue;
            }
            for code in c.codes {
                into.code(&id, code)?;
            }
            for (user, qty, codes) in &c.active {
                into.order(&id, user, *qty, codes)?;
            }
            for p in &c.pending {
                into.pending(&id, p.row())?;
            }
            for rec in self.idem_since(&id, idem_since).await? {
                into.idem(rec)?;
            }
        }
        Ok(())
    }

    async fn feed_head(&self) -> anyhow::Result<crate::ledger::feed::FeedHead> {
        feed::head(&self.pool).await
    }

    async fn feed(
        &self,
        read: &crate::ledger::feed::FeedRead<'_>,
    ) -> anyhow::Result<Vec<crate::domain::Event>> {
        feed::read(&self.pool, read).await
    }

    async fn number_feed(&self) -> anyhow::Result<()> {
        feed::number(&self.pool).await
    }

    async fn prune_feed(&self, before: DateTime<Utc>, batch: u32) -> anyhow::Result<u64> {
        feed::prune(&self.pool, before, batch).await
    }

    async fn prune_idempotency(&self, before: DateTime<Utc>) -> anyhow::Result<u64> {
        let done = sqlx::query("DELETE FROM idempotency WHERE created_at < $1")
            .bind(micros(before))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn ping(&self) -> anyhow::Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn campaign_limits(&self) -> anyhow::Result<Vec<(String, CampaignLimits)>> {
        let rows =
            sqlx::query("SELECT campaign_id, limits FROM campaign_limits ORDER BY campaign_id")
                .fetch_all(&self.pool)
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

#[cfg(test)]
mod tls_tests {
    #[test]
    fn a_ca_without_verification_is_refused() {
        let ok = [
            "postgres://h/db",
            "postgres://h/db?sslmode=require",
            "postgres://h/db?sslmode=verify-full&sslrootcert=/ca.pem",
            "postgres://h/db?sslrootcert=/ca.pem&sslmode=verify-ca",
        ];
        for url in ok {
            super::check_tls(url).unwrap();
        }
        for url in [
            "postgres://h/db?sslrootcert=/ca.pem",
            "postgres://h/db?sslmode=require&sslrootcert=/ca.pem",
        ] {
            let e = super::check_tls(url).unwrap_err().to_string();
            assert!(e.contains("verify-full"), "{e}");
        }
    }
}
