//! The `events` table: one row per admin change of a campaign, written in the transaction of
//! the change.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::ledger::rows::micros;

pub(super) async fn event(
    conn: &mut PgConnection,
    campaign_id: &str,
    kind: &str,
    detail: String,
    at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO events (campaign_id, kind, detail, at) VALUES ($1, $2, $3, $4)")
        .bind(campaign_id)
        .bind(kind)
        .bind(detail)
        .bind(micros(at))
        .execute(conn)
        .await?;
    Ok(())
}
