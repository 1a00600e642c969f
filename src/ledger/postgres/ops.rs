//! The PostgreSQL operations only the scale-out deployment needs.
//!
//! Admin changes run in short transactions that lock the campaign row (`FOR UPDATE`), so admin
//! operations on one campaign are serialised across every instance, as the embedded
//! deployment's per-campaign admin mutex serialises them in one process. The reconciliation
//! reads (codes from a position, cancelled orders) let the Redis gate catch up with what the
//! ledger committed when a process died between the two writes.

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Row, Transaction};

use super::event::event;
use super::writes::insert_codes;
use super::PgLedger;
use crate::domain::CampaignDef;
use crate::domain::{AdminKey, Error, Order, Restock, Status};
use crate::ledger::admin_keys::{insert_pg, lookup_pg, Remembered};
use crate::ledger::rows::{micros, OrderRow};
use crate::ledger::LedgerWrite;

/// What a committed restock changed: the ledger's total before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restocked {
    pub before: u64,
    pub after: u64,
    /// The Idempotency-Key showed this restock was committed before: nothing was added now.
    pub replayed: bool,
}

/// A stream entry the pipeline could never persist.
#[derive(Debug, Clone)]
pub struct FailedOrder {
    pub stream_id: String,
    pub campaign_id: String,
    pub order_id: Option<String>,
    pub payload: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

fn unavailable(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| Error::unavailable(context, e)
}

/// SQLSTATE class of a database error (`"23"` for integrity violations), if it is one.
pub fn sqlstate_class(e: &anyhow::Error) -> Option<String> {
    e.chain()
        .filter_map(|c| c.downcast_ref::<sqlx::Error>())
        .find_map(|e| match e {
            sqlx::Error::Database(d) => d.code().map(|c| c.chars().take(2).collect()),
            _ => None,
        })
}

/// Whether PostgreSQL refused the data itself (bad value, constraint) rather than being
/// unreachable: such a write will fail the same way however often it is retried.
pub fn is_data_error(e: &anyhow::Error) -> bool {
    matches!(sqlstate_class(e).as_deref(), Some("22" | "23"))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("23505"))
}

impl PgLedger {
    /// Inserts a new campaign; a duplicate id is [`Error::Conflict`].
    pub async fn create_campaign(
        &self,
        def: &CampaignDef,
        total: u64,
        codes: &[String],
        at: DateTime<Utc>,
    ) -> Result<(), Error> {
        self.create_campaign_keyed(def, total, codes, at, None)
            .await
    }

    /// What the ledger remembers of an admin Idempotency-Key.
    pub async fn admin_key(&self, key: &AdminKey) -> Result<Remembered, Error> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(unavailable("reading the Idempotency-Key failed"))?;
        lookup_pg(&mut conn, key)
            .await
            .map_err(unavailable("reading the Idempotency-Key failed"))
    }

    /// [`PgLedger::create_campaign`], remembering `key` in the same transaction.
    pub async fn create_campaign_keyed(
        &self,
        def: &CampaignDef,
        total: u64,
        codes: &[String],
        at: DateTime<Utc>,
        key: Option<&AdminKey>,
    ) -> Result<(), Error> {
        let write = LedgerWrite::CreateCampaign {
            def: def.clone(),
            total,
            codes: codes.to_vec(),
            status: Status::Active,
            at,
        };
        let key_write = key.map(|k| LedgerWrite::AdminKey { key: k.clone(), at });
        let writes: Vec<&LedgerWrite> = std::iter::once(&write).chain(key_write.as_ref()).collect();
        match self.apply_batch(&writes).await.map_err(|f| f.error) {
            Ok(()) => Ok(()),
            Err(e) if sqlstate_class(&e).as_deref() == Some("23") => Err(Error::Conflict(format!(
                "campaign '{}' already exists",
                def.id
            ))),
            Err(e) => Err(Error::unavailable(
                "creating the campaign failed",
                format!("{e:#}"),
            )),
        }
    }

    /// Commits a restock under the campaign's row lock: kind and size checks, codes the
    /// campaign already has (409), new total.
    pub async fn restock(
        &self,
        id: &str,
        restock: &Restock,
        at: DateTime<Utc>,
    ) -> Result<Restocked, Error> {
        self.restock_keyed(id, restock, at, None).await
    }

    /// [`PgLedger::restock`] guarded by an Idempotency-Key: under the row lock, a key already
    /// used for this restock adds nothing (`replayed`), one used for another request is a
    /// conflict, and a new key is remembered in the restock's transaction.
    pub async fn restock_keyed(
        &self,
        id: &str,
        restock: &Restock,
        at: DateTime<Utc>,
        key: Option<&AdminKey>,
    ) -> Result<Restocked, Error> {
        let failed = "restocking the campaign failed";
        let mut tx = self.pool.begin().await.map_err(unavailable(failed))?;
        let row = sqlx::query("SELECT kind, total FROM campaigns WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(unavailable(failed))?
            .ok_or_else(|| Error::campaign_not_found(id))?;
        let kind: String = row.get(0);
        let before = row.get::<i64, _>(1) as u64;
        let kind = crate::domain::Kind::parse(&kind)
            .ok_or_else(|| Error::unavailable(failed, format!("bad kind {kind:?}")))?;
        if let Some(k) = key {
            let remembered = lookup_pg(&mut tx, k).await.map_err(unavailable(failed))?;
            if let Some((op, fingerprint)) = remembered {
                k.check_replay(&op, &fingerprint)?;
                return Ok(Restocked {
                    before,
                    after: before,
                    replayed: true,
                });
            }
            insert_pg(&mut tx, k, at)
                .await
                .map_err(unavailable(failed))?;
        }
        restock.check_against(kind, before)?;
        if let Restock::Codes(codes) = restock {
            if let Err(e) = insert_codes(&mut tx, id, before as i64, codes).await {
                return Err(if is_unique_violation(&e) {
                    Error::Conflict(format!(
                        "campaign '{id}' already has one of the codes given"
                    ))
                } else {
                    Error::unavailable(failed, e)
                });
            }
        }
        let units = restock.amount();
        sqlx::query("UPDATE campaigns SET total = total + $1 WHERE id = $2")
            .bind(units as i64)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(unavailable(failed))?;
        event(&mut tx, id, "restock", format!("units={units}"), at)
            .await
            .map_err(unavailable(failed))?;
        tx.commit().await.map_err(unavailable(failed))?;
        Ok(Restocked {
            before,
            after: before + units,
            replayed: false,
        })
    }

    /// The ledger's total of a campaign and its codes from position `from` on (hand-out order).
    pub async fn total_and_codes_from(
        &self,
        id: &str,
        from: u64,
    ) -> anyhow::Result<(u64, Vec<String>)> {
        let total: i64 = sqlx::query_scalar("SELECT total FROM campaigns WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .context("reading the campaign total")?;
        let codes = sqlx::query_scalar(
            "SELECT code FROM campaign_codes WHERE campaign_id = $1 AND pos >= $2 ORDER BY pos",
        )
        .bind(id)
        .bind(from as i64)
        .fetch_all(&self.pool)
        .await?;
        Ok((total as u64, codes))
    }

    /// Starts an admin transaction holding the campaign's row lock; returns it with the status
    /// the ledger records. Unknown campaign → [`Error::NotFound`].
    pub async fn lock_campaign(
        &self,
        id: &str,
    ) -> Result<(Transaction<'static, Postgres>, Status), Error> {
        let failed = "locking the campaign failed";
        let mut tx = self.pool.begin().await.map_err(unavailable(failed))?;
        let status: String =
            sqlx::query_scalar("SELECT status FROM campaigns WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(unavailable(failed))?
                .ok_or_else(|| Error::campaign_not_found(id))?;
        let status = Status::parse(&status)
            .ok_or_else(|| Error::unavailable(failed, format!("bad status {status:?}")))?;
        Ok((tx, status))
    }

    /// Remembers an admin Idempotency-Key inside a transaction from
    /// [`PgLedger::lock_campaign`].
    pub async fn write_admin_key(
        tx: &mut Transaction<'static, Postgres>,
        key: &AdminKey,
        at: DateTime<Utc>,
    ) -> Result<(), sqlx::Error> {
        insert_pg(tx, key, at).await
    }

    /// The status the ledger records for a campaign; `None` if it has no such campaign.
    pub async fn status(&self, id: &str) -> anyhow::Result<Option<Status>> {
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM campaigns WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        status
            .map(|s| Status::parse(&s).with_context(|| format!("bad status {s:?}")))
            .transpose()
    }

    /// Records a status change inside a transaction from [`PgLedger::lock_campaign`].
    pub async fn write_status(
        tx: &mut Transaction<'static, Postgres>,
        id: &str,
        status: Status,
        at: DateTime<Utc>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE campaigns SET status = $1 WHERE id = $2")
            .bind(status.as_str())
            .bind(id)
            .execute(&mut **tx)
            .await?;
        event(tx, id, "status", status.as_str().to_owned(), at).await
    }

    /// Marks an active or confirmed order cancelled; returns it if this call cancelled it
    /// (exactly once). A pending order's cancel is decided in Redis and reaches the ledger
    /// through the order stream instead (`postgres/holds`).
    pub async fn cancel_order(
        &self,
        order_id: &str,
        at: DateTime<Utc>,
    ) -> anyhow::Result<Option<Order>> {
        let mut tx = self.pool.begin().await?;
        // The campaign's row before the order's, as the pipeline takes them: the ledger's
        // rules (migration 0007) update the campaign's live units after the order, and the
        // other order deadlocked with a pipeline batch replaying this order.
        sqlx::query(
            "SELECT 1 FROM campaigns WHERE id = (SELECT campaign_id FROM orders WHERE order_id = $1) \
             FOR NO KEY UPDATE",
        )
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
        let row: Option<OrderRow> = sqlx::query_as(concat!(
            "UPDATE orders SET state = 'cancelled', cancelled_at = $1 \
             WHERE order_id = $2 AND state IN ('active', 'confirmed') RETURNING ",
            order_columns!()
        ))
        .bind(micros(at))
        .bind(order_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let order = Order::try_from(row)?;
        event(
            &mut tx,
            &order.campaign_id,
            "cancel",
            order_id.to_owned(),
            at,
        )
        .await?;
        tx.commit().await?;
        Ok(Some(order))
    }

    /// Every cancelled order of a campaign (their release in Redis is idempotent, so the gate
    /// can be made to agree with them at any time).
    pub async fn cancelled_orders(&self, id: &str) -> anyhow::Result<Vec<Order>> {
        let rows: Vec<OrderRow> = sqlx::query_as(select_order!(
            " WHERE campaign_id = $1 AND state = 'cancelled' ORDER BY seq"
        ))
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Order::try_from).collect()
    }

    /// Ids of every campaign, oldest first.
    pub async fn campaign_ids(&self) -> anyhow::Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT id FROM campaigns ORDER BY created_at")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Records a refused order, or an entry refused as a whole (idempotent on the stream id
    /// and the order id: the orders of one batch entry share its stream id).
    pub async fn record_failed(&self, f: &FailedOrder) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO failed_orders (stream_id, campaign_id, order_id, payload, reason, at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(&f.stream_id)
        .bind(&f.campaign_id)
        .bind(&f.order_id)
        .bind(&f.payload)
        .bind(&f.reason)
        .bind(micros(f.at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The wins of a campaign the ledger did not take, oldest first (at most
    /// [`RefusedOrders::MAX`](crate::domain::RefusedOrders::MAX)).
    pub async fn refused_orders(
        &self,
        id: &str,
    ) -> anyhow::Result<Vec<crate::domain::RefusedOrder>> {
        let rows = sqlx::query(
            "SELECT order_id, reason, at, payload FROM failed_orders WHERE campaign_id = $1 \
             ORDER BY at, stream_id LIMIT $2",
        )
        .bind(id)
        .bind(crate::domain::RefusedOrders::MAX)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(crate::domain::RefusedOrder {
                    order_id: r.get(0),
                    reason: r.get(1),
                    at: crate::ledger::rows::time(r.get(2))?,
                    entry: r.get(3),
                })
            })
            .collect()
    }

    /// The poison entries recorded for a campaign, as (order id, reason).
    pub async fn failed_orders(&self, id: &str) -> anyhow::Result<Vec<(Option<String>, String)>> {
        let rows = sqlx::query(
            "SELECT order_id, reason FROM failed_orders WHERE campaign_id = $1 ORDER BY at",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}
