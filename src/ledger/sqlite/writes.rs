//! The SQL of the SQLite ledger's writes: multi-row inserts of orders, idempotency answers and
//! codes, and one statement group per admin change. Run inside the writer's open transaction
//! (see `sqlite/writer`); any error here rolls the whole batch back.

use chrono::{DateTime, Utc};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use super::shaped::{shaped, ShapedSql};
use crate::domain::Order;
use crate::ledger::rows::{self, micros};
use crate::ledger::{IdemRecord, LedgerWrite, WriteFault};

/// Rows per multi-row INSERT of codes: 3 columns × 2000 stays below SQLite's 32,766 bound
/// parameters.
const ROWS_PER_INSERT: usize = 1000;

static INSERT_ORDERS: ShapedSql = ShapedSql::new(
    "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, codes, state, created_at, pay_by)",
    9,
    "",
);

/// A key's answer replaces a kept rejection (the engine writes an answer only for a key it does
/// not remember, and it forgets a rejection after its short retention while the row may wait
/// for the next prune), never a `won`: a `won` row the engine did not know is a contradiction
/// (see [`insert_idem`]). A `won` written against the aged rejection with `DO NOTHING` was
/// lost at the next prune, and after a restart the same key claimed again.
static INSERT_IDEM: ShapedSql = ShapedSql::new(
    "INSERT INTO idempotency (campaign_id, user_id, key, answer, created_at)",
    5,
    IDEM_UPSERT,
);

const IDEM_UPSERT: &str = " ON CONFLICT (campaign_id, user_id, key) DO UPDATE \
     SET answer = excluded.answer, created_at = excluded.created_at \
     WHERE json_extract(idempotency.answer, '$.outcome') <> 'won'";

async fn insert_orders(conn: &mut SqliteConnection, orders: &[&Order]) -> anyhow::Result<()> {
    for chunk in shaped(orders) {
        let mut q = sqlx::query(INSERT_ORDERS.get(chunk.len()));
        for o in chunk {
            q = q
                .bind(&o.order_id)
                .bind(&o.campaign_id)
                .bind(o.seq() as i64)
                .bind(&o.user_id)
                .bind(o.qty as i64)
                .bind(rows::codes_json(&o.codes))
                .bind(o.state.as_str())
                .bind(micros(o.created_at))
                .bind(o.pay_by.map(micros));
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

/// The `order.won` events of the orders just inserted (migration 0009): written by the one
/// inserter of orders, one multi-row INSERT per chunk, rather than by a trigger program per
/// order on the storm's hottest statement.
static INSERT_WON: ShapedSql =
    ShapedSql::new("INSERT INTO feed (type, at, campaign_id, seq)", 4, "");

async fn insert_won_events(conn: &mut SqliteConnection, orders: &[&Order]) -> anyhow::Result<()> {
    for chunk in shaped(orders) {
        let mut q = sqlx::query(INSERT_WON.get(chunk.len()));
        for o in chunk {
            q = q
                .bind("order.won")
                .bind(micros(o.created_at))
                .bind(&o.campaign_id)
                .bind(o.seq() as i64);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

async fn insert_idem(conn: &mut SqliteConnection, recs: &[&IdemRecord]) -> anyhow::Result<()> {
    for chunk in shaped(recs) {
        let mut q = sqlx::query(INSERT_IDEM.get(chunk.len()));
        for r in chunk {
            q = q
                .bind(&r.campaign_id)
                .bind(&r.user_id)
                .bind(&r.key)
                .bind(rows::answer_json(&r.answer))
                .bind(micros(r.created_at));
        }
        let written = q.execute(&mut *conn).await?.rows_affected();
        if written != chunk.len() as u64 {
            // Some key already has a `won` answer the engine did not remember: its memory
            // contradicts the ledger, so nothing of the batch is written and it is re-read.
            return Err(WriteFault::Diverged(format!(
                "{} of {} idempotency answers would shadow a won answer the ledger keeps",
                chunk.len() as u64 - written,
                chunk.len()
            ))
            .into());
        }
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
        LedgerWrite::Order(_)
        | LedgerWrite::Idem(_)
        | LedgerWrite::Confirm { .. }
        | LedgerWrite::Expire { .. } => unreachable!("batched by the caller"),
        LedgerWrite::CreateCampaign {
            def,
            total,
            codes,
            status,
            at,
        } => {
            sqlx::query(
                "INSERT INTO campaigns (id, kind, total, per_user_limit, status, starts_at, ends_at, created_at, hold_seconds, \
                 waiting_room) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&def.id)
            .bind(def.kind.as_str())
            .bind(*total as i64)
            .bind(def.per_user_limit as i64)
            .bind(status.as_str())
            .bind(def.starts_at.map(micros))
            .bind(def.ends_at.map(micros))
            .bind(micros(*at))
            .bind(def.hold_seconds.map(i64::from))
            .bind(def.waiting_room.map(|w| w.to_ledger()))
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
            // No RETURNING (a temporary b-tree per statement): the key names the campaign.
            let (campaign_id, seq) = super::order_key(order_id);
            let done = sqlx::query(
                "UPDATE orders SET state = 'cancelled', cancelled_at = ? \
                 WHERE campaign_id = ? AND seq = ? AND state IN ('active', 'pending', 'confirmed')",
            )
            .bind(micros(*at))
            .bind(campaign_id)
            .bind(seq)
            .execute(&mut *conn)
            .await?;
            if done.rows_affected() == 1 {
                event(conn, campaign_id, "cancel", order_id.clone(), *at).await?;
            }
            Ok(())
        }
        LedgerWrite::AdminKey { key, at } => {
            crate::ledger::admin_keys::insert_sqlite(conn, key, *at).await
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

/// Every write of one batch, inside the writer's open transaction, in the order the engine
/// decided them: the orders, answers and resolutions before an admin change are written before
/// it, so the change (and its event in the feed) comes after the wins decided before it.
pub(super) async fn write_batch(
    conn: &mut SqliteConnection,
    writes: &[&LedgerWrite],
) -> anyhow::Result<()> {
    let mut run = Run::default();
    for w in writes {
        match w {
            LedgerWrite::Order(o) => run.orders.push(o),
            LedgerWrite::Idem(r) => run.idem.push(r),
            LedgerWrite::Confirm { .. } | LedgerWrite::Expire { .. } => run.resolutions.push(*w),
            other => {
                run.flush(conn).await?;
                apply_one(conn, other).await?;
            }
        }
    }
    run.flush(conn).await
}

/// The orders, answers and resolutions between two admin changes of a batch.
#[derive(Default)]
struct Run<'a> {
    orders: Vec<&'a Order>,
    idem: Vec<&'a IdemRecord>,
    resolutions: Vec<&'a LedgerWrite>,
}

impl Run<'_> {
    async fn flush(&mut self, conn: &mut SqliteConnection) -> anyhow::Result<()> {
        // Resolutions of orders written before this run go first: an expiry frees the unit
        // (and the code) a later claim of the run may have taken, and the ledger's rules
        // (`ledger::invariants`) count live units statement by statement. A resolution of an
        // order of this very run follows the inserts.
        let in_run: std::collections::HashSet<&str> = if self.resolutions.is_empty() {
            Default::default()
        } else {
            self.orders.iter().map(|o| o.order_id.as_str()).collect()
        };
        let (later, earlier): (Vec<&LedgerWrite>, Vec<&LedgerWrite>) =
            std::mem::take(&mut self.resolutions)
                .into_iter()
                .partition(|w| {
                    let id = match w {
                        LedgerWrite::Confirm { order_id, .. }
                        | LedgerWrite::Expire { order_id, .. } => order_id,
                        _ => unreachable!("only resolutions"),
                    };
                    in_run.contains(id.as_str())
                });
        for w in earlier {
            super::holds::resolve(conn, w).await?;
        }
        let orders = std::mem::take(&mut self.orders);
        insert_orders(conn, &orders).await?;
        insert_won_events(conn, &orders).await?;
        super::live::count_inserted(conn, &orders).await?;
        insert_idem(conn, &std::mem::take(&mut self.idem)).await?;
        for w in later {
            super::holds::resolve(conn, w).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::sqlite::shaped::SHAPES;

    #[test]
    fn batches_are_cut_into_fixed_shapes_in_order() {
        for n in [0usize, 1, 3, 4, 5, 63, 64, 255, 256, 257, 300, 1000, 4096] {
            let rows: Vec<usize> = (0..n).collect();
            let chunks: Vec<&[usize]> = shaped(&rows).collect();
            assert!(chunks.iter().all(|c| SHAPES.contains(&c.len())), "{n}");
            assert_eq!(chunks.concat(), rows, "{n}: every row once, in order");
            assert!(chunks.len() <= n / 256 + 3 * 4, "{n}: few statements");
        }
    }

    #[test]
    fn each_shape_has_one_placeholder_per_value() {
        for n in SHAPES {
            let sql = INSERT_IDEM.get(n);
            assert_eq!(sql.matches('?').count(), 5 * n, "{sql}");
            assert_eq!(sql.matches("), (").count(), n - 1, "{sql}");
            assert!(sql.ends_with(IDEM_UPSERT), "{sql}");
            assert_eq!(INSERT_ORDERS.get(n).matches('?').count(), 9 * n);
        }
        assert_eq!(
            INSERT_ORDERS.get(1),
            "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, codes, state, created_at, pay_by) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        );
    }
}
