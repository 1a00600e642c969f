//! The typed error of [`Ledger::apply`](super::Ledger::apply): what a failed batch left in
//! the ledger, so the engine knows whether to give the reservations back (nothing written),
//! re-read its state (the ledger contradicts it), or re-read because anything may be on disk.
//! Each driver decides which one it is where it knows (`sqlite/writer.rs`,
//! `postgres/writes.rs`); no caller has to guess from an error's text.

/// Why a batch did not become (known to be) durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteFault {
    /// Nothing of the batch is in the ledger (rolled back, connection verified).
    #[error("{0}")]
    NotCommitted(String),
    /// Rolled back, but the ledger contradicts the engine (an order id it already holds):
    /// the engine's state must be re-read before anything else is acknowledged.
    #[error("the ledger contradicts the engine's state: {0}")]
    Diverged(String),
    /// The batch may or may not be durable (an I/O error at or after COMMIT).
    #[error("the commit's outcome is unknown: {0}")]
    Unknown(String),
}
