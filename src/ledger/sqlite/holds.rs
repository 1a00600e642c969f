//! The SQL of order holds in the SQLite ledger: a pending order's one resolution.
//!
//! The engine decides every resolution under its campaign lock and writes it once, so the
//! UPDATE must find the order still `pending`; finding it otherwise means the ledger and the
//! engine disagree, which is a [`WriteFault::Diverged`]: the batch rolls back and the engine
//! re-reads its state before acknowledging anything (see `group_commit`).

use sqlx::SqliteConnection;

use crate::ledger::rows::micros;
use crate::ledger::LedgerWrite;
use crate::ledger::WriteFault;

pub(super) async fn resolve(conn: &mut SqliteConnection, w: &LedgerWrite) -> anyhow::Result<()> {
    let (order_id, at, state) = match w {
        LedgerWrite::Confirm { order_id, at } => (order_id, at, "confirmed"),
        LedgerWrite::Expire { order_id, at } => (order_id, at, "expired"),
        other => anyhow::bail!("not a resolution: {other:?}"),
    };
    // No RETURNING: SQLite collects RETURNING rows in a temporary b-tree per statement, and
    // the key already names the campaign.
    let (campaign_id, seq) = super::order_key(order_id);
    let done = sqlx::query(
        "UPDATE orders SET state = ?, resolved_at = ? \
         WHERE campaign_id = ? AND seq = ? AND state = 'pending'",
    )
    .bind(state)
    .bind(micros(*at))
    .bind(campaign_id)
    .bind(seq)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() != 1 {
        return Err(WriteFault::Diverged(format!(
            "order {order_id} is not pending in the ledger; it cannot become {state}"
        ))
        .into());
    }
    sqlx::query("INSERT INTO events (campaign_id, kind, detail, at) VALUES (?, ?, ?, ?)")
        .bind(campaign_id)
        .bind(state)
        .bind(order_id)
        .bind(micros(*at))
        .execute(conn)
        .await?;
    Ok(())
}
