//! Which campaigns can still sell or resolve anything, as the PostgreSQL ledger says: the
//! scale-out start-up rebuilds only those before serving, and a dormant campaign Redis lacks
//! is answered from its definition and counts here, never rebuilt for a read or a claim (a
//! rebuild writes every buyer it ever had in one script call that blocks Redis).
//!
//! Dormant: `closed`, or past its `ends_at`, and no `pending` order. It is final: a closed
//! campaign stays closed, `ends_at` never changes, and only a sale makes an order pending.
//! The rule is [`CampaignDef::stopped_for_good`](crate::domain::CampaignDef::stopped_for_good) plus the pending check; the list query
//! states it in SQL. `now` is the caller's: the scale-out engine passes Redis's clock (which
//! its scripts judge sale windows by) less a margin, never the instance's own.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::recovery::campaign_row;
use super::PgLedger;
use crate::ledger::rows::micros;

/// The campaigns of the ledger by whether they can still sell or resolve anything
/// ([`PgLedger::campaign_liveness`]), each oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Liveness {
    pub live: Vec<String>,
    pub dormant: Vec<String>,
    /// Those (live or dormant) whose status is `paused` or `closed`: a gate from an older
    /// snapshot that still says `active` would sell from them.
    pub stopped: Vec<String>,
}

/// A dormant campaign as the ledger holds it: all a view or a claim needs of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dormant {
    pub def: crate::domain::CampaignDef,
    pub total: u64,
    pub status: crate::domain::Status,
    /// Units sold and not given back (`campaigns.live_units`).
    pub live_units: u64,
}

impl PgLedger {
    /// Every campaign, oldest first, split into live and dormant as of `now` (module docs).
    /// One query; the pending probe uses the partial index `orders_pending`, so the cost grows
    /// with campaigns, not orders.
    pub async fn campaign_liveness(&self, now: DateTime<Utc>) -> anyhow::Result<Liveness> {
        let rows: Vec<(String, bool, bool)> = sqlx::query_as(
            "SELECT c.id, (c.status = 'closed' OR (c.ends_at IS NOT NULL AND c.ends_at <= $1)) \
               AND NOT EXISTS (SELECT 1 FROM orders o \
                               WHERE o.campaign_id = c.id AND o.state = 'pending'), \
                    c.status <> 'active' \
             FROM campaigns c ORDER BY c.created_at",
        )
        .bind(micros(now))
        .fetch_all(&self.pool)
        .await?;
        let mut out = Liveness::default();
        for (id, dormant, stopped) in rows {
            if stopped {
                out.stopped.push(id.clone());
            }
            if dormant {
                out.dormant.push(id);
            } else {
                out.live.push(id);
            }
        }
        Ok(out)
    }

    /// Campaign `id` as the ledger holds it (definition, total, status, live units) if it is
    /// dormant at `now`; `None` if it is live or not in the ledger. One row.
    pub async fn dormant_state(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> anyhow::Result<Option<Dormant>> {
        let Some(r) = sqlx::query(
            "SELECT c.id, c.kind, c.total, c.per_user_limit, c.status, c.starts_at, c.ends_at, \
                    c.hold_seconds, c.live_units, \
                    EXISTS (SELECT 1 FROM orders o WHERE o.campaign_id = c.id AND o.state = 'pending'), \
                    c.waiting_room \
             FROM campaigns c WHERE c.id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let (def, total, status) = campaign_row(&r)?;
        let pending: bool = r.get(9);
        if pending || !def.stopped_for_good(status, now) {
            return Ok(None);
        }
        Ok(Some(Dormant {
            def,
            total,
            status,
            live_units: r.get::<i64, _>(8) as u64,
        }))
    }
}
