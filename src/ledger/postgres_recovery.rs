//! Reading a campaign back from PostgreSQL in the shape the gate is rebuilt from: the
//! definition, every code, the active orders, the highest order number ever used.
//!
//! The scale-out gate is rebuilt from this when Redis does not have a campaign (a process
//! died between the ledger commit and the Redis script, or Redis lost its data); it is the
//! same recovery the embedded deployment runs at start from SQLite.
//!
//! Every read of one rebuild runs in one REPEATABLE READ, READ ONLY transaction: a restock or a
//! cancel committing meanwhile is either wholly in the snapshot or wholly outside it, so a
//! code can never be both in the pool and in an active order, nor a cancelled order's units
//! both held and released.

use std::collections::HashMap;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::postgres::PgLedger;
use super::rows::{self, micros};
use super::IdemRecord;
use crate::domain::{Kind, Status};
use crate::engine::state::CampaignDef;

/// One campaign as the gate is rebuilt from it, read from one snapshot.
#[derive(Debug, Clone)]
pub struct GateSnapshot {
    pub def: CampaignDef,
    pub total: u64,
    pub status: Status,
    /// Every code of the campaign, in hand-out order.
    pub codes: Vec<String>,
    /// (user, qty, codes) of every active order.
    pub active: Vec<(String, u64, Vec<String>)>,
    /// Highest order seq ever used.
    pub max_seq: u64,
}

impl PgLedger {
    /// One campaign with everything needed to rebuild its gate state; `None` if unknown.
    /// The highest order number the ledger holds, per campaign that has orders: what a gate
    /// must never be behind (`engine::redis` checks it after every reconnect). One index probe
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

    pub async fn stored(&self, id: &str) -> anyhow::Result<Option<GateSnapshot>> {
        Ok(self.stored_snapshot(id).await?.map(|(c, _)| c))
    }

    /// [`PgLedger::stored`] and the ids of the campaign's cancelled orders, from one snapshot.
    pub async fn stored_snapshot(
        &self,
        id: &str,
    ) -> anyhow::Result<Option<(GateSnapshot, Vec<String>)>> {
        let mut conn = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *conn)
            .await?;
        let Some(r) = sqlx::query(
            "SELECT id, kind, total, per_user_limit, status, starts_at, ends_at FROM campaigns WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        else {
            return Ok(None);
        };
        let kind: String = r.get(1);
        let status: String = r.get(4);
        let mut c = GateSnapshot {
            def: CampaignDef {
                id: r.get(0),
                kind: Kind::parse(&kind).ok_or_else(|| anyhow!("bad kind {kind:?}"))?,
                per_user_limit: r.get::<i64, _>(3) as u64,
                starts_at: rows::opt_time(r.get(5))?,
                ends_at: rows::opt_time(r.get(6))?,
                hold_seconds: None,
            },
            total: r.get::<i64, _>(2) as u64,
            status: Status::parse(&status).ok_or_else(|| anyhow!("bad status {status:?}"))?,
            codes: Vec::new(),
            active: Vec::new(),
            max_seq: 0,
        };
        c.codes = sqlx::query_scalar(
            "SELECT code FROM campaign_codes WHERE campaign_id = $1 ORDER BY pos",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        let max: Option<i64> =
            sqlx::query_scalar("SELECT MAX(seq) FROM orders WHERE campaign_id = $1")
                .bind(id)
                .fetch_one(&mut *conn)
                .await?;
        c.max_seq = max.unwrap_or(0) as u64;
        let active = sqlx::query(
            "SELECT user_id, qty, codes FROM orders WHERE campaign_id = $1 AND state = 'active'",
        )
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        for r in active {
            let codes = rows::parse_codes(r.get(2))?.unwrap_or_default();
            c.active.push((r.get(0), r.get::<i64, _>(1) as u64, codes));
        }
        let released: Vec<String> = sqlx::query_scalar(
            "SELECT order_id FROM orders WHERE campaign_id = $1 AND state = 'cancelled'",
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
