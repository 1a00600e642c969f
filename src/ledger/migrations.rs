//! Running the embedded ledger's migrations, with the one exception their history needs.
//!
//! A committed migration is never edited: sqlx records each applied migration's SHA-384 and
//! refuses to start when a file's bytes no longer match. Migration 0006 (the lean orders table)
//! was edited once after it had been committed, so two kinds of ledger exist in the field: those
//! that ran its first bytes and those that ran the edited ones (the same table, with the state
//! CHECK as an OR chain instead of an IN list). 0006 is back to its first bytes and 0007 makes
//! the change as a migration of its own; a ledger that recorded the edited file's checksum is
//! re-recorded with the first one before sqlx checks, and 0007 then rebuilds its orders table
//! into the same shape it already had. `scripts/check-migrations.sh` (run by CI) keeps any
//! other committed migration from changing.

use anyhow::Context;
use sqlx::migrate::Migrator;
use sqlx::SqliteConnection;

/// SHA-384 of the edited 0006 (commit 93a2cd4 until its restoration), the only checksum
/// besides a file's own that the ledger accepts.
const EDITED_0006: &str = "72aef6742d1f8e137425a90cbe7a3c7db637e81b2777ce80927485e45e2deaad\
                           73689a8fc2b0ba67bcfd8c13e42a1189";

static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");

/// Applies every pending migration of the embedded ledger on `conn`.
pub(super) async fn run_sqlite(conn: &mut SqliteConnection) -> anyhow::Result<()> {
    accept_edited_0006(conn).await?;
    SQLITE.run(conn).await.context("ledger migration failed")
}

/// Re-records version 6 with its file's checksum where the ledger ran the edited file.
async fn accept_edited_0006(conn: &mut SqliteConnection) -> anyhow::Result<()> {
    let table: Option<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_optional(&mut *conn)
    .await?;
    if table.is_none() {
        return Ok(());
    }
    let first = SQLITE
        .iter()
        .find(|m| m.version == 6)
        .context("migration 0006 is missing from the build")?;
    let edited = hex::decode(EDITED_0006).expect("a hex constant");
    let fixed = sqlx::query(
        "UPDATE _sqlx_migrations SET checksum = ?1 WHERE version = 6 AND checksum = ?2",
    )
    .bind(first.checksum.as_ref())
    .bind(edited)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if fixed > 0 {
        tracing::info!("ledger ran the edited migration 0006; recorded with its first bytes");
    }
    Ok(())
}
