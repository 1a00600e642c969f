//! Reading the whole SQLite ledger back in the shape the embedded engine is rebuilt from at
//! start: campaign definitions, every code, the active orders, the highest order number ever
//! used and the idempotency answers still within their retention. A handful of whole-table
//! scans, so recovery stays linear in the ledger's size.

use std::collections::HashMap;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use sqlx::{Row, SqliteConnection};

use super::rows::{self, micros};
use super::{IdemRecord, StoredCampaign};
use crate::domain::{Kind, Status};
use crate::engine::state::CampaignDef;

pub(super) async fn snapshot(
    conn: &mut SqliteConnection,
    idem_since: DateTime<Utc>,
) -> anyhow::Result<Vec<StoredCampaign>> {
    let mut campaigns = Vec::new();
    let mut index = HashMap::new();
    let rows = sqlx::query(
        "SELECT id, kind, total, per_user_limit, status, starts_at, ends_at FROM campaigns ORDER BY created_at",
    )
    .fetch_all(&mut *conn)
    .await?;
    for r in rows {
        let id: String = r.get(0);
        let kind: String = r.get(1);
        let status: String = r.get(4);
        index.insert(id.clone(), campaigns.len());
        campaigns.push(StoredCampaign {
            def: CampaignDef {
                kind: Kind::parse(&kind).ok_or_else(|| anyhow!("bad kind {kind:?}"))?,
                per_user_limit: r.get::<i64, _>(3) as u64,
                starts_at: rows::opt_time(r.get(5))?,
                ends_at: rows::opt_time(r.get(6))?,
                id,
            },
            total: r.get::<i64, _>(2) as u64,
            status: Status::parse(&status).ok_or_else(|| anyhow!("bad status {status:?}"))?,
            codes: Vec::new(),
            active: Vec::new(),
            max_seq: 0,
            idem: Vec::new(),
        });
    }
    let slot = |id: &str| {
        index
            .get(id)
            .copied()
            .ok_or_else(|| anyhow!("row refers to unknown campaign {id:?}"))
    };
    let codes =
        sqlx::query("SELECT campaign_id, code FROM campaign_codes ORDER BY campaign_id, pos")
            .fetch_all(&mut *conn)
            .await?;
    for r in codes {
        campaigns[slot(r.get(0))?].codes.push(r.get(1));
    }
    let seqs = sqlx::query("SELECT campaign_id, MAX(seq) FROM orders GROUP BY campaign_id")
        .fetch_all(&mut *conn)
        .await?;
    for r in seqs {
        campaigns[slot(r.get(0))?].max_seq = r.get::<i64, _>(1) as u64;
    }
    let active =
        sqlx::query("SELECT campaign_id, user_id, qty, codes FROM orders WHERE state = 'active'")
            .fetch_all(&mut *conn)
            .await?;
    for r in active {
        let codes = rows::parse_codes(r.get(3))?.unwrap_or_default();
        campaigns[slot(r.get(0))?]
            .active
            .push((r.get(1), r.get::<i64, _>(2) as u64, codes));
    }
    let idem = sqlx::query(
        "SELECT campaign_id, user_id, key, answer, created_at FROM idempotency WHERE created_at >= ?",
    )
    .bind(micros(idem_since))
    .fetch_all(&mut *conn)
    .await?;
    for r in idem {
        let campaign_id: String = r.get(0);
        let at = slot(&campaign_id)?;
        campaigns[at].idem.push(IdemRecord {
            campaign_id,
            user_id: r.get(1),
            key: r.get(2),
            answer: rows::parse_answer(r.get(3))?,
            created_at: rows::time(r.get(4))?,
        });
    }
    Ok(campaigns)
}
