//! The one error type every backend returns; the HTTP layer maps it to status + JSON body.

/// Why a request was not processed. Each variant maps to one stable `code` of the API contract.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Malformed or out-of-range input (400 `invalid_request`).
    #[error("{0}")]
    Invalid(String),
    /// Missing or wrong admin token (401 `unauthorized`).
    #[error("{0}")]
    Unauthorized(String),
    /// Unknown campaign or order (404 `not_found`).
    #[error("{0}")]
    NotFound(String),
    /// The request contradicts current state: duplicate id, duplicate code, resume of a closed
    /// campaign (409 `conflict`).
    #[error("{0}")]
    Conflict(String),
    /// A feed cursor older than the oldest event kept: the events in between were removed by
    /// retention (410 `cursor_expired`).
    #[error("{0}")]
    Gone(String),
    /// Refused before processing to protect the service (503 `overloaded`, with Retry-After).
    #[error("{0}")]
    Overloaded(String),
    /// The engine or ledger failed; nothing was changed (503 `internal`, with Retry-After).
    #[error("{0}")]
    Unavailable(String),
    /// The request may or may not have taken effect: the ledger failed while committing it
    /// (503 `internal`, `Retry-After`, and `Seckill-Outcome: unknown`). A retry with the same
    /// Idempotency-Key answers what really happened.
    #[error("{0}")]
    OutcomeUnknown(String),
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    pub fn campaign_not_found(id: &str) -> Self {
        Error::NotFound(format!("campaign '{id}' does not exist"))
    }

    pub fn order_not_found(id: &str) -> Self {
        Error::NotFound(format!("order '{id}' does not exist"))
    }

    /// A write the ledger refused outright (disk full, ledger closed): nothing was changed.
    /// Not logged here: the writer logs the fault once, not once per request.
    pub fn not_committed(reason: &str) -> Self {
        Error::Unavailable(format!(
            "the change could not be committed to the ledger ({reason}); nothing was changed, retry later"
        ))
    }

    /// Wraps an infrastructure failure; the detail goes to the log, not to the client.
    pub fn unavailable(context: &str, err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "{context}");
        Error::Unavailable(format!("{context}; nothing was changed, retry later"))
    }
}
