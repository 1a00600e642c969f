//! Storage of admin Idempotency-Keys (see `domain::AdminKey`), in both ledgers. The key is
//! inserted by the same transaction as the change it guards and looked up under the same lock
//! that serialises the operation, so a retry sees it exactly when the change is durable.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, SqliteConnection, SqlitePool};

use super::rows::micros;
use crate::domain::AdminKey;

/// (op, fingerprint) the ledger remembers for a key.
pub type Remembered = Option<(String, String)>;

pub(super) async fn insert_sqlite(
    conn: &mut SqliteConnection,
    k: &AdminKey,
    at: DateTime<Utc>,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO admin_keys (scope, key, op, fingerprint, created_at) VALUES (?, ?, ?, ?, ?) \
         ON CONFLICT DO NOTHING",
    )
    .bind(&k.scope)
    .bind(&k.key)
    .bind(&k.op)
    .bind(&k.fingerprint)
    .bind(micros(at))
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn insert_pg(
    conn: &mut PgConnection,
    k: &AdminKey,
    at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO admin_keys (scope, key, op, fingerprint, created_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
    )
    .bind(&k.scope)
    .bind(&k.key)
    .bind(&k.op)
    .bind(&k.fingerprint)
    .bind(micros(at))
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn lookup_sqlite(pool: &SqlitePool, k: &AdminKey) -> anyhow::Result<Remembered> {
    Ok(
        sqlx::query_as("SELECT op, fingerprint FROM admin_keys WHERE scope = ? AND key = ?")
            .bind(&k.scope)
            .bind(&k.key)
            .fetch_optional(pool)
            .await?,
    )
}

/// Looks a key up inside a PostgreSQL transaction (after the campaign's row lock).
pub async fn lookup_pg(conn: &mut PgConnection, k: &AdminKey) -> Result<Remembered, sqlx::Error> {
    sqlx::query_as("SELECT op, fingerprint FROM admin_keys WHERE scope = $1 AND key = $2")
        .bind(&k.scope)
        .bind(&k.key)
        .fetch_optional(conn)
        .await
}

pub(super) async fn prune_sqlite(
    conn: &mut SqliteConnection,
    before: DateTime<Utc>,
) -> anyhow::Result<u64> {
    let done = sqlx::query("DELETE FROM admin_keys WHERE created_at < ?")
        .bind(micros(before))
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

pub async fn prune_pg(conn: &mut PgConnection, before: DateTime<Utc>) -> anyhow::Result<u64> {
    let done = sqlx::query("DELETE FROM admin_keys WHERE created_at < $1")
        .bind(micros(before))
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
