//! The SQL of the PostgreSQL ledger's writes: one batch of [`LedgerWrite`]s in one
//! transaction ([`PgLedger::apply_batch`]), orders and idempotency answers many rows per
//! statement, one statement group per admin change; and what a failed batch left
//! ([`BatchFailure`]). `sqlite/writes.rs` is its SQLite twin.

use sqlx::{PgConnection, Postgres, QueryBuilder, Row};

use super::event::event;
use super::{holds, PgLedger};
use crate::domain::Order;
use crate::ledger::rows::{self, micros};
use crate::ledger::{IdemRecord, LedgerWrite, WriteFault};

/// Rows per multi-row INSERT: 9 columns × 1000 stays far below PostgreSQL's 65,535 parameters.
const ROWS_PER_INSERT: usize = 1000;

impl PgLedger {
    /// [`Ledger::apply`](crate::ledger::Ledger::apply), keeping the driver's error.
    pub(crate) async fn apply_batch(&self, writes: &[&LedgerWrite]) -> Result<(), BatchFailure> {
        let before = |e: anyhow::Error| BatchFailure {
            error: e,
            at_commit: false,
        };
        let mut tx = self.pool.begin().await.map_err(|e| before(e.into()))?;
        let mut orders = Vec::new();
        let mut idem = Vec::new();
        for w in writes {
            match w {
                LedgerWrite::Order(o) => orders.push(o),
                LedgerWrite::Idem(r) => idem.push(r),
                other => apply_one(&mut tx, other).await.map_err(before)?,
            }
        }
        insert_orders(&mut tx, &orders).await.map_err(before)?;
        insert_idem(&mut tx, &idem).await.map_err(before)?;
        tx.commit().await.map_err(|e| BatchFailure {
            error: e.into(),
            at_commit: true,
        })
    }
}

/// Inserts `orders` in one statement whatever their number: each column travels as one array
/// and `UNNEST` turns the arrays back into rows. One SQL text means one prepared statement per
/// connection; a `VALUES` list of the batch's size was a new statement (parsed and planned by
/// PostgreSQL, formatted and cached by sqlx) for almost every batch of a storm.
pub(super) async fn insert_orders(
    conn: &mut PgConnection,
    orders: &[&Order],
) -> anyhow::Result<u64> {
    if orders.is_empty() {
        return Ok(0);
    }
    let n = orders.len();
    let mut ids = Vec::with_capacity(n);
    let mut campaigns = Vec::with_capacity(n);
    let mut seqs = Vec::with_capacity(n);
    let mut users = Vec::with_capacity(n);
    let mut qtys = Vec::with_capacity(n);
    let mut codes = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(n);
    let mut created = Vec::with_capacity(n);
    let mut pay_by = Vec::with_capacity(n);
    for o in orders {
        ids.push(o.order_id.as_str());
        campaigns.push(o.campaign_id.as_str());
        seqs.push(o.seq() as i64);
        users.push(o.user_id.as_str());
        qtys.push(o.qty as i64);
        codes.push(rows::codes_json(&o.codes));
        states.push(o.state.as_str());
        created.push(micros(o.created_at));
        pay_by.push(o.pay_by.map(micros));
    }
    let done = sqlx::query(
        "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, codes, state, created_at, pay_by) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[], $5::int8[], \
                              $6::text[], $7::text[], $8::int8[], $9::int8[]) \
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(&ids)
    .bind(&campaigns)
    .bind(&seqs)
    .bind(&users)
    .bind(&qtys)
    .bind(&codes)
    .bind(&states)
    .bind(&created)
    .bind(&pay_by)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

async fn insert_idem(conn: &mut PgConnection, recs: &[&IdemRecord]) -> anyhow::Result<()> {
    for chunk in recs.chunks(ROWS_PER_INSERT) {
        let mut qb = QueryBuilder::<Postgres>::new(
            "INSERT INTO idempotency (campaign_id, user_id, key, answer, created_at) ",
        );
        qb.push_values(chunk, |mut b, r| {
            b.push_bind(&r.campaign_id)
                .push_bind(&r.user_id)
                .push_bind(&r.key)
                .push_bind(rows::answer_json(&r.answer))
                .push_bind(micros(r.created_at));
        });
        // As in the SQLite ledger: an answer replaces a kept rejection, never a `won`.
        qb.push(
            " ON CONFLICT (campaign_id, user_id, key) DO UPDATE \
             SET answer = EXCLUDED.answer, created_at = EXCLUDED.created_at \
             WHERE idempotency.answer::jsonb->>'outcome' <> 'won'",
        );
        let written = qb.build().execute(&mut *conn).await?.rows_affected();
        anyhow::ensure!(
            written == chunk.len() as u64,
            "{} of {} idempotency answers would shadow a won answer the ledger keeps",
            chunk.len() as u64 - written,
            chunk.len()
        );
    }
    Ok(())
}

pub(super) async fn insert_codes(
    conn: &mut PgConnection,
    campaign_id: &str,
    first_pos: i64,
    codes: &[String],
) -> Result<(), sqlx::Error> {
    for (n, chunk) in codes.chunks(ROWS_PER_INSERT * 2).enumerate() {
        let base = first_pos + (n * ROWS_PER_INSERT * 2) as i64;
        let mut qb =
            QueryBuilder::<Postgres>::new("INSERT INTO campaign_codes (campaign_id, code, pos) ");
        qb.push_values(chunk.iter().enumerate(), |mut b, (i, code)| {
            b.push_bind(campaign_id)
                .push_bind(code)
                .push_bind(base + i as i64);
        });
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// A failed batch: the driver's error (its SQLSTATE tells a duplicate campaign apart), and
/// whether it came from COMMIT.
pub(crate) struct BatchFailure {
    pub(crate) error: anyhow::Error,
    at_commit: bool,
}

impl BatchFailure {
    /// What the batch left: refused by one of the ledger's rules, the ledger contradicts the
    /// writer (`ledger::invariants`; a deferred rule refuses at COMMIT and rolls back); refused
    /// otherwise before COMMIT, nothing is written (the transaction rolls back when dropped); a
    /// failed COMMIT may have committed.
    pub(super) fn fault(&self) -> WriteFault {
        let text = format!("{:#}", self.error);
        match crate::ledger::invariants::refused_rule(&self.error) {
            Some(_) => WriteFault::Diverged(text),
            None if self.at_commit => WriteFault::Unknown(text),
            None => WriteFault::NotCommitted(text),
        }
    }
}

async fn apply_one(conn: &mut PgConnection, write: &LedgerWrite) -> anyhow::Result<()> {
    match write {
        LedgerWrite::Order(_) | LedgerWrite::Idem(_) => unreachable!("batched by the caller"),
        LedgerWrite::Confirm { .. } | LedgerWrite::Expire { .. } => {
            holds::resolve(conn, write).await
        }
        LedgerWrite::CreateCampaign {
            def,
            total,
            codes,
            status,
            at,
        } => {
            sqlx::query(
                "INSERT INTO campaigns (id, kind, total, per_user_limit, status, starts_at, ends_at, created_at, hold_seconds, \
                 waiting_room) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(&def.id)
            .bind(def.kind.as_str())
            .bind(*total as i64)
            .bind(def.per_user_limit as i64)
            .bind(status.as_str())
            .bind(def.starts_at.map(micros))
            .bind(def.ends_at.map(micros))
            .bind(micros(*at))
            .bind(def.hold_seconds.map(|h| h as i32))
            .bind(def.waiting_room.map(|w| w.to_ledger()))
            .execute(&mut *conn)
            .await?;
            insert_codes(conn, &def.id, 0, codes).await?;
            Ok(event(conn, &def.id, "create", format!("total={total}"), *at).await?)
        }
        LedgerWrite::Restock {
            campaign_id,
            units,
            codes,
            at,
        } => {
            let before: i64 =
                sqlx::query_scalar("SELECT total FROM campaigns WHERE id = $1 FOR UPDATE")
                    .bind(campaign_id)
                    .fetch_one(&mut *conn)
                    .await?;
            sqlx::query("UPDATE campaigns SET total = total + $1 WHERE id = $2")
                .bind(*units as i64)
                .bind(campaign_id)
                .execute(&mut *conn)
                .await?;
            insert_codes(conn, campaign_id, before, codes).await?;
            Ok(event(conn, campaign_id, "restock", format!("units={units}"), *at).await?)
        }
        LedgerWrite::Status {
            campaign_id,
            status,
            at,
        } => {
            sqlx::query("UPDATE campaigns SET status = $1 WHERE id = $2")
                .bind(status.as_str())
                .bind(campaign_id)
                .execute(&mut *conn)
                .await?;
            Ok(event(conn, campaign_id, "status", status.as_str().to_owned(), *at).await?)
        }
        // Non-pending orders only: a pending order's cancel is decided in Redis and arrives
        // through the order stream (`postgres/holds`).
        LedgerWrite::Cancel { order_id, at } => {
            let done = sqlx::query(
                "UPDATE orders SET state = 'cancelled', cancelled_at = $1 \
                 WHERE order_id = $2 AND state IN ('active', 'confirmed') RETURNING campaign_id",
            )
            .bind(micros(*at))
            .bind(order_id)
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(row) = done {
                let campaign_id: String = row.get(0);
                event(conn, &campaign_id, "cancel", order_id.clone(), *at).await?;
            }
            Ok(())
        }
        LedgerWrite::AdminKey { key, at } => {
            Ok(crate::ledger::admin_keys::insert_pg(conn, key, *at).await?)
        }
        LedgerWrite::Limits {
            campaign_id,
            limits,
            at,
        } => {
            let json = serde_json::to_string(limits)?;
            sqlx::query(
                "INSERT INTO campaign_limits (campaign_id, limits, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (campaign_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at",
            )
            .bind(campaign_id)
            .bind(&json)
            .bind(micros(*at))
            .execute(&mut *conn)
            .await?;
            Ok(event(conn, campaign_id, "limits", json, *at).await?)
        }
    }
}
