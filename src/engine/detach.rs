//! Admin operations run detached from their request.
//!
//! An HTTP handler's future is dropped when the client disconnects. An admin operation that
//! writes the ledger and then changes the gate (or the other way round) must never stop
//! between the two, so both engines run each one on its own task through [`detached`]: the
//! request only awaits the task's answer, and the task finishes whatever happens to the
//! request. One mechanism for every operation, rather than a careful ordering at each call
//! site.

use std::future::Future;
use std::sync::{Arc, Weak};

use crate::domain::Error;

/// Runs `op(engine)` to completion on its own task and returns its answer.
pub(crate) async fn detached<E, T, Fut>(
    engine: &Weak<E>,
    op: impl FnOnce(Arc<E>) -> Fut,
) -> Result<T, Error>
where
    E: Send + Sync + 'static,
    T: Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    let engine = engine.upgrade().ok_or_else(|| {
        Error::Unavailable("the engine is shutting down; nothing was changed".into())
    })?;
    tokio::spawn(op(engine))
        .await
        .unwrap_or_else(|e| Err(Error::unavailable("the admin operation failed", e)))
}
