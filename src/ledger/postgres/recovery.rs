//! Reading a campaign back from PostgreSQL in the shape the gate is rebuilt from: the
//! definition, every code, the live orders, the pending orders with their deadlines (campaigns
//! with holds), the highest order number ever used.
//!
//! The scale-out gate is rebuilt from this when Redis does not have a campaign (a process
//! died between the ledger commit and the Redis script, or Redis lost its data); it is the
//! same recovery the embedded deployment runs at start from SQLite.
//!
//! Every read of one rebuild runs in one REPEATABLE READ, READ ONLY transaction: a restock or a
//! cancel committing meanwhile is either wholly in the snapshot or wholly outside it, so a
//! code can never be both in the pool and in an active order, nor a cancelled order's units
//! both held and released. The same holds for the transitions of pending orders the pipeline
//! applies: an order is pending, confirmed or expired in the snapshot, never two of them.

use std::collections::HashMap;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::PgLedger;
use crate::domain::{CampaignDef, WaitingRoom};
use crate::domain::{Kind, Status};
use crate::ledger::rows::{self, micros};
use crate::ledger::{IdemRecord, PendingRow};

/// One campaign as the gate is rebuilt from it, read from one snapshot.
#[derive(Debug, Clone)]
pub struct GateSnapshot {
    pub def: CampaignDef,
    pub total: u64,
    pub status: Status,
    /// Every code of the campaign, in hand-out order.
    pub codes: Vec<String>,
    /// (user, qty, codes) of every live order that is not pending: active or confirmed.
    pub active: Vec<(String, u64, Vec<String>)>,
    /// Every pending order (campaigns with holds), by seq, with its deadline.
    pub pending: Vec<PendingOrder>,
    /// Highest order seq ever used.
    pub max_seq: u64,
}

/// A pending order as a rebuild needs it: it holds its units until it is resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingOrder {
    pub seq: u64,
    pub user_id: String,
    pub qty: u64,
    pub codes: Vec<String>,
    pub pay_by: DateTime<Utc>,
}

impl PendingOrder {
    pub fn row(&self) -> PendingRow<'_> {
        PendingRow {
            seq: self.seq,
            user_id: &self.user_id,
            qty: self.qty,
            codes: &self.codes,
            pay_by: self.pay_by,
        }
    }
}

impl PgLedger {
    /// One campaign with everything needed to rebuild its gate state; `None` if unknown.
    /// The highest order number the ledger holds, per campaign that has orders: what a gate
    /// must never be behind (`engine::scale_out` checks it after every reconnect). One index probe
    /// per campaign (`orders_by_campaign`), not a scan of every order.
    pub async fn high_water(&self) -> anyhow::Result<Vec<(String, u64)>> {
        let rows: Vec<(String, Option<i64>)> = sqlx::query_as(
            "SELECT c.id, (SELECT MAX(o.seq) FROM orders o WHERE o.campaign_id = c.id) \
             FROM campaigns c",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(c, s)| Some((c, s? as u64)))
            .collect())
    }

    /// Those of `order_ids` the ledger holds in a state other than pending.
    pub async fn resolved_among(&self, order_ids: &[String]) -> anyhow::Result<Vec<String>> {
        resolved_among(&mut *self.pool.acquire().await?, order_ids).await
    }

    pub async fn stored(&self, id: &str) -> anyhow::Result<Option<GateSnapshot>> {
        Ok(self.stored_snapshot(id).await?.map(|(c, _)| c))
    }

    /// [`PgLedger::stored`] and the ids of the campaign's orders whose units went back
    /// (cancelled or expired), from one snapshot.
    pub async fn stored_snapshot(
        &self,
        id: &str,
    ) -> anyhow::Result<Option<(GateSnapshot, Vec<String>)>> {
        let mut conn = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *conn)
            .await?;
        let Some(r) = sqlx::query(
            "SELECT id, kind, total, per_user_limit, status, starts_at, ends_at, hold_seconds, \
             waiting_room FROM campaigns WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        else {
            return Ok(None);
        };
        let (def, total, status) = campaign_row(&r)?;
        let mut c = GateSnapshot {
            def,
            total,
            status,
            codes: Vec::new(),
            active: Vec::new(),
            pending: Vec::new(),
            max_seq: 0,
        };
        c.codes = sqlx::query_scalar(
            "SELECT code FROM campaign_codes WHERE campaign_id = $1 ORDER BY pos",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        c.max_seq = max_seq(&mut conn, id).await?;
        let active = sqlx::query(
            "SELECT user_id, qty, codes FROM orders \
             WHERE campaign_id = $1 AND state IN ('active', 'confirmed')",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        for r in active {
            let codes = rows::parse_codes(r.get(2))?.unwrap_or_default();
            c.active.push((r.get(0), r.get::<i64, _>(1) as u64, codes));
        }
        // Through the partial index `orders_pending`.
        let pending = sqlx::query(
            "SELECT seq, user_id, qty, codes, pay_by FROM orders \
             WHERE campaign_id = $1 AND state = 'pending' ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        for r in pending {
            let pay_by: Option<i64> = r.get(4);
            let seq = r.get::<i64, _>(0) as u64;
            let pay_by = pay_by.ok_or_else(|| anyhow!("pending order {id}-{seq} has no pay_by"))?;
            c.pending.push(PendingOrder {
                seq,
                user_id: r.get(1),
                qty: r.get::<i64, _>(2) as u64,
                codes: rows::parse_codes(r.get(3))?.unwrap_or_default(),
                pay_by: rows::time(pay_by)?,
            });
        }
        let released: Vec<String> = sqlx::query_scalar(
            "SELECT order_id FROM orders WHERE campaign_id = $1 AND state IN ('cancelled', 'expired')",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        conn.commit().await?;
        Ok(Some((c, released)))
    }

    pub(super) async fn idem_since(
        &self,
        id: &str,
        since: DateTime<Utc>,
    ) -> anyhow::Result<Vec<IdemRecord>> {
        let rows = sqlx::query(
            "SELECT user_id, key, answer, created_at FROM idempotency \
             WHERE campaign_id = $1 AND created_at >= $2",
        )
        .bind(id)
        .bind(micros(since))
        .fetch_all(&self.pool)
        .await?;
        let mut out = HashMap::new();
        for r in rows {
            let rec = IdemRecord {
                campaign_id: id.to_owned(),
                user_id: r.get(0),
                key: r.get(1),
                answer: rows::parse_answer(r.get(2))?,
                created_at: rows::time(r.get(3))?,
            };
            out.insert((rec.user_id.clone(), rec.key.clone()), rec);
        }
        Ok(out.into_values().collect())
    }
}

/// The highest order number the ledger holds for campaign `id` (0: none).
pub(super) async fn max_seq(conn: &mut sqlx::PgConnection, id: &str) -> anyhow::Result<u64> {
    let max: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM orders WHERE campaign_id = $1")
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    Ok(max.unwrap_or(0) as u64)
}

/// Those of `order_ids` the ledger holds in a state other than pending.
pub(super) async fn resolved_among(
    conn: &mut sqlx::PgConnection,
    order_ids: &[String],
) -> anyhow::Result<Vec<String>> {
    if order_ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_scalar(
        "SELECT order_id FROM orders WHERE order_id = ANY($1) AND state <> 'pending'",
    )
    .bind(order_ids)
    .fetch_all(&mut *conn)
    .await?)
}

/// The columns `id, kind, total, per_user_limit, status, starts_at, ends_at, hold_seconds` of
/// a `campaigns` row, first in that order, and `waiting_room` by name: its definition, total
/// and status.
pub(super) fn campaign_row(
    r: &sqlx::postgres::PgRow,
) -> anyhow::Result<(CampaignDef, u64, Status)> {
    let kind: String = r.get(1);
    let status: String = r.get(4);
    let def = CampaignDef {
        id: r.get(0),
        kind: Kind::parse(&kind).ok_or_else(|| anyhow!("bad kind {kind:?}"))?,
        per_user_limit: r.get::<i64, _>(3) as u64,
        starts_at: rows::opt_time(r.get(5))?,
        ends_at: rows::opt_time(r.get(6))?,
        hold_seconds: r.get::<Option<i32>, _>(7).map(|h| h as u32),
        waiting_room: r
            .try_get::<Option<String>, _>("waiting_room")?
            .as_deref()
            .map(WaitingRoom::from_ledger)
            .transpose()?,
    };
    let total = r.get::<i64, _>(2) as u64;
    let status = Status::parse(&status).ok_or_else(|| anyhow!("bad status {status:?}"))?;
    Ok((def, total, status))
}
