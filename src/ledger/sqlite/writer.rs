//! The SQLite ledger's single writer connection, and the rule it exists for: a batch counts as
//! durable only when SQLite confirmed its COMMIT, and a failed batch leaves nothing behind.
//!
//! Transactions are opened and closed with plain `BEGIN IMMEDIATE` / `COMMIT` / `ROLLBACK`
//! statements rather than sqlx's transaction guard. After a failed COMMIT (a full disk) the
//! guard's idea of the nesting depth and SQLite's own state can disagree; later batches then
//! ran as savepoints inside a transaction that was never committed, and every claim after the
//! disk filled up was answered `won` for an order that never reached the file. Here, after any
//! failure the writer rolls back and asks SQLite itself (`sqlite3_get_autocommit`) whether the
//! connection is back outside any transaction; if it is not, or the rollback failed, the
//! connection is closed (which discards whatever it had open) and a fresh one is opened for the
//! next batch.
//!
//! Failures are classified the way the engine must react to them ([`WriteFault`]): refused
//! before COMMIT or with `SQLITE_FULL`/`SQLITE_BUSY` at COMMIT → nothing was written; a unique
//! violation → the ledger holds something the engine does not know (re-read it); any other
//! error from COMMIT (an I/O error, a failed fsync) → the batch may or may not be durable, so
//! the connection is never trusted again and the engine re-reads the ledger.

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};

use crate::ledger::WriteFault;

// Primary SQLite result codes (the low byte of an extended code).
const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;
const SQLITE_FULL: i32 = 13;

fn primary_code(e: &sqlx::Error) -> Option<i32> {
    let code = e.as_database_error()?.code()?;
    code.parse::<i32>().ok().map(|c| c & 0xff)
}

/// Classifies the error of a statement run inside the transaction, before COMMIT.
pub(super) fn statement_fault(e: &anyhow::Error) -> WriteFault {
    if let Some(fault) = e.downcast_ref::<WriteFault>() {
        return fault.clone();
    }
    let unique = e
        .downcast_ref::<sqlx::Error>()
        .and_then(sqlx::Error::as_database_error)
        .is_some_and(|d| d.is_unique_violation());
    // A rule of the ledger (`ledger::invariants`) refused the write: memory contradicts it.
    if unique || crate::ledger::invariants::refused_rule(e).is_some() {
        WriteFault::Diverged(format!("{e:#}"))
    } else {
        WriteFault::NotCommitted(format!("{e:#}"))
    }
}

/// Classifies the error of COMMIT itself.
fn commit_fault(e: &sqlx::Error) -> WriteFault {
    match primary_code(e) {
        Some(SQLITE_FULL | SQLITE_BUSY | SQLITE_LOCKED) => WriteFault::NotCommitted(e.to_string()),
        _ => WriteFault::Unknown(e.to_string()),
    }
}

/// The writer connection, reopened whenever its state cannot be vouched for.
pub(super) struct Writer {
    conn: Option<SqliteConnection>,
    opts: SqliteConnectOptions,
    /// Set at shutdown: never reopen.
    closed: bool,
}

impl Writer {
    pub(super) fn new(conn: SqliteConnection, opts: SqliteConnectOptions) -> Self {
        Self {
            conn: Some(conn),
            opts,
            closed: false,
        }
    }

    /// The connection, opening a fresh one if the last was discarded.
    pub(super) async fn conn(&mut self) -> anyhow::Result<&mut SqliteConnection> {
        anyhow::ensure!(!self.closed, "the ledger is closed (shutting down)");
        if self.conn.is_none() {
            let conn = SqliteConnection::connect_with(&self.opts).await?;
            tracing::info!("ledger writer connection reopened");
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("just opened"))
    }

    /// Closes the connection; the next batch opens a fresh one. Closing discards any open
    /// transaction, so nothing half-written can be committed later.
    pub(super) fn discard(&mut self) {
        self.conn = None;
    }

    /// Closes the connection for good.
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.conn = None;
    }

    /// Starts a write transaction, taking the write lock at once.
    pub(super) async fn begin(&mut self) -> Result<&mut SqliteConnection, WriteFault> {
        let conn = self
            .conn()
            .await
            .map_err(|e| WriteFault::NotCommitted(format!("cannot open the ledger: {e:#}")))?;
        if let Err(e) = sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await {
            let fault = WriteFault::NotCommitted(e.to_string());
            self.roll_back().await;
            return Err(fault);
        }
        Ok(self.conn.as_mut().expect("begun on it"))
    }

    /// Commits the open transaction; on failure leaves the writer ready for the next batch.
    pub(super) async fn commit(&mut self) -> Result<(), WriteFault> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(WriteFault::NotCommitted(
                "the ledger connection was lost".into(),
            ));
        };
        match sqlx::query("COMMIT").execute(&mut *conn).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let fault = commit_fault(&e);
                match fault {
                    WriteFault::Unknown(_) => self.discard(),
                    _ => self.roll_back().await,
                }
                Err(fault)
            }
        }
    }

    /// Rolls back whatever is open and checks SQLite is in autocommit mode again; discards
    /// the connection when either fails.
    pub(super) async fn roll_back(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        // SQLite may already have rolled back by itself (it does on SQLITE_FULL): then this
        // fails with "no transaction is active", which is the state wanted.
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
        if !autocommit(conn).await {
            tracing::warn!("ledger writer still inside a transaction after ROLLBACK; reopening");
            self.discard();
        }
    }
}

/// SQLite's own answer to "is this connection outside any transaction?".
async fn autocommit(conn: &mut SqliteConnection) -> bool {
    match conn.lock_handle().await {
        Ok(mut handle) => {
            let raw = handle.as_raw_handle();
            // SAFETY: the handle is locked for the duration of the call, and
            // sqlite3_get_autocommit only reads the connection's flag.
            unsafe { libsqlite3_sys::sqlite3_get_autocommit(raw.as_ptr()) != 0 }
        }
        Err(_) => false,
    }
}
