//! Reading a campaign back from PostgreSQL in the shape the gate is rebuilt from: the
//! definition and highest order number ([`StoredCampaign`]), then every code and active order
//! streamed row by row into a [`Recovery`].
//!
//! The scale-out gate is rebuilt from this when Redis does not have a campaign (a process
//! died between the ledger commit and the Redis script, or Redis lost its data); it is the
//! same recovery the embedded deployment runs at start from SQLite. Rows are streamed, never
//! collected, so rebuilding a campaign of a million buyers holds one row at a time here.

use std::collections::HashMap;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use sqlx::Row;

use super::postgres::PgLedger;
use super::rows::{self, micros};
use super::{IdemRecord, Recovery, StoredCampaign};
use crate::domain::{Kind, Status};
use crate::engine::state::CampaignDef;

/// An active order as recovery reads it: (user, qty, codes).
pub type ActiveOrder = (String, u64, Vec<String>);

impl PgLedger {
    /// One campaign's definition, total, status and highest order seq; `None` if unknown.
    pub async fn stored(&self, id: &str) -> anyhow::Result<Option<StoredCampaign>> {
        let Some(r) = sqlx::query(
            "SELECT id, kind, total, per_user_limit, status, starts_at, ends_at, \
             (SELECT MAX(seq) FROM orders WHERE campaign_id = $1) FROM campaigns WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let kind: String = r.get(1);
        let status: String = r.get(4);
        Ok(Some(StoredCampaign {
            def: CampaignDef {
                id: r.get(0),
                kind: Kind::parse(&kind).ok_or_else(|| anyhow!("bad kind {kind:?}"))?,
                per_user_limit: r.get::<i64, _>(3) as u64,
                starts_at: rows::opt_time(r.get(5))?,
                ends_at: rows::opt_time(r.get(6))?,
            },
            total: r.get::<i64, _>(2) as u64,
            status: Status::parse(&status).ok_or_else(|| anyhow!("bad status {status:?}"))?,
            max_seq: r.get::<Option<i64>, _>(7).unwrap_or(0) as u64,
        }))
    }

    /// A campaign's codes, in hand-out order.
    pub fn codes(&self, id: &str) -> BoxStream<'_, anyhow::Result<String>> {
        sqlx::query_scalar("SELECT code FROM campaign_codes WHERE campaign_id = $1 ORDER BY pos")
            .bind(id.to_owned())
            .fetch(&self.pool)
            .map_err(anyhow::Error::from)
            .boxed()
    }

    /// A campaign's active orders as (user, qty, codes).
    pub fn active_orders(&self, id: &str) -> BoxStream<'_, anyhow::Result<ActiveOrder>> {
        sqlx::query(
            "SELECT user_id, qty, codes FROM orders WHERE campaign_id = $1 AND state = 'active'",
        )
        .bind(id.to_owned())
        .fetch(&self.pool)
        .map_err(anyhow::Error::from)
        .and_then(|r| async move {
            let codes = rows::parse_codes(r.get(2))?.unwrap_or_default();
            Ok((r.get(0), r.get::<i64, _>(1) as u64, codes))
        })
        .boxed()
    }

    /// Every user holding units of a campaign, with how many (summed by PostgreSQL, so a user
    /// with several active orders comes once).
    pub fn holdings(&self, id: &str) -> BoxStream<'_, anyhow::Result<(String, u64)>> {
        sqlx::query(
            "SELECT user_id, SUM(qty)::BIGINT FROM orders \
             WHERE campaign_id = $1 AND state = 'active' GROUP BY user_id",
        )
        .bind(id.to_owned())
        .fetch(&self.pool)
        .map_ok(|r| (r.get(0), r.get::<i64, _>(1) as u64))
        .map_err(anyhow::Error::from)
        .boxed()
    }

    /// Every code held by an active order of a campaign.
    pub fn held_codes(&self, id: &str) -> BoxStream<'_, anyhow::Result<String>> {
        sqlx::query_scalar(
            "SELECT codes FROM orders \
             WHERE campaign_id = $1 AND state = 'active' AND codes IS NOT NULL",
        )
        .bind(id.to_owned())
        .fetch(&self.pool)
        .map_err(anyhow::Error::from)
        .and_then(|json: String| async move {
            let codes = rows::parse_codes(Some(json))?.unwrap_or_default();
            Ok(futures::stream::iter(codes.into_iter().map(anyhow::Ok)))
        })
        .try_flatten()
        .boxed()
    }

    /// Ids of a campaign's cancelled orders, oldest first.
    pub fn cancelled_ids(&self, id: &str) -> BoxStream<'_, anyhow::Result<String>> {
        sqlx::query_scalar(
            "SELECT order_id FROM orders WHERE campaign_id = $1 AND state = 'cancelled' ORDER BY seq",
        )
        .bind(id.to_owned())
        .fetch(&self.pool)
        .map_err(anyhow::Error::from)
        .boxed()
    }

    /// Streams a campaign's codes, then its active orders, into `into`.
    pub(super) async fn stream_rows(
        &self,
        id: &str,
        into: &mut dyn Recovery,
    ) -> anyhow::Result<()> {
        let mut codes = self.codes(id);
        while let Some(code) = codes.try_next().await? {
            into.code(id, code)?;
        }
        let mut active = self.active_orders(id);
        while let Some((user, qty, codes)) = active.try_next().await? {
            into.order(id, &user, qty, &codes)?;
        }
        Ok(())
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
